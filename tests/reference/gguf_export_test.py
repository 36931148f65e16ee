#!/usr/bin/env python3
"""`eft-train export` read back by gguf-py (the `gguf` package llama.cpp publishes), not by eft.

Usage: gguf_export_test.py EFT_TRAIN WORK_DIR

For fixture models of each architecture (llama, mistral, qwen2, qwen3; tied and untied embeddings; one
file and sharded; bf16 and fp32 on disk; llama3 RoPE scaling) with small byte-level BPE tokenizers of
each pre-tokenizer kind (trained here with the `tokenizers` package), every export type (f32, f16,
bf16, q8_0) is read back with gguf.GGUFReader and checked against the Hugging Face directory itself:

- the metadata keys are exactly the expected ones, each with the expected value and GGUF type;
- every tensor's name, shape (ggml order: innermost first) and type;
- the data: f32 exact; f16/bf16 equal to the fp32 value rounded to that type (IEEE round to nearest
  even, as torch rounds); q8_0 per element |x - q*d| <= d/2 with d the block's stored fp16 scale, and d
  the fp16 rounding of the block's amax/127;
- Q and K of llama/mistral: after undoing llama.cpp's row permutation (rows (h, i, j) back to (h, j, i))
  the tensor equals the HF one; qwen2/qwen3 are not permuted;
- the tokenizer: tokens in id order equal tokenizer.json's vocabulary plus added tokens ([PAD<id>] for
  embedding rows past it), token types, merges, special ids, add_bos/add_eos, the chat template;
- malformed input (unknown architecture, truncated safetensors, a missing tensor, no tokenizer, an
  unsupported pre-tokenizer, a bad --type, an unwritable output) exits with one line on stderr,
  leaving no file or temporary file behind.
Prints "N passed, M failed"; exit 0 when none failed.
"""
import json
import math
import os
import shutil
import subprocess
import sys
import traceback

import gguf
import numpy as np
import torch
from gguf.quants import dequantize
from safetensors.torch import load_file, save_file
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

EFT = sys.argv[1]
WORK = sys.argv[2]

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = LLAMA3_REGEX.replace(r"\p{N}{1,3}", r"\p{N}")
TEXT = ("The quick brown fox jumps over the lazy dog. Der schnelle braune Fuchs springt. "
        "Le renard brun saute 1234 fois! 速い茶色の狐が飛ぶ。 Быстрая лиса прыгает через собаку. ") * 20
CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def make_tokenizer(out, kind, vocab_size=300, merges_as_strings=False, jinja_file=False):
    """A byte-level BPE tokenizer directory of the given pre-tokenizer kind."""
    tok = Tokenizer(models.BPE())
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=kind in ("gpt-2", "smollm"))
    if kind == "llama-bpe":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_REGEX), "isolated"), byte_level])
    elif kind == "qwen2":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_REGEX), "isolated"), byte_level])
    elif kind == "smollm":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif kind == "gpt-2":
        tok.pre_tokenizer = byte_level
    elif kind == "metaspace":  # not byte-level: refused
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - 2, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT], trainer)
    # A non-special added token that looks like a control token, and one that does not.
    tok.add_tokens(["<|tool|>", "<think>"])
    config = {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "unk_token": None}
    if kind == "llama-bpe":  # Llama 3 adds its BOS through the post-processor
        bos = tok.token_to_id("<|im_start|>")
        tok.post_processor = processors.TemplateProcessing(
            single="<|im_start|> $A", pair="<|im_start|> $A <|im_start|> $B", special_tokens=[("<|im_start|>", bos)])
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    tj = json.load(open(os.path.join(out, "tokenizer.json")))
    if merges_as_strings:
        tj["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in tj["model"]["merges"]]
        json.dump(tj, open(os.path.join(out, "tokenizer.json"), "w"), ensure_ascii=False)
    if jinja_file:
        open(os.path.join(out, "chat_template.jinja"), "w").write(CHAT_TEMPLATE)
    else:
        config["chat_template"] = CHAT_TEMPLATE
    json.dump(config, open(os.path.join(out, "tokenizer_config.json"), "w"))
    return tok.get_vocab_size()


def run(*args):
    return subprocess.run([EFT, *args], capture_output=True, text=True)


def init_model(out, arch, tokenizer, vocab, dtype="bfloat16", tie=False, head_dim=None, seed=1):
    args = ["init-model", "--arch", arch, "--hidden", "64", "--layers", "2", "--heads", "4", "--kv-heads", "2",
            "--intermediate", "96", "--vocab-size", str(vocab), "--dtype", dtype, "--seed", str(seed),
            "--tokenizer", tokenizer, "--out", out]
    if tie:
        args.append("--tie-embeddings")
    if head_dim:
        args += ["--head-dim", str(head_dim)]
    r = run(*args)
    assert r.returncode == 0, r.stderr


def shard(model_dir):
    """model.safetensors -> two shards and an index, as save_pretrained writes large models."""
    tensors = load_file(os.path.join(model_dir, "model.safetensors"))
    names = sorted(tensors)
    parts = [names[: len(names) // 2], names[len(names) // 2:]]
    weight_map = {}
    for i, part in enumerate(parts):
        fname = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({n: tensors[n] for n in part}, os.path.join(model_dir, fname), metadata={"format": "pt"})
        weight_map.update({n: fname for n in part})
    os.remove(os.path.join(model_dir, "model.safetensors"))
    json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(model_dir, "model.safetensors.index.json"), "w"))


def hf_tensors(model_dir):
    out = {}
    for f in os.listdir(model_dir):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(model_dir, f)))
    return out


# --- What the file must hold, computed here from the directory alone -------------------------------------

LAYER_NAMES = {
    "input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.q_proj.bias": "attn_q.bias", "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.k_proj.bias": "attn_k.bias", "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.v_proj.bias": "attn_v.bias", "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_norm.weight": "attn_q_norm.weight", "self_attn.k_norm.weight": "attn_k_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight", "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight", "mlp.down_proj.weight": "ffn_down.weight",
}


def gguf_name(hf):
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".", 3)  # model, layers, N, rest
    return f"blk.{parts[2]}.{LAYER_NAMES[parts[3]]}"


def unpermute(w, n_head):
    """llama.cpp's Q/K row order back to HF's: rows (h, i, j) -> (h, j, i)."""
    shape = w.shape
    return w.reshape(n_head, shape[0] // n_head // 2, 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


def rope_factors(cfg):
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters")
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    theta = cfg.get("rope_theta") or rs.get("rope_theta")
    old = rs["original_max_position_embeddings"]
    low, high = old / rs["low_freq_factor"], old / rs["high_freq_factor"]
    out = []
    for i in range(head_dim // 2):
        wavelen = 2 * math.pi * theta ** (2 * i / head_dim)
        if wavelen < high:
            out.append(1.0)
        elif wavelen > low:
            out.append(rs["factor"])
        else:
            smooth = (old / wavelen - rs["low_freq_factor"]) / (rs["high_freq_factor"] - rs["low_freq_factor"])
            out.append(1 / ((1 - smooth) / rs["factor"] + smooth))
    return np.array(out, dtype=np.float32)


def model_metadata(model_dir, ftype):
    """The keys of the architecture, its hyper-parameters and the file (all but the tokenizer's)."""
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    arch = {"mistral": "llama"}.get(cfg["model_type"], cfg["model_type"])
    heads, hidden = cfg["num_attention_heads"], cfg["hidden_size"]
    head_dim = cfg.get("head_dim") or hidden // heads
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta") or rs.get("rope_theta", 10000.0)
    V = gguf.GGUFValueType
    m = {
        "general.architecture": (arch, V.STRING), "general.type": ("model", V.STRING),
        "general.name": (os.path.basename(model_dir), V.STRING), "general.alignment": (32, V.UINT32),
        "general.file_type": ({"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}[ftype], V.UINT32),
        "general.quantization_version": (2, V.UINT32),
        f"{arch}.vocab_size": (cfg["vocab_size"], V.UINT32),
        f"{arch}.context_length": (cfg["max_position_embeddings"], V.UINT32),
        f"{arch}.embedding_length": (hidden, V.UINT32), f"{arch}.block_count": (cfg["num_hidden_layers"], V.UINT32),
        f"{arch}.feed_forward_length": (cfg["intermediate_size"], V.UINT32),
        f"{arch}.attention.head_count": (heads, V.UINT32),
        f"{arch}.attention.head_count_kv": (cfg["num_key_value_heads"], V.UINT32),
        f"{arch}.attention.layer_norm_rms_epsilon": (np.float32(cfg["rms_norm_eps"]), V.FLOAT32),
        f"{arch}.rope.freq_base": (np.float32(theta), V.FLOAT32),
        f"{arch}.rope.dimension_count": (head_dim, V.UINT32),
    }
    if head_dim * heads != hidden:
        m[f"{arch}.attention.key_length"] = (head_dim, V.UINT32)
        m[f"{arch}.attention.value_length"] = (head_dim, V.UINT32)
    if rs.get("rope_type", rs.get("type")) == "llama3":
        m[f"{arch}.rope.scaling.original_context_length"] = (rs["original_max_position_embeddings"], V.UINT32)
    return m


def expected_metadata(model_dir, ftype):
    m = model_metadata(model_dir, ftype)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    tj = json.load(open(os.path.join(model_dir, "tokenizer.json")))
    tc = json.load(open(os.path.join(model_dir, "tokenizer_config.json")))
    V = gguf.GGUFValueType
    # The tokenizer, in id order.
    by_id = {i: t for t, i in tj["model"]["vocab"].items()}
    added = {a["id"]: a for a in tj["added_tokens"]}
    by_id.update({i: a["content"] for i, a in added.items()})
    tokens, types = [], []
    for i in range(cfg["vocab_size"]):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(4)
        elif i in added:
            tokens.append(by_id[i])
            c = by_id[i]
            looks = (c.startswith("<|") and c.endswith("|>")) or c in ("<pad>", "<mask>")
            types.append(3 if added[i]["special"] or looks else 4)
        else:
            tokens.append(by_id[i])
            types.append(1)
    merges = [m if isinstance(m, str) else " ".join(p.replace(" ", "\u0120") for p in m) for m in tj["model"]["merges"]]
    pre = pre_name(tj["pre_tokenizer"])
    ids = {t: i for i, t in by_id.items()}
    m.update({
        "tokenizer.ggml.model": ("gpt2", V.STRING), "tokenizer.ggml.pre": (pre, V.STRING),
        "tokenizer.ggml.tokens": (tokens, V.ARRAY), "tokenizer.ggml.token_type": (types, V.ARRAY),
        "tokenizer.ggml.merges": (merges, V.ARRAY),
        "tokenizer.ggml.bos_token_id": (ids[tc["bos_token"]], V.UINT32),
        "tokenizer.ggml.eos_token_id": (ids[tc["eos_token"]], V.UINT32),
        "tokenizer.ggml.padding_token_id": (ids[tc["pad_token"]], V.UINT32),
        "tokenizer.ggml.add_bos_token": (pre == "llama-bpe", V.BOOL),
        "tokenizer.ggml.add_eos_token": (False, V.BOOL),
        "tokenizer.chat_template": (CHAT_TEMPLATE, V.STRING),
    })
    if cfg.get("unk_token_id") is not None:
        m["tokenizer.ggml.unknown_token_id"] = (cfg["unk_token_id"], V.UINT32)
    return m


def pre_name(pre):
    if pre["type"] == "ByteLevel":
        return "gpt-2"
    first = pre["pretokenizers"][0]
    if first["type"] == "Digits":
        return "smollm"
    return {LLAMA3_REGEX: "llama-bpe", QWEN2_REGEX: "qwen2"}[first["pattern"]["Regex"]]


def check_file(model_dir, path, ftype, metadata=expected_metadata):
    reader = gguf.GGUFReader(path)
    want = metadata(model_dir, ftype)
    got = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert set(got) == set(want), f"keys: extra {set(got) - set(want)}, missing {set(want) - set(got)}"
    for k, (value, vtype) in want.items():
        f = got[k]
        assert f.types[0] == vtype, f"{k}: type {f.types} != {vtype}"
        v = f.contents()
        if vtype == gguf.GGUFValueType.FLOAT32:
            assert np.float32(v) == value, f"{k}: {v} != {value}"
        else:
            assert v == value, f"{k}: {str(v)[:200]} != {str(value)[:200]}"
    assert reader.alignment == 32

    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    arch = {"mistral": "llama"}.get(cfg["model_type"], cfg["model_type"])
    heads, kv_heads = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hf = hf_tensors(model_dir)
    tied = cfg.get("tie_word_embeddings", False)
    expected_names = {gguf_name(n) for n in hf if not (tied and n == "lm_head.weight")}
    rs = cfg.get("rope_scaling") or cfg.get("rope_parameters") or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        expected_names.add("rope_freqs.weight")
    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == expected_names, f"tensors: {set(tensors) ^ expected_names}"
    if tied:
        assert "output.weight" not in tensors
    Q = gguf.GGMLQuantizationType
    matrix_type = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0}[ftype]
    for name, hf_tensor in hf.items():
        if tied and name == "lm_head.weight":
            continue
        t = tensors[gguf_name(name)]
        x = hf_tensor.float().numpy()
        assert list(t.shape) == list(reversed(x.shape)), f"{t.name}: shape {t.shape} vs HF {x.shape}"
        want_type = Q.F32 if x.ndim == 1 else matrix_type
        if want_type == Q.Q8_0 and x.shape[-1] % 32:
            want_type = Q.F16
        assert t.tensor_type == want_type, f"{t.name}: {t.tensor_type.name} != {want_type.name}"
        y = dequantize(t.data, t.tensor_type).reshape(x.shape).astype(np.float32)
        permuted = arch == "llama" and (".attn_q." in t.name or ".attn_k." in t.name)
        if permuted:  # compare in HF's layout; the permutation must not be the identity here
            y_raw = y
            y = unpermute(y, heads if ".attn_q." in t.name else kv_heads)
            assert not np.array_equal(y, y_raw), f"{t.name}: the permutation changed nothing"
        check_values(t, x, y, hf_tensor, permuted, heads if ".attn_q." in t.name else kv_heads)
    if "rope_freqs.weight" in tensors:
        t = tensors["rope_freqs.weight"]
        assert t.tensor_type == Q.F32
        np.testing.assert_allclose(np.asarray(t.data), rope_factors(cfg), rtol=1e-6)


def check_values(t, x, y, hf_tensor, permuted, n_head):
    Q = gguf.GGMLQuantizationType
    if t.tensor_type == Q.F32:
        assert np.array_equal(x, y), f"{t.name}: f32 differs"
    elif t.tensor_type == Q.F16:
        assert np.array_equal(hf_tensor.float().half().float().numpy(), y), f"{t.name}: f16 is not the rounded value"
    elif t.tensor_type == Q.BF16:
        assert np.array_equal(hf_tensor.float().bfloat16().float().numpy(), y), f"{t.name}: bf16 is not the rounded value"
    elif t.tensor_type == Q.Q8_0:
        # The stored scales, per block of 32 in the file's (permuted) row order.
        raw = np.asarray(t.data).reshape(-1, 34)
        d = raw[:, :2].copy().view(np.float16).astype(np.float32).reshape(-1)
        xf = x if not permuted else permute(x, n_head)
        yf = y if not permuted else permute(y, n_head)
        blocks, yb = xf.reshape(-1, 32), yf.reshape(-1, 32)
        amax = np.abs(blocks).max(axis=1)
        assert np.array_equal(d, (amax / 127).astype(np.float16).astype(np.float32)), f"{t.name}: scales"
        err = np.abs(blocks - yb)
        bound = d[:, None] / 2 * (1 + 1e-6) + 1e-12
        assert (err <= bound).all(), f"{t.name}: q8_0 error {float((err - bound).max())} over d/2"


def permute(w, n_head):
    """HF's Q/K row order to llama.cpp's, as convert_hf_to_gguf.py: rows (h, j, i) -> (h, i, j)."""
    shape = w.shape
    return w.reshape(n_head, 2, shape[0] // n_head // 2, *shape[1:]).swapaxes(1, 2).reshape(shape)


# --- The cases -----------------------------------------------------------------------------------------

passed = failed = 0


def check(name, fn):
    global passed, failed
    try:
        fn()
        print(f"PASS {name}", flush=True)
        passed += 1
    except Exception:  # noqa: BLE001 -- every failure is reported, then the next case runs
        print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)
        failed += 1


def export_all_types(model_dir, types=("f32", "f16", "bf16", "q8_0"), metadata=expected_metadata):
    def fn():
        for ftype in types:
            out = os.path.join(WORK, f"{os.path.basename(model_dir)}.{ftype}.gguf")
            r = run("export", "--model", model_dir, "--out", out, "--type", ftype)
            assert r.returncode == 0, r.stderr
            summary = r.stdout.strip().splitlines()
            assert len(summary) == 1 and summary[0].startswith("exported ") and ftype in summary[0], r.stdout
            check_file(model_dir, out, ftype, metadata)
            assert not [f for f in os.listdir(WORK) if ".tmp." in f], "a temporary file was left"
    return fn


def one_line_error(args, code, *needles):
    def fn():
        r = run(*args)
        assert r.returncode == code, f"exit {r.returncode} (want {code}): {r.stderr}"
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("eft-train: "), r.stderr
        for n in needles:
            assert n in lines[0], f"{n!r} not in {lines[0]!r}"
        assert not [f for f in os.listdir(WORK) if ".tmp." in f], "a temporary file was left"
    return fn


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    tok = {}
    for kind in ("qwen2", "llama-bpe", "smollm", "gpt-2"):
        tok[kind] = os.path.join(WORK, f"tok-{kind}")
        make_tokenizer(tok[kind], kind, merges_as_strings=kind == "smollm", jinja_file=kind == "gpt-2")
    n = len(json.load(open(os.path.join(tok["qwen2"], "tokenizer.json")))["model"]["vocab"]) + 2
    models_ = []

    def model(name, arch, kind, vocab, **kw):
        d = os.path.join(WORK, name)
        init_model(d, arch, tok[kind], vocab, **kw)
        models_.append(d)
        return d

    model("llama", "llama", "llama-bpe", n, dtype="bfloat16")
    model("llama-tied-fp32", "llama", "gpt-2", n + 20, dtype="float32", tie=True)  # 20 rows past the tokenizer
    model("mistral", "mistral", "smollm", n, dtype="bfloat16")
    model("qwen2", "qwen2", "qwen2", n, dtype="bfloat16", tie=True)
    model("qwen3", "qwen3", "qwen2", n, dtype="float32", head_dim=32)  # head_dim * heads != hidden
    sharded = model("qwen3-sharded", "qwen3", "qwen2", n, dtype="bfloat16", tie=True)
    shard(sharded)
    rope = model("llama3-rope", "llama", "llama-bpe", n, dtype="float32")
    cfg = json.load(open(os.path.join(rope, "config.json")))
    cfg.pop("rope_parameters", None)
    cfg["rope_theta"] = 500000.0
    cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                           "original_max_position_embeddings": 32}
    cfg["unk_token_id"] = 0
    json.dump(cfg, open(os.path.join(rope, "config.json"), "w"))

    for d in models_:
        check(f"export-{os.path.basename(d)}", export_all_types(d))

    # Malformed input: one line, exit 2; an unwritable output: one line, exit 1.
    bad_arch = os.path.join(WORK, "bad-arch")
    shutil.copytree(models_[0], bad_arch)
    cfg = json.load(open(os.path.join(bad_arch, "config.json")))
    cfg["model_type"] = "gpt_neox"
    json.dump(cfg, open(os.path.join(bad_arch, "config.json"), "w"))
    out = os.path.join(WORK, "x.gguf")
    check("unknown-architecture", one_line_error(["export", "--model", bad_arch, "--out", out], 2, "gpt_neox"))
    truncated = os.path.join(WORK, "truncated")
    shutil.copytree(models_[0], truncated)
    st = os.path.join(truncated, "model.safetensors")
    os.truncate(st, os.path.getsize(st) - 100)
    check("truncated-safetensors", one_line_error(["export", "--model", truncated, "--out", out], 2, "model.safetensors"))
    missing = os.path.join(WORK, "missing-tensor")
    shutil.copytree(models_[0], missing)
    t = load_file(os.path.join(missing, "model.safetensors"))
    del t["model.layers.1.mlp.up_proj.weight"]
    save_file(t, os.path.join(missing, "model.safetensors"), metadata={"format": "pt"})
    check("missing-tensor", one_line_error(["export", "--model", missing, "--out", out], 2,
                                           "model.layers.1.mlp.up_proj.weight"))
    no_tok = os.path.join(WORK, "no-tokenizer")
    shutil.copytree(models_[0], no_tok)
    os.remove(os.path.join(no_tok, "tokenizer.json"))
    check("no-tokenizer", one_line_error(["export", "--model", no_tok, "--out", out], 2, "tokenizer.json"))
    meta = os.path.join(WORK, "metaspace")
    shutil.copytree(models_[0], meta)
    make_tokenizer(os.path.join(WORK, "tok-metaspace"), "metaspace")
    shutil.copy(os.path.join(WORK, "tok-metaspace", "tokenizer.json"), os.path.join(meta, "tokenizer.json"))
    check("unsupported-pre-tokenizer", one_line_error(["export", "--model", meta, "--out", out], 2, "pre_tokenizer"))
    check("no-model-dir", one_line_error(["export", "--model", os.path.join(WORK, "nope"), "--out", out], 2, "nope"))
    check("bad-type", one_line_error(["export", "--model", models_[0], "--out", out, "--type", "q4_0"], 2, "q4_0"))
    check("unwritable-output", one_line_error(
        ["export", "--model", models_[0], "--out", os.path.join(WORK, "no-such-dir", "x.gguf")], 1, "no-such-dir"))

    def failed_export_keeps_the_old_file():
        good = os.path.join(WORK, "keep.gguf")
        assert run("export", "--model", models_[0], "--out", good, "--type", "f32").returncode == 0
        before = open(good, "rb").read()
        assert run("export", "--model", truncated, "--out", good).returncode == 2
        assert open(good, "rb").read() == before
    check("failed-export-keeps-the-old-file", failed_export_keeps_the_old_file)

    check("job-export-at-the-end", job_export(models_[0]))

    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def train(spec, name, *extra):
    """`eft-train train` on one rank; (result, its rank events)."""
    events = os.path.join(WORK, f"{name}.events")
    with open(events, "w") as ev:
        r = subprocess.run([EFT, "train", "--config", spec, "--nproc", "1", "--threads", "1", *extra],
                           capture_output=True, text=True, pass_fds=(ev.fileno(),),
                           env=dict(os.environ, EFT_EVENTS_FD=str(ev.fileno())))
    return r, [json.loads(line) for line in open(events) if line.strip()]


def job_export(base):
    """checkpoint.export_gguf: a job's final model (its final full checkpoint; a LoRA run's merged
    model) written as <checkpoint.dir>/model-<type>.gguf, byte for byte what `eft-train export` makes
    of that directory under the job's name, and an `exported` event saying where, what and how big."""
    def fn():
        data = os.path.join(WORK, "job-data.jsonl")
        with open(data, "w") as f:
            for i in range(8):
                ids = [(i * 7 + k) % 200 + 5 for k in range(12)]
                f.write(json.dumps({"input_ids": ids, "labels": ids}) + "\n")

        def spec(name, ckpt, checkpoint_extra):
            path = os.path.join(WORK, f"{name}.yaml")
            with open(path, "w") as f:
                f.write(f"name: {name}\nmodel: {base}\n"
                        f"data: {{train: {data}, format: pretokenized, max_seq_len: 32, packing: false}}\n"
                        "training: {global_batch_size: 4, micro_batch_size: 2, lr: 1.0e-3, precision: fp32, epochs: 1}\n"
                        f"checkpoint: {{dir: {ckpt}, every_steps: 0, {checkpoint_extra}}}\n")
            return path

        for name, extra, lora, source in (("gguf-full", "export_gguf: f16", [], "step-2"),
                                          ("gguf-lora", "export_gguf: q8_0, merge_lora: true",
                                           ["--set", "training.lora.r=4"], "merged")):
            ckpt = os.path.join(WORK, f"{name}-ckpt")
            r, events = train(spec(name, ckpt, extra), name, *lora)
            assert r.returncode == 0, r.stderr[-3000:]
            ftype = "f16" if name == "gguf-full" else "q8_0"
            out = os.path.join(ckpt, f"model-{ftype}.gguf")
            assert os.path.exists(out), os.listdir(ckpt)
            exported = [e for e in events if e["event"] == "exported"]
            assert len(exported) == 1, events
            assert exported[0]["path"] == out and exported[0]["type"] == ftype, exported
            assert exported[0]["bytes"] == os.path.getsize(out), exported
            assert events[-1]["event"] == "finished", events[-1]
            by_hand = os.path.join(WORK, f"{name}-by-hand.gguf")
            h = run("export", "--model", os.path.join(ckpt, source), "--out", by_hand, "--type", ftype, "--name", name)
            assert h.returncode == 0, h.stderr
            assert open(by_hand, "rb").read() == open(out, "rb").read(), f"{name}: differs from eft-train export"
            names = gguf.GGUFReader(out).fields["general.name"]
            assert bytes(names.parts[names.data[0]]).decode() == name

        # A LoRA run exports its merged model: refused up front without merge_lora.
        r, _ = train(spec("gguf-unmerged", os.path.join(WORK, "gguf-unmerged-ckpt"), "export_gguf: f16"), "gguf-unmerged",
                     "--set", "training.lora.r=4")
        assert r.returncode == 2, r.stderr[-2000:]
        assert "spec.checkpoint.export_gguf of a LoRA run needs spec.checkpoint.merge_lora" in r.stderr, r.stderr[-2000:]
    return fn


if __name__ == "__main__":
    sys.exit(main())
