#!/usr/bin/env bash
# Generation speed of `eft-train generate` on CPU for a 0.5B-class model: tokens/s and time per
# token as the output grows, which stays flat when each new token costs one position (KV cache)
# rather than the whole prefix.
#
# Usage: bench/generate/run.sh [BUILD_DIR] [THREADS]
# A random model with Qwen2.5-0.5B's shape (eft-train init-model: hidden 896, 24 layers, 14 heads,
# 2 kv heads, intermediate 4864, vocab 151936, tied embeddings; 494M parameters, fp32 on disk)
# generates greedily from a 16-token prompt for 32, 128 and 512 new tokens, computing in fp32 and
# in bf16. Prints a markdown table for docs/benchmarks.md; the model and logs stay in the printed
# directory (delete it afterwards: ~2 GB).
set -euo pipefail

BUILD=$(cd "${1:-build}" && pwd)
THREADS=${2:-$(nproc)}
TRAIN="$BUILD/trainer/eft-train"
DIR=$(mktemp -d /tmp/eft-bench-generate-XXXXXX)
PY=${PY:-$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/python}  # the project's PyTorch (scripts/install-python.sh)
LENGTHS=${EFT_BENCH_LENGTHS:-"32 128 512"}
DTYPES=${EFT_BENCH_DTYPES:-"fp32 bf16"}

"$TRAIN" init-model --arch qwen2 --hidden 896 --layers 24 --heads 14 --kv-heads 2 --intermediate 4864 \
  --vocab-size 151936 --tie-embeddings --max-position 32768 --dtype float32 --seed 1 --out "$DIR/model" >/dev/null
PROMPT="$(seq -s ' ' 1000 1015)"

echo "machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), --threads $THREADS; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "logs: $DIR"
echo
echo "| dtype | new tokens | prefill (16 tokens) | decode tokens/s | median ms/token, first quarter | median ms/token, last quarter | wall s |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for dtype in $DTYPES; do
  for n in $LENGTHS; do
    log="$DIR/$dtype-$n"
    start=$(date +%s.%N)
    "$TRAIN" generate --model "$DIR/model" --prompt-ids "$PROMPT" --max-new-tokens "$n" --format ids \
      --dtype "$dtype" --threads "$THREADS" --stats >"$log.out" 2>"$log.err"
    end=$(date +%s.%N)
    $PY - "$log.err" "$dtype" "$n" "$start" "$end" <<'PY'
import json, sys
stats = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
assert stats["new_tokens"] == int(sys.argv[3]), stats
print(f"| {sys.argv[2]} | {stats['new_tokens']} | {stats['prefill_s']:.2f} s | {stats['decode_tokens_per_s']:.2f} | "
      f"{stats['median_ms_per_token_first_quarter']:.0f} | {stats['median_ms_per_token_last_quarter']:.0f} | "
      f"{float(sys.argv[5]) - float(sys.argv[4]):.0f} |")
PY
  done
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
