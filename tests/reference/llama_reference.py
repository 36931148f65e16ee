#!/usr/bin/python3
"""Independent PyTorch reference for eft's Llama-family decoder (llama, qwen2, qwen3, mistral).

Written from the architecture's formulas, not from the C++ code: RoPE is applied as a complex
rotation of (first half, second half) pairs, attention uses einsum and a boolean mask, RoPE
frequencies are computed in float64. Used by tests/unit/trainer/model/llama_test.cc.

Usage: llama_reference.py DIR
DIR/manifest.json:
  {"config": {...HF config.json...},
   "tensors": {NAME: {"file": F, "dtype": "float32"|"float64"|"int64", "shape": [...]}, ...},
     parameters under their HF names, the batch as input_ids, labels, position_ids, segment_ids
   "want_grads": true|false,
   "lora": {"r": R, "alpha": A}  (optional: LoRA, see below)}
  or, instead of "config" and the parameters, "hf_dir": a Hugging Face model directory whose
  config.json and safetensors files (single or sharded with an index) this script parses itself.
LoRA (docs/lora.md): the parameters then also hold adapters under PEFT's names
("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" [r, in], "...lora_B.weight"
[out, r]); an adapted linear layer computes x W^T + (alpha / r) * (x A^T) B^T, the adapter term in
float32 (no dropout). Only the adapters then get gradients.
Writes DIR/logits.bin (raw little-endian, [B, T, V], the parameters' dtype) and DIR/result.json:
  {"loss_sum": float, "trained_tokens": int, "grads": {NAME: {"file": F, "shape": [...]}}}
"""
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

NUMPY_DTYPES = {"float32": "<f4", "float64": "<f8", "int64": "<i8"}


def read_tensor(directory, entry):
    array = np.fromfile(os.path.join(directory, entry["file"]), dtype=NUMPY_DTYPES[entry["dtype"]])
    return torch.from_numpy(array.astype(array.dtype.newbyteorder("="))).reshape(entry["shape"])


def write_tensor(directory, name, tensor):
    array = tensor.detach().contiguous().numpy()
    array.astype(array.dtype.newbyteorder("<")).tofile(os.path.join(directory, name))


class Config:
    def __init__(self, raw):
        self.model_type = raw["model_type"]
        self.hidden = raw["hidden_size"]
        self.layers = raw["num_hidden_layers"]
        self.heads = raw["num_attention_heads"]
        self.kv_heads = raw.get("num_key_value_heads") or self.heads
        self.head_dim = raw.get("head_dim") or self.hidden // self.heads
        self.eps = raw.get("rms_norm_eps", 1e-6)
        self.theta = raw.get("rope_theta", 10000.0)
        self.rope_scaling = raw.get("rope_scaling")
        self.tied = raw.get("tie_word_embeddings", False)
        self.qkv_bias = self.model_type == "qwen2"
        self.qk_norm = self.model_type == "qwen3"
        pad = raw.get("pad_token_id")
        self.padding_idx = pad if isinstance(pad, int) and 0 <= pad < raw["vocab_size"] else None


def rope_frequencies(cfg):
    """Angular frequency of each rotated pair, float64."""
    j = np.arange(cfg.head_dim // 2, dtype=np.float64)
    freq = cfg.theta ** (-2.0 * j / cfg.head_dim)
    rs = cfg.rope_scaling
    kind = rs and (rs.get("rope_type") or rs.get("type"))
    if kind == "llama3":
        # Llama 3.1: wavelengths longer than orig/low_freq_factor are slowed down by `factor`,
        # shorter than orig/high_freq_factor are left alone, and the band between is blended.
        orig = rs["original_max_position_embeddings"]
        lo, hi, factor = rs["low_freq_factor"], rs["high_freq_factor"], rs["factor"]
        wavelength = 2 * math.pi / freq
        blend = np.clip((orig / wavelength - lo) / (hi - lo), 0.0, 1.0)
        freq = blend * freq + (1 - blend) * freq / factor
    elif kind not in (None, "default"):
        raise SystemExit(f"reference: rope type {kind} not implemented")
    return torch.from_numpy(freq)


def rotate(x, angles):
    """x [B, h, T, D]; angles [B, T, D/2]. Pair (x[i], x[i + D/2]) is a complex number turned by angle."""
    half = x.shape[-1] // 2
    real = torch.float64 if x.dtype == torch.float64 else torch.float32
    angles = angles.to(real)  # the model's cos/sin tables are float32 (float64 for a float64 model)
    turn = torch.polar(torch.ones_like(angles), angles).unsqueeze(1)
    z = torch.complex(x[..., :half].to(real), x[..., half:].to(real)) * turn
    return torch.cat([z.real, z.imag], dim=-1).to(x.dtype)


def rms_norm(x, weight, eps):
    x_wide = x.float() if x.dtype != torch.float64 else x
    normed = x_wide / torch.sqrt(x_wide.square().mean(dim=-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)


def attention(q, k, v, allowed):
    """q [B, H, T, D], k/v [B, KV, T, D], allowed [B, T, T] boolean."""
    groups = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(groups, dim=1)
    v = v.repeat_interleave(groups, dim=1)
    scores = torch.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~allowed.unsqueeze(1), float("-inf"))
    wide = torch.float64 if q.dtype == torch.float64 else torch.float32
    weights = torch.softmax(scores.to(wide), dim=-1).to(q.dtype)
    return torch.einsum("bhqk,bhkd->bhqd", weights, v)


def adapted(p, lora, module, x, bias=None):
    """The linear layer `module` ("self_attn.q_proj") on x, plus its LoRA update when it has one."""
    y = F.linear(x, p[f"{module}.weight"], bias)
    a = p.get(f"lora.{module}.lora_A.weight")
    if a is None:
        return y
    b = p[f"lora.{module}.lora_B.weight"]
    update = (lora["alpha"] / lora["r"]) * ((x.to(a.dtype) @ a.t()) @ b.t())
    return (y.to(update.dtype) + update).to(y.dtype)


def decoder_layer(cfg, p, x, angles, allowed, lora=None):
    B, T, _ = x.shape
    h = rms_norm(x, p["input_layernorm.weight"], cfg.eps)

    def project(name, heads):
        out = adapted(p, lora, f"self_attn.{name}_proj", h, p.get(f"self_attn.{name}_proj.bias"))
        return out.view(B, T, heads, cfg.head_dim)

    q, k, v = project("q", cfg.heads), project("k", cfg.kv_heads), project("v", cfg.kv_heads)
    if cfg.qk_norm:
        q = rms_norm(q, p["self_attn.q_norm.weight"], cfg.eps)
        k = rms_norm(k, p["self_attn.k_norm.weight"], cfg.eps)
    q, k, v = (t.permute(0, 2, 1, 3) for t in (q, k, v))
    out = attention(rotate(q, angles), rotate(k, angles), v, allowed)
    x = x + adapted(p, lora, "self_attn.o_proj", out.permute(0, 2, 1, 3).reshape(B, T, -1))
    h = rms_norm(x, p["post_attention_layernorm.weight"], cfg.eps)
    mlp = adapted(p, lora, "mlp.down_proj",
                  F.silu(adapted(p, lora, "mlp.gate_proj", h)) * adapted(p, lora, "mlp.up_proj", h))
    return x + mlp


def forward(cfg, params, batch, lora=None):
    ids, positions, segments = batch["input_ids"], batch["position_ids"], batch["segment_ids"]
    T = ids.shape[1]
    # Causal within a segment; padding (segment 0) therefore sees itself and earlier padding.
    allowed = (segments.unsqueeze(2) == segments.unsqueeze(1)) & torch.ones(T, T, dtype=torch.bool).tril()
    angles = positions.double().unsqueeze(-1) * rope_frequencies(cfg)
    x = F.embedding(ids, params["model.embed_tokens.weight"], padding_idx=cfg.padding_idx)
    for i in range(cfg.layers):
        prefix = f"model.layers.{i}."
        layer = {name[len(prefix):]: t for name, t in params.items() if name.startswith(prefix)}
        peft = "base_model.model." + prefix
        layer.update({"lora." + name[len(peft):]: t for name, t in params.items() if name.startswith(peft)})
        x = decoder_layer(cfg, layer, x, angles, allowed, lora)
    x = rms_norm(x, params["model.norm.weight"], cfg.eps)
    head = params["model.embed_tokens.weight"] if cfg.tied else params["lm_head.weight"]
    logits = x @ head.t()
    wide = torch.float64 if logits.dtype == torch.float64 else torch.float32
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).to(wide), batch["labels"].reshape(-1),
                           ignore_index=-100, reduction="sum")
    return logits, loss


SAFETENSORS_DTYPES = {"F32": "<f4", "F64": "<f8", "F16": "<f2", "I64": "<i8"}


def read_safetensors(path):
    """Parses a safetensors file from its published layout: u64 header length, JSON header, data."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        begin, end = e["data_offsets"]
        chunk = data[begin:end]
        if e["dtype"] == "BF16":  # no numpy bf16: widen the 16 bits to the top of a float32
            bits = np.frombuffer(chunk, dtype="<u2").astype(np.uint32) << 16
            array = bits.view(np.float32)
        else:
            array = np.frombuffer(chunk, dtype=SAFETENSORS_DTYPES[e["dtype"]])
        out[name] = torch.from_numpy(array.astype(array.dtype.newbyteorder("="))).reshape(e["shape"])
    return out


def read_hf_dir(directory):
    with open(os.path.join(directory, "config.json")) as f:
        config = json.load(f)
    index = os.path.join(directory, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    params = {}
    for name in files:
        params.update(read_safetensors(os.path.join(directory, name)))
    return config, params


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    directory = sys.argv[1]
    torch.set_num_threads(1)
    with open(os.path.join(directory, "manifest.json")) as f:
        manifest = json.load(f)
    tensors = {name: read_tensor(directory, e) for name, e in manifest["tensors"].items()}
    if "hf_dir" in manifest:
        config, params = read_hf_dir(manifest["hf_dir"])
        cfg = Config(config)
        tensors.update(params)
    else:
        cfg = Config(manifest["config"])
    batch_keys = ("input_ids", "labels", "position_ids", "segment_ids")
    batch = {k: tensors.pop(k) for k in batch_keys}
    params = tensors
    want_grads = manifest.get("want_grads", False)
    lora = manifest.get("lora")
    if lora is not None:  # the base is frozen: only adapters train
        params = {n: t.requires_grad_(want_grads) for n, t in params.items() if ".lora_" in n} | \
                 {n: t for n, t in params.items() if ".lora_" not in n}
    else:
        for t in params.values():
            t.requires_grad_(want_grads)
    logits, loss = forward(cfg, params, batch, lora)
    result = {"loss_sum": loss.item(), "trained_tokens": int((batch["labels"] != -100).sum()), "grads": {}}
    write_tensor(directory, "logits.bin", logits)
    if want_grads:
        loss.backward()
        for i, (name, t) in enumerate(params.items()):
            if not t.requires_grad:
                continue
            file = f"grad{i}.bin"
            write_tensor(directory, file, t.grad)
            result["grads"][name] = {"file": file, "shape": list(t.shape)}
    with open(os.path.join(directory, "result.json"), "w") as f:
        json.dump(result, f)


if __name__ == "__main__":
    main()
