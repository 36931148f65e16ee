#!/usr/bin/env bash
# What memory snapshots cost the training loop (docs/checkpoints.md, "Memory snapshots"): the same
# eft-train run with a snapshot every step (EFT_SNAPSHOT_DIR in tmpfs, as eft-worker gives it) and
# without, interleaved round by round so both see the same machine load; median tokens/s of the
# steps after the first, the ratio, and the snapshots' size and write time from their events.
# eft-train runs by hand here (no worker), so this is the rank's share: the write into the node's
# memory, never the network; the worker's replication to a peer runs beside it in a real cluster.
#
# Usage: [MODEL=DIR] [LORA=1] [W=2] [STEPS=12] [GB=4W] bench/checkpoint/memory_snapshot_overhead.sh ROUNDS EFT_TRAIN
#   MODEL: a model directory (e.g. $(scripts/real-model.sh) for SmolLM2-135M); default: the ~20M
#   Llama of bench/trainer/bench_model.sh. LORA=1: LoRA r=16 on every linear layer instead of full
#   fine-tuning. Sequences of 512 tokens, global batch GB (default 4 x W), bf16, full activation
#   checkpointing.
set -euo pipefail

ROUNDS=${1:-3}
TRAIN=${2:?usage: $0 ROUNDS EFT_TRAIN}
W=${W:-2}
STEPS=${STEPS:-12}
GB=${GB:-$((4 * W))}
HERE=$(cd "$(dirname "$0")" && pwd)
DIR=$(mktemp -d /tmp/eft-bench-snapshots-XXXXXX)
SHM=$(mktemp -d /dev/shm/eft-bench-snapshots-XXXXXX)
trap 'rm -rf "$DIR" "$SHM"' EXIT
# shellcheck source=../trainer/bench_model.sh
source "$HERE/../trainer/bench_model.sh"

if [ -n "${MODEL:-}" ]; then
  model=$MODEL
  vocab=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$MODEL/config.json")
  write_random_rows "$DIR/data.jsonl" "$vocab" 512
else
  write_bench_model "$TRAIN" "$DIR"
  model=$DIR/model
fi
lora=""
[ "${LORA:-0}" = 1 ] && lora=", lora: {r: 16, alpha: 32, target_modules: all-linear}"

spec() {  # spec FILE MEMORY_EVERY
  cat >"$1" <<YAML
name: bench-snapshots
model: $model
data: {train: $DIR/data.jsonl, max_seq_len: 512, packing: false}
training: {global_batch_size: $GB, micro_batch_size: 1, lr: 1.0e-4, precision: bf16, activation_checkpointing: full, max_steps: $STEPS$lora}
checkpoint: {dir: $DIR/ckpt, every_steps: 0, memory_every_steps: $2}
YAML
}
spec "$DIR/off.yaml" 0
spec "$DIR/on.yaml" 1

echo "| round | snapshots | tokens/s (median, steps 2-$STEPS) | MiB per rank | write s (median) |"
echo "|---|---|---|---|---|"
for round in $(seq "$ROUNDS"); do
  for variant in off on; do
    rm -rf "$DIR/ckpt" "${SHM:?}"/*
    env_dir=""
    [ "$variant" = on ] && env_dir="EFT_SNAPSHOT_DIR=$SHM"
    log="$DIR/r$round-$variant"
    env $env_dir EFT_EVENTS_FD=3 "$TRAIN" train --config "$DIR/$variant.yaml" --nproc "$W" >"$log.log" 2>&1 3>"$log.events" ||
      { echo "| $round | $variant | failed: $log.log |"; tail -5 "$log.log" >&2; continue; }
    /usr/bin/python3 - "$log.events" "$round" "$variant" <<'PY'
import json, statistics, sys
path, rnd, variant = sys.argv[1:]
tps, bytes_, secs = [], [], []
for line in open(path):
    e = json.loads(line)
    if e.get("event") == "step" and e["step"] > 1:
        tps.append(e["tokens_per_s"])
    elif e.get("event") == "memory_snapshot" and e.get("rank") == 0:
        bytes_.append(e["bytes"]); secs.append(e.get("seconds", 0))
mib = f"{bytes_[0] / 2**20:.1f}" if bytes_ else "-"
sec = f"{statistics.median(secs):.3f}" if secs else "-"
# The write runs beside the next step; what it costs the loop (cores shared with the compute, the
# next update waiting for it) shows in tokens/s.
print(f"| {rnd} | {variant} | {statistics.median(tps):.0f} | {mib} | {sec} |")
PY
  done
done | tee "$DIR/table.md"
/usr/bin/python3 - "$DIR/table.md" <<'PY'
import statistics, sys
by = {"off": [], "on": []}
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 3 and cells[1] in by:
        try:
            by[cells[1]].append(float(cells[2]))
        except ValueError:
            pass
if by["off"] and by["on"]:
    off, on = statistics.median(by["off"]), statistics.median(by["on"])
    print(f"\nmedian over rounds: without {off:.0f} tokens/s, with a snapshot every step {on:.0f} tokens/s: "
          f"{on / off:.3f}x ({(1 - on / off) * 100:+.1f}% overhead)")
PY
