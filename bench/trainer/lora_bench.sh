#!/usr/bin/env bash
# Full fine-tuning against LoRA (docs/lora.md) in eft-train on the same model, data and batch as
# bench/trainer/compare.sh (the ~20M Llama, sequences of 512, global batch 8 in micro-batches of 1,
# bf16, activation checkpointing, sharding grad_op) at world size 1 and 2. LoRA: r 16, alpha 32,
# all-linear. Runs are interleaved (full and LoRA per case and round, the order swapped every other
# round so neither always runs first); a run's tokens/s is the median of its steps after two warm-up
# steps; the table gives the median over rounds with the min-max spread, and the ratio of medians.
#
# Usage: bench/trainer/lora_bench.sh [BUILD_DIR] [REPS] [STEPS] [CASES]
#   CASES: space-separated of w1 w2 (default both)
#   EFT_ARGS: extra `eft-train train` flags; EFT_ENV: extra environment (VAR=value ...)
#   LORA_YAML: the training.lora mapping (default "{r: 16, alpha: 32, target_modules: all-linear}")
# Prints the load average before and after, and a markdown table: tokens/s, persistent bytes and
# peak RSS per rank (each rank's `memory` event, after its first step: parameters, gradients and
# optimizer state; VmHWM), and rank 0's step timeline (medians of data_s / compute_s / comm_wait_s /
# optimizer_s). Logs and events stay in the printed directory.
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
REPS=${2:-3}
STEPS=${3:-6}
CASES=${4:-"w1 w2"}
TRAIN="$BUILD/trainer/eft-train"
DIR=$(mktemp -d /tmp/eft-bench-lora-XXXXXX)
PY=${PY:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}  # the project's PyTorch (scripts/install-python.sh)
LORA_YAML=${LORA_YAML:-"{r: 16, alpha: 32, target_modules: all-linear}"}

. "$(dirname "$0")/bench_model.sh"
write_bench_model "$TRAIN" "$DIR"

run() {  # case world variant round
  local name=$1-$3-$4 world=$2 lora=""
  [[ $3 == lora ]] && lora="  lora: $LORA_YAML"
  cat >"$DIR/$name.yaml" <<YAML
name: bench
model: $DIR/model
data: {train: $DIR/data.jsonl, max_seq_len: 512}
training:
  global_batch_size: 8
  micro_batch_size: 1
  lr: 1.0e-4
  precision: bf16
  activation_checkpointing: full
  epochs: 10
$lora
parallel: {sharding: grad_op}
YAML
  # shellcheck disable=SC2086
  env ${EFT_ENV:-} EFT_EVENTS_FD=3 "$TRAIN" train --config "$DIR/$name.yaml" --nproc "$world" --threads $((2 / world)) \
    --max-steps "$STEPS" ${EFT_ARGS:-} >"$DIR/$name.log" 2>&1 3>"$DIR/$name.events"
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= REPS; round++)); do
  order="full lora"
  ((round % 2 == 0)) && order="lora full"
  for c in $CASES; do
    for v in $order; do run "$c" "${c:1:1}" "$v" "$round"; done
    echo "round $round $c done ($(cut -d' ' -f1 /proc/loadavg))" >&2
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

$PY - "$(dirname "$0")" "$DIR" "$REPS" "$CASES" <<'PY'
import statistics, sys
sys.path.insert(0, sys.argv[1])
from bench_results import events, median_range, run_tps, timeline
d, reps, cases = sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
def per_rank(paths, key):  # MiB per rank (median over rounds), "rank0 / rank1"
    ranks = {}
    for p in paths:
        for e in events(p):
            if e.get("event") == "memory":
                ranks.setdefault(e["rank"], []).append(e[key] / 2**20)
    return " / ".join(f"{statistics.median(ranks[r]):.1f}" for r in sorted(ranks)), \
        statistics.median(ranks.get(0, [0]))
print("| case | variant | tokens/s (median, min-max) | LoRA / full | persistent MiB per rank | LoRA / full "
      "| peak RSS MiB per rank | s/step rank 0: data / compute / comm wait / optimizer |")
print("|---|---|---|---|---|---|---|---|")
for c in cases:
    got = {}
    for v in ("full", "lora"):
        paths = [f"{d}/{c}-{v}-{r}.events" for r in range(1, reps + 1)]
        t = [run_tps(p) for p in paths]
        persistent, persistent0 = per_rank(paths, "persistent_bytes")
        rss, _ = per_rank(paths, "peak_rss_bytes")
        got[v] = (t, persistent, persistent0, rss, timeline(paths, ("data_s", "compute_s", "comm_wait_s", "optimizer_s")))
    for v in ("full", "lora"):
        t, persistent, persistent0, rss, tl = got[v]
        tps_ratio = "" if v == "full" else f"{statistics.median(t) / statistics.median(got['full'][0]):.2f}x"
        mem_ratio = "" if v == "full" else f"{100 * persistent0 / got['full'][2]:.0f}%"
        print(f"| {c} | {v} | {median_range(t)} | {tps_ratio} | {persistent} | "
              f"{mem_ratio} | {rss} | {tl} |")
PY
echo
echo "logs: $DIR"
