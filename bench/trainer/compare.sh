#!/usr/bin/env bash
# eft-train against a plain PyTorch loop (bench/trainer/torch_loop.py, in the project's .venv PyTorch) on the
# same model shape, data and batch, at world size 1 and 2, fp32 and bf16: runs interleaved (eft,
# torch, eft, torch, ... per case, REPS rounds), each run's tokens/s the median of its steps after
# two warm-up steps; the table gives the median over rounds, the spread (min-max) and the ratio of
# medians.
#
# Usage: bench/trainer/compare.sh [BUILD_DIR] [REPS] [STEPS] [CASES]
#   CASES: space-separated of w1-fp32 w1-bf16 w2-fp32 w2-bf16 (default all)
#   SHARDING: space-separated eft variants, each interleaved with the others and PyTorch in every
#     round: a parallel.sharding strategy, optionally with environment for that variant only after
#     "@" (comma-separated), e.g. "grad_op grad_op@OPENBLAS_NUM_THREADS=2" (default: "grad_op")
#   TORCH_VARIANTS: space-separated PyTorch variants, each "+"-joined words of: eager (nothing
#     added), compile (torch.compile), matmul (attention as explicit product and softmax instead of
#     SDPA), fsdp2 (FSDP2 instead of DDP at world size 2), zero2 (FSDP2 keeping gathered layers to
#     the backward), hf (transformers' own model of the directory instead of the loop's Llama);
#     e.g. "eager compile fsdp2+compile hf+compile" (default: "eager"; empty: no PyTorch runs)
#   BASELINE_TRAIN: another eft-train binary (e.g. a copy of an earlier commit's), run as well for every
#     eft variant, interleaved, in rows marked "baseline": an A/B of a change in one run
#   MODEL: a Hugging Face model directory to train instead of the ~20M bench model (bench_model.sh),
#     e.g. MODEL=$(scripts/real-model.sh) for SmolLM2-135M-Instruct; the data are random rows of its
#     vocabulary. SEQ, GLOBAL_BATCH: tokens per row and rows per step (default 512, 8; micro-batch 1)
#   CLEANUP=1: remove the run's directory when the table is printed (kept when anything failed)
#   EFT_ARGS: extra `eft-train train` flags; EFT_ENV, TORCH_ENV: extra environment (VAR=value ...)
#     for eft's and PyTorch's processes, e.g. EFT_ENV=OPENBLAS_NUM_THREADS=2
# Prints the markdown table, a row per eft and PyTorch variant and case, each PyTorch row with the ratio
# of the first eft variant's median to its own (eft's timeline columns: medians of the per-step
# compute / waiting on communication / optimizer seconds of rank 0); logs and events stay in the
# printed directory.
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
REPS=${2:-3}
STEPS=${3:-8}
CASES=${4:-"w1-fp32 w1-bf16 w2-fp32 w2-bf16"}
HERE=$(cd "$(dirname "$0")" && pwd)
TRAIN="$BUILD/trainer/eft-train"
DIR=$(mktemp -d /tmp/eft-bench-compare-XXXXXX)
PY=${PY:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}  # the project's PyTorch (scripts/install-python.sh)
PORT=$((29700 + RANDOM % 200))

. "$(dirname "$0")/bench_model.sh"
SEQ=${SEQ:-512}
GLOBAL_BATCH=${GLOBAL_BATCH:-8}
if [[ -n ${MODEL:-} ]]; then
  ln -s "$(cd "$MODEL" && pwd)" "$DIR/model"
  write_random_rows "$DIR/data.jsonl" "$($PY -c 'import json, sys; print(json.load(open(sys.argv[1]))["vocab_size"])' \
    "$MODEL/config.json")" "$SEQ"
else
  write_bench_model "$TRAIN" "$DIR"
fi

SHARDING=${SHARDING:-grad_op}
TORCH_VARIANTS=${TORCH_VARIANTS-eager}
BASELINE_TRAIN=${BASELINE_TRAIN:-}

run_eft() {  # case world precision round variant [kind binary]
  local name=$1-${6:-eft}-$5-$4 world=$2 precision=$3 sharding=${5%%@*} venv="" train=${7:-$TRAIN}
  [[ $5 == *@* ]] && venv=${5#*@} && venv=${venv//,/ }
  cat >"$DIR/$name.yaml" <<YAML
name: bench
model: $DIR/model
data: {train: $DIR/data.jsonl, max_seq_len: $SEQ}
training: {global_batch_size: $GLOBAL_BATCH, micro_batch_size: 1, lr: 1.0e-4, precision: $precision,
           activation_checkpointing: full, epochs: 10}
parallel: {sharding: $sharding}
YAML
  # shellcheck disable=SC2086
  env ${EFT_ENV:-} $venv EFT_EVENTS_FD=3 "$train" train --config "$DIR/$name.yaml" --nproc "$world" --threads $((2 / world)) \
    --max-steps "$STEPS" ${EFT_ARGS:-} >"$DIR/$name.log" 2>&1 3>"$DIR/$name.events"
}

run_torch() {  # case world precision round variant
  local name=$1-torch-$5-$4 world=$2 precision=$3 pids=() r flags=() word
  for word in ${5//+/ }; do
    case $word in
      eager) ;;
      compile) flags+=(--compile) ;;
      matmul) flags+=(--attention matmul) ;;
      fsdp2) flags+=(--parallel fsdp2) ;;
      zero2) flags+=(--parallel fsdp2 --reshard-after-forward 0) ;;
      hf) flags+=(--hf) ;;
      *) echo "compare.sh: unknown PyTorch variant word '$word' in '$5'" >&2; exit 2 ;;
    esac
  done
  PORT=$((PORT + 1))
  for ((r = 0; r < world; r++)); do
    env ${TORCH_ENV:-} RANK=$r WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
      $PY "$HERE/torch_loop.py" --model "$DIR/model" --data "$DIR/data.jsonl" --seq "$SEQ" --global-batch "$GLOBAL_BATCH" \
      --micro-batch 1 --precision "$precision" --steps "$STEPS" --threads $((2 / world)) "${flags[@]}" \
      --events "$DIR/$name.events" >"$DIR/$name.$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p" || { echo "compare.sh: PyTorch run $name failed: see $DIR/$name.*.log" >&2; exit 1; }
  done
}

for ((round = 1; round <= REPS; round++)); do
  for c in $CASES; do
    world=${c:1:1} precision=${c#*-}
    for sharding in $SHARDING; do
      run_eft "$c" "$world" "$precision" "$round" "$sharding"
      [[ -z $BASELINE_TRAIN ]] || run_eft "$c" "$world" "$precision" "$round" "$sharding" eftbase "$BASELINE_TRAIN"
    done
    for variant in $TORCH_VARIANTS; do run_torch "$c" "$world" "$precision" "$round" "$variant"; done
    echo "round $round $c done" >&2
  done
done

$PY - "$HERE" "$DIR" "$REPS" "$CASES" "$SHARDING" "$TORCH_VARIANTS" "$BASELINE_TRAIN" <<'PY'
import statistics, sys
sys.path.insert(0, sys.argv[1])
from bench_results import events, median_range, run_tps, timeline
d, reps, cases = sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
shardings, variants, baseline = sys.argv[5].split(), sys.argv[6].split(), sys.argv[7]
def rss(path):
    return max((e["peak_rss_bytes"] for e in events(path) if "peak_rss_bytes" in e), default=0) / 2**20
print("| case | run | tokens/s (median, min-max) | eft / this | eft s/step: compute / comm wait / optimizer "
      "| peak RSS MiB rank 0 |")
print("|---|---|---|---|---|---|")
for c in cases:
    eft_median = None
    for kind, names in (("eft", shardings), ("eftbase", shardings if baseline else []), ("torch", variants)):
        for n in names:
            paths = [f"{d}/{c}-{kind}-{n}-{r}.events" for r in range(1, reps + 1)]
            tps = [run_tps(p) for p in paths]
            m = statistics.median(tps)
            eft_median = eft_median or m
            label = {"eft": f"eft {n}", "eftbase": f"eft {n} (baseline)", "torch": f"PyTorch {n}"}[kind]
            ratio = "-" if kind == "eft" else f"{eft_median / m:.2f}x"
            line = "-" if kind == "torch" else timeline(paths, ("compute_s", "comm_wait_s", "optimizer_s"))
            print(f"| {c} | {label} | {median_range(tps)} | {ratio} | {line} | {rss(paths[0]):.0f} |")
PY
echo
if [[ ${CLEANUP:-0} == 1 ]]; then rm -rf "$DIR"; else echo "logs: $DIR"; fi
