#!/usr/bin/env bash
# eft-train's malloc settings on blocks above glibc's 32 MiB mmap threshold ceiling
# (docs/architecture.md, "Threads and memory"): a model with a real vocabulary (Qwen3's 151,680
# tokens, hidden 64, 2 layers: the demo's shape; its embedding and that gradient are 37 MiB each),
# W=1 fp32, trained with eft-train's settings ("current": no mmap at all) and with the earlier ones
# ("threshold only": the same thresholds given through GLIBC_TUNABLES, so blocks above 32 MiB are
# still mapped per allocation), interleaved, REPS rounds. Per run: median step seconds (after two
# warm-up steps), its compute and optimizer parts, minor page faults per step and peak RSS.
#
# Usage: bench/trainer/large_blocks.sh [BUILD_DIR] [REPS] [STEPS]
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
REPS=${2:-3}
STEPS=${3:-8}
TRAIN="$BUILD/trainer/eft-train"
DIR=$(mktemp -d /tmp/eft-bench-large-blocks-XXXXXX)
PY=${PY:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}  # the project's PyTorch (scripts/install-python.sh)
OLD="glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"

"$TRAIN" init-model --arch qwen3 --hidden 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --intermediate 128 \
  --vocab-size 151680 --tie-embeddings --dtype float32 --seed 1 --initializer-range 0.1 --out "$DIR/model" >/dev/null
$PY - "$DIR/data.jsonl" <<'PY'
# Chat-like rows: 40 tokens, the first 25 a prompt (label -100).
import json, random, sys
random.seed(0)
with open(sys.argv[1], "w") as f:
    for _ in range(512):
        ids = [random.randrange(1, 151680) for _ in range(40)]
        f.write(json.dumps({"input_ids": ids, "labels": [-100] * 25 + ids[25:]}) + "\n")
PY
cat >"$DIR/spec.yaml" <<YAML
name: large-blocks
model: $DIR/model
data: {train: $DIR/data.jsonl, format: pretokenized, max_seq_len: 64}
resources: {nodes: {min: 1, max: 1}, gpus_per_node: 1}
training: {epochs: 1, global_batch_size: 8, micro_batch_size: 8, lr: 1.0e-3, precision: fp32}
checkpoint: {dir: $DIR/ckpt, every_steps: 0}
YAML

run() {  # run VARIANT ROUND [ENV...]
  local name=$1-$2
  shift 2
  rm -rf "$DIR/ckpt"
  env "$@" EFT_EVENTS_FD=3 /usr/bin/time -f "%R %M" -o "$DIR/$name.time" \
    "$TRAIN" train --config "$DIR/spec.yaml" --threads 1 --max-steps "$STEPS" 3>"$DIR/$name.events" >"$DIR/$name.log" 2>&1
}
for r in $(seq "$REPS"); do
  echo "round $r/$REPS (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  run current "$r"
  run threshold-only "$r" GLIBC_TUNABLES="$OLD"
done

$PY - "$DIR" "$REPS" "$STEPS" <<'PY'
import json, statistics, sys
d, reps, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
print("| malloc | step s | compute s | optimizer s | page faults / step | peak RSS MiB |")
print("| --- | --- | --- | --- | --- | --- |")
for variant in ("threshold-only", "current"):
    cols = {k: [] for k in ("seconds", "compute_s", "optimizer_s", "faults", "rss")}
    for r in range(1, reps + 1):
        ev = [json.loads(l) for l in open(f"{d}/{variant}-{r}.events")]
        ev = [e for e in ev if e.get("event") == "step"][2:]
        for k in ("seconds", "compute_s", "optimizer_s"):
            cols[k].append(statistics.median(e[k] for e in ev))
        faults, rss_kb = map(int, open(f"{d}/{variant}-{r}.time").read().split()[-2:])
        cols["faults"].append(faults / steps)  # the whole run's, start-up included, per step
        cols["rss"].append(rss_kb / 1024)
    cell = lambda v, f: f"{f % statistics.median(v)} ({f % min(v)}-{f % max(v)})"
    print(f"| {variant} | {cell(cols['seconds'], '%.2f')} | {cell(cols['compute_s'], '%.2f')} | "
          f"{cell(cols['optimizer_s'], '%.3f')} | {cell(cols['faults'], '%.0f')} | {cell(cols['rss'], '%.0f')} |")
print(f"\n{reps} interleaved rounds of {steps} steps; median (min-max) over rounds; logs in {d}")
PY
