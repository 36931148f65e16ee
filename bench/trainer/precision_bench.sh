#!/usr/bin/env bash
# bf16 against fp32 on the CPU, on a CPU that computes bf16 natively (AVX512-BF16 / AMX-BF16) and on
# one that does not: what training.precision: auto decides on (docs/gpu.md, "Precision").
# eft-train trains the ~20M Llama of the CPU benchmarks (bench_model.sh) at world size 1 in each
# (CPU mode, precision) case, interleaved over REPS rounds; each run's tokens/s is the median of its
# steps after two warm-up steps; the table gives the median over rounds and the bf16/fp32 ratio.
#
# The CPU without native bf16 is this CPU with LibTorch's kernels held to AVX2
# (ATEN_CPU_CAPABILITY=avx2, ONEDNN_MAX_CPU_ISA=AVX2): what LibTorch runs on an AVX2-only CPU. On a CPU
# that has no AVX-512 at all the "native" rows are the same as the "avx2" rows.
#
# Usage: bench/trainer/precision_bench.sh [BUILD_DIR] [REPS] [STEPS]
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
REPS=${2:-3}
STEPS=${3:-6}
HERE=$(cd "$(dirname "$0")" && pwd)
TRAIN="$BUILD/trainer/eft-train"
DIR=$(mktemp -d /tmp/eft-bench-precision-XXXXXX)
. "$HERE/bench_model.sh"
write_bench_model "$TRAIN" "$DIR"
"$TRAIN" version

declare -A MODE_ENV=([native]="" [avx2]="ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2")
run() {  # mode precision round
  local name=$1-$2-$3
  cat >"$DIR/$name.yaml" <<YAML
name: bench
model: $DIR/model
data: {train: $DIR/data.jsonl, max_seq_len: 512}
training: {global_batch_size: 4, micro_batch_size: 1, lr: 1.0e-4, precision: $2,
           activation_checkpointing: full, epochs: 10}
YAML
  # shellcheck disable=SC2086  # the mode's environment, split on purpose
  env ${MODE_ENV[$1]} EFT_EVENTS_FD=3 "$TRAIN" train --config "$DIR/$name.yaml" --nproc 1 --threads "$(nproc)" \
    --max-steps "$STEPS" >"$DIR/$name.log" 2>&1 3>"$DIR/$name.events"
}
for ((round = 1; round <= REPS; round++)); do
  for mode in native avx2; do
    for precision in fp32 bf16; do
      run "$mode" "$precision" "$round"
      echo "round $round $mode $precision: done" >&2
    done
  done
done
python3 - "$DIR" "$REPS" "$HERE" <<'PY'
import statistics, sys
sys.path.insert(0, sys.argv[3])
from bench_results import run_tps, median_range
d, reps = sys.argv[1], int(sys.argv[2])
print("| CPU kernels | fp32 tokens/s | bf16 tokens/s | bf16 / fp32 |")
print("|---|---|---|---|")
for mode, label in (("native", "this CPU's (native bf16 where it has it)"), ("avx2", "held to AVX2 (no native bf16)")):
    t = {p: [run_tps(f"{d}/{mode}-{p}-{r}.events") for r in range(1, reps + 1)] for p in ("fp32", "bf16")}
    ratio = statistics.median(t["bf16"]) / statistics.median(t["fp32"])
    print(f"| {label} | {median_range(t['fp32'])} | {median_range(t['bf16'])} | {ratio:.2f}x |")
print(f"(logs and events: {d})")
PY
