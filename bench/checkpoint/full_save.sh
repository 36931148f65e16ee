#!/usr/bin/env bash
# Full checkpoint save time at real size, without real-size training steps: a Qwen2.5-0.5B-shaped
# model (494M parameters, bf16; as run.sh SIZE=0.5b) trains 2 steps of 16-token sequences at world
# size 2, with a full save after step 1 and the final one after step 2 (6.9 GB each: the bf16 HF
# model and optimizer.safetensors with fp32 moments and masters). Each save is reported with rank
# 0's split (eft-train's log line): time blocked in gathers, fp32 -> bf16 conversion, writing, and
# (binaries with checkpoint.full_write, where every rank writes its own slices) waiting for the
# other ranks; "-" where an older binary's line has no such field.
#
# Usage: [SIZE=0.5b|50m] bench/checkpoint/full_save.sh ROUNDS CKPT_PARENT_DIR EFT_TRAIN [EFT_TRAIN...]
# Several eft-train binaries (e.g. a copy of an older build) run interleaved, ROUNDS times each, so
# they see the same machine load. dd measures the disk under CKPT_PARENT_DIR before every round.
# Needs ~7 GB of RAM and ~15 GB of disk under CKPT_PARENT_DIR (default /tmp).
set -euo pipefail

ROUNDS=${1:-1}
PARENT=${2:-/tmp}
shift 2
[ $# -ge 1 ] || { echo "usage: $0 ROUNDS CKPT_PARENT_DIR EFT_TRAIN [EFT_TRAIN...]" >&2; exit 2; }
DIR=$(mktemp -d "$PARENT/eft-bench-full-XXXXXX")
PY=${PY:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}  # the project's PyTorch (scripts/install-python.sh)

if [ "${SIZE:-0.5b}" = 0.5b ]; then
  "$1" init-model --arch qwen2 --hidden 896 --layers 24 --heads 14 --kv-heads 2 --intermediate 4864 \
    --vocab-size 151936 --tie-embeddings --dtype bfloat16 --seed 1 --out "$DIR/model" >/dev/null
else  # SIZE=50m: run.sh's ~50M-parameter Llama, here in bf16 (0.7 GB per full save), for quick comparisons
  "$1" init-model --arch llama --hidden 768 --layers 6 --heads 12 --kv-heads 4 --intermediate 2048 \
    --vocab-size 16000 --tie-embeddings --dtype bfloat16 --seed 1 --out "$DIR/model" >/dev/null
fi
$PY - "$DIR/data.jsonl" <<'PY'
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(4):
        f.write(json.dumps({"input_ids": [random.randrange(1, 16000) for _ in range(16)]}) + "\n")
PY
cat >"$DIR/job.yaml" <<YAML
name: bench-full-save
model: $DIR/model
data: {train: $DIR/data.jsonl, max_seq_len: 16}
training: {global_batch_size: 2, micro_batch_size: 1, lr: 1.0e-4, precision: bf16, epochs: 1}
checkpoint: {dir: $DIR/ckpt, every_steps: 0, full_every_steps: 1, keep_last: 1}
YAML

echo "| round | binary | step | MiB | save s | MiB/s | % of dd | gathers s | conversion s | writing s | waiting s | dd MB/s | load avg |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    dd if=/dev/zero of="$DIR/dd.bin" bs=4M count=256 conv=fdatasync 2>"$DIR/dd.txt"
    rm -f "$DIR/dd.bin"
    DD=$(tail -1 "$DIR/dd.txt" | awk -F, '{print $NF}' | awk '{v=$1; if ($2=="GB/s") v*=1000; print v}')
    LOAD=$(cut -d' ' -f1 /proc/loadavg)
    rm -rf "$DIR/ckpt"
    log="$DIR/r$round-b$i"
    EFT_EVENTS_FD=3 "$bin" train --config "$DIR/job.yaml" --nproc 2 --threads 1 >"$log.log" 2>&1 3>"$log.events" ||
      { echo "| $round | $bin | failed, see $log.log |"; continue; }
    $PY - "$log" "$round" "$bin" "$DD" "$LOAD" <<'PY'
import json, re, sys
log, rnd, binary, dd, load = sys.argv[1:]
splits = {}
for line in open(log + ".log"):
    # Older binaries end after "writing W s"; newer ones add ", waiting for the other ranks X s (...)".
    m = re.search(r"full checkpoint at step (\d+) written in ([\d.e+-]+) s: gathers ([\d.e+-]+) s, conversion ([\d.e+-]+) s, writing ([\d.e+-]+) s(?:, waiting for the other ranks ([\d.e+-]+) s)?", line)
    if m:
        splits[int(m.group(1))] = [float(x) if x is not None else None for x in m.groups()[1:]]
for l in open(log + ".events"):
    e = json.loads(l)
    if e.get("event") != "checkpoint":
        continue
    mib = e["bytes"] / 2**20
    s = e["seconds"]
    g = splits.get(e["step"], [float("nan")] * 5)
    pct = 100 * (e["bytes"] / s / 1e6) / float(dd)
    wait = "-" if g[4] is None else f"{g[4]:.1f}"
    print(f"| {rnd} | {binary} | {e['step']} | {mib:.0f} | {s:.1f} | {mib / s:.0f} | {pct:.0f}% | {g[1]:.1f} | {g[2]:.1f} | {g[3]:.1f} | {wait} | {dd} | {load} |")
PY
  done
done
rm -rf "$DIR/ckpt"
echo
echo "logs: $DIR"
