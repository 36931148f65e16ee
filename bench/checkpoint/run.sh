#!/usr/bin/env bash
# Checkpoint save and load throughput of eft-train against the disk's own sequential bandwidth.
#
# Usage: [SIZE=50m|0.5b] bench/checkpoint/run.sh [BUILD_DIR] [CKPT_PARENT_DIR]
# SIZE=50m (default): a ~50M-parameter Llama (fp32, so a sharded checkpoint is 12 bytes per
# parameter: weights and both AdamW moments) trains at world size 2, seq 128, with a sharded save
# every 2 steps and a full one every 8; then resumes from each kind at world sizes 1 and 2.
# SIZE=0.5b: a Qwen2.5-0.5B-shaped model (494M parameters, bf16 weights, bf16 compute, seq 1024,
# one sequence per rank and step) at world size 2: sharded saves at steps 2 and 4, full ones at 3
# and at the end (6); resumes at world size 2 only. Needs ~20 GB of RAM and ~20 GB under
# CKPT_PARENT_DIR, and takes ~15 minutes on 2 cores.
# In the same run, dd measures the disk under CKPT_PARENT_DIR (default /tmp): write with fdatasync,
# read with O_DIRECT. Prints markdown tables for docs/benchmarks.md; logs and events stay in the
# printed directory.
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
PARENT=${2:-/tmp}
TRAIN="$BUILD/trainer/eft-train"
DIR=$(mktemp -d "$PARENT/eft-bench-ckpt-XXXXXX")
PY=${PY:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}  # the project's PyTorch (scripts/install-python.sh)

echo "## disk (dd, 1 GiB, $PARENT)"
dd if=/dev/zero of="$DIR/dd.bin" bs=4M count=256 conv=fdatasync 2>"$DIR/dd-write.txt"
dd if="$DIR/dd.bin" of=/dev/null bs=4M iflag=direct 2>"$DIR/dd-read.txt"
dd if="$DIR/dd.bin" of=/dev/null bs=4M 2>"$DIR/dd-read-cached.txt"
rm -f "$DIR/dd.bin"
echo "write (fdatasync): $(tail -1 "$DIR/dd-write.txt" | awk -F, '{print $NF}')"
echo "read (O_DIRECT):   $(tail -1 "$DIR/dd-read.txt" | awk -F, '{print $NF}')"
echo "read (page cache): $(tail -1 "$DIR/dd-read-cached.txt" | awk -F, '{print $NF}')"
echo

SIZE=${SIZE:-50m}
if [ "$SIZE" = 0.5b ]; then
  "$TRAIN" init-model --arch qwen2 --hidden 896 --layers 24 --heads 14 --kv-heads 2 --intermediate 4864 \
    --vocab-size 151936 --tie-embeddings --dtype bfloat16 --seed 1 --out "$DIR/model" >/dev/null
  VOCAB=151936 SEQ=1024 EXAMPLES=12 PRECISION=bf16 BATCH=2 EVERY=2 FULL_EVERY=3 RESUME_WORLDS="2"
  RESUME_SHARDED=step-4 RESUME_FULL=step-3
else
  "$TRAIN" init-model --arch llama --hidden 768 --layers 6 --heads 12 --kv-heads 4 --intermediate 2048 \
    --vocab-size 16000 --tie-embeddings --dtype float32 --seed 1 --out "$DIR/model" >/dev/null
  VOCAB=16000 SEQ=128 EXAMPLES=64 PRECISION=fp32 BATCH=4 EVERY=2 FULL_EVERY=8 RESUME_WORLDS="2 1"
  RESUME_SHARDED=step-6 RESUME_FULL=step-8
fi
$PY - "$DIR/data.jsonl" "$VOCAB" "$SEQ" "$EXAMPLES" <<'PY'
import json, random, sys
random.seed(0)
vocab, seq, n = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
with open(sys.argv[1], "w") as f:
    for _ in range(n):
        f.write(json.dumps({"input_ids": [random.randrange(1, vocab) for _ in range(seq)]}) + "\n")
PY
cat >"$DIR/job.yaml" <<YAML
name: bench-ckpt
model: $DIR/model
data: {train: $DIR/data.jsonl, max_seq_len: $SEQ}
training: {global_batch_size: $BATCH, micro_batch_size: 1, lr: 1.0e-4, precision: $PRECISION,
           activation_checkpointing: full, epochs: 1}
checkpoint: {dir: $DIR/ckpt, every_steps: $EVERY, full_every_steps: $FULL_EVERY, keep_last: 10}
YAML
# 50m: 16 steps, sharded saves at 2, 4, 6, 10, 12, 14, full at 8 and 16 (the end).
# 0.5b: 6 steps, sharded saves at 2 and 4, full at 3 and 6 (the end).
EFT_EVENTS_FD=3 "$TRAIN" train --config "$DIR/job.yaml" --nproc 2 --threads 1 >"$DIR/train.log" 2>&1 3>"$DIR/train.events"

resume() {  # name nproc checkpoint
  EFT_EVENTS_FD=3 EFT_DEBUG_KILL_AT_STEP=$(( $(basename "$3" | cut -d- -f2) + 1 )) \
    "$TRAIN" train --config "$DIR/job.yaml" --nproc "$2" --threads $((2 / $2)) --resume "$3" \
    >"$DIR/$1.log" 2>&1 3>"$DIR/$1.events" || true
}
sync
RESUMES=""
for w in $RESUME_WORLDS; do
  resume "resume-sharded-w$w" "$w" "$DIR/ckpt/$RESUME_SHARDED"
  resume "resume-full-w$w" "$w" "$DIR/ckpt/$RESUME_FULL"
  RESUMES="$RESUMES resume-sharded-w$w resume-full-w$w"
done

$PY - "$DIR" "$RESUMES" <<'PY'
import glob, json, os, statistics, sys
d = sys.argv[1]
ev = [json.loads(l) for l in open(os.path.join(d, "train.events")) if l.strip()]
steps = {e["step"]: e["seconds"] for e in ev if e["event"] == "step"}
ck = [e for e in ev if e["event"] == "checkpoint"]
params = json.load(open(os.path.join(d, "model", "config.json")))
print("## save (world size 2, %d-step run)" % max(steps))
print()
step_median = statistics.median(steps.values())
print("| kind | step | MiB | write s | MiB/s | step loop waited s | waited / median step |")
print("|---|---|---|---|---|---|---|")
for e in ck:
    mib = e["bytes"] / 2**20
    print(f"| {e['kind']} | {e['step']} | {mib:.0f} | {e['seconds']:.2f} | {mib / e['seconds']:.0f} | "
          f"{e['stall_seconds']:.3f} | {100 * e['stall_seconds'] / step_median:.1f}% |")
mem = [e for e in ev if e["event"] == "memory"]
for m in mem:
    print(f"\nrank {m['rank']}: {m['persistent_bytes'] / 2**30:.2f} GiB persistent, peak RSS {m['peak_rss_bytes'] / 2**30:.2f} GiB "
          "(after the first step)")
saved = {e["step"] for e in ck if e["kind"] == "sharded"}
with_save = [steps[s + 1] for s in saved if s + 1 in steps]
without = [v for s, v in steps.items() if s > 2 and s not in saved and (s - 1) not in saved]
print()
print(f"step time: median {statistics.median(without):.2f} s without a save in flight, "
      f"{statistics.median(with_save):.2f} s for the step after a sharded save began (the write shares the 2 cores)")
print()
print("## load")
print()
print("| from | world size | MiB | verify s (rank 0, CRC of every file) | load s | load MiB/s |")
print("|---|---|---|---|---|---|")
for name in sys.argv[2].split():
    rv = [json.loads(l) for l in open(os.path.join(d, name + ".events")) if l.strip()]
    r = [e for e in rv if e["event"] == "resumed"]
    if not r:
        print(f"| {name} | failed, see {d}/{name}.log |")
        continue
    r = r[0]
    mib = r["bytes"] / 2**20
    print(f"| {r['kind']} step-{r['step']} | {name[-1]} | {mib:.0f} | {r['verify_seconds']:.2f} | {r['load_seconds']:.2f} | {mib / max(r['load_seconds'], 1e-9):.0f} |")
PY
echo
echo "logs: $DIR (delete when done: the checkpoints take several GB)"
