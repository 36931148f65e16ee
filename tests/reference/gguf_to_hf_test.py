#!/usr/bin/env python3
"""scripts/gguf_to_hf.py on GGUF files written here with the gguf package: a tiny Llama converts into
a directory eft-train generates from; a file eft cannot use is exit 2 with the reason on one line
(an architecture eft does not train, a quantisation transformers' loader refuses, not GGUF, missing),
and leaves no directory behind.

Usage: gguf_to_hf_test.py CONVERTER EFT_TRAIN WORK_DIR
"""
import os
import shutil
import subprocess
import sys

import gguf
import numpy as np

LAYER = [("attn_norm", (32,)), ("attn_q", (32, 32)), ("attn_k", (16, 32)), ("attn_v", (16, 32)),
         ("attn_output", (32, 32)), ("ffn_norm", (32,)), ("ffn_gate", (64, 32)), ("ffn_up", (64, 32)),
         ("ffn_down", (32, 64))]


def write_gguf(path, arch="llama", embedding_type=None):
    """One layer, hidden 32, 2 heads / 1 KV head, a byte-pair vocabulary of 8; the embedding stored
    as `embedding_type` (raw random bytes of that quantisation) or F32."""
    w = gguf.GGUFWriter(path, arch)
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(8)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "ab", "c", "d", "cd", "f", "g"])
    w.add_token_types([1] * 8)
    w.add_token_merges(["a b", "c d"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    rng = np.random.default_rng(0)
    if embedding_type is None:
        w.add_tensor("token_embd.weight", rng.standard_normal((8, 32)).astype(np.float32))
    else:
        block, size = gguf.GGML_QUANT_SIZES[embedding_type]
        raw = rng.integers(0, 255, size=(8, 32 // block * size), dtype=np.uint8)
        w.add_tensor("token_embd.weight", raw, raw_dtype=embedding_type)
    w.add_tensor("output_norm.weight", np.ones(32, dtype=np.float32))
    for name, shape in LAYER:
        w.add_tensor(f"blk.0.{name}.weight", (0.2 * rng.standard_normal(shape)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def convert(converter, gguf_file, out):
    env = dict(os.environ, TQDM_DISABLE="1")
    p = subprocess.run([sys.executable, converter, gguf_file, out], capture_output=True, text=True, env=env)
    return p.returncode, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "", p.stdout


def main(converter, eft_train, work):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    failures = []

    good = os.path.join(work, "tiny-llama.gguf")
    write_gguf(good)
    rc, err, _ = convert(converter, good, os.path.join(work, "tiny-llama"))
    if rc != 0:
        failures.append(f"a tiny Llama GGUF: exit {rc}: {err}")
    else:
        p = subprocess.run([eft_train, "generate", "--model", os.path.join(work, "tiny-llama"), "--prompt-ids", "0 2 5",
                            "--max-new-tokens", "4", "--format", "ids", "--threads", "1"], capture_output=True, text=True)
        ids = p.stdout.split()
        if p.returncode != 0 or not ids or any(not 0 <= int(t) < 8 for t in ids):
            failures.append(f"eft-train generate on the converted tiny Llama: exit {p.returncode}, {p.stdout!r} "
                            f"{p.stderr[-500:]!r}")
        else:
            print(f"a tiny Llama GGUF converts; eft-train generates from it: {ids}")

    refused = {
        "mamba.gguf": ("an architecture eft does not train", lambda f: write_gguf(f, arch="mamba"),
                       "architecture 'mamba' is not one eft trains"),
        "q8_1.gguf": ("a quantisation transformers' loader refuses",
                      lambda f: write_gguf(f, embedding_type=gguf.GGMLQuantizationType.Q8_1), "Q8_1"),
        "text.gguf": ("not a GGUF file", lambda f: open(f, "w").write("hello\n"), "not a GGUF file"),
        "missing.gguf": ("a missing file", lambda f: None, "no such file"),
    }
    for name, (what, make, expect) in refused.items():
        path, out = os.path.join(work, name), os.path.join(work, name + ".out")
        make(path)
        rc, err, _ = convert(converter, path, out)
        ok = rc == 2 and expect in err and err.startswith("gguf_to_hf: ") and not os.path.exists(out)
        print(f"{'refused' if ok else 'NOT REFUSED RIGHT'}: {what}: exit {rc}: {err}")
        if not ok:
            failures.append(f"{what}: exit {rc}, last stderr line {err!r}, output left: {os.path.exists(out)}")
    for f in failures:
        print("FAILED:", f)
    print(f"{5 - len(failures)} passed, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:4]))
