#!/usr/bin/env python3
"""Writes tests/fixtures/hf/: tiny random models saved by Hugging Face transformers
(`save_pretrained`), with the logits and loss transformers itself computes for fixed inputs.
tests/unit/trainer/model/hf_fixture_test.cc checks that eft's model gives the same on the CPU.

Needs transformers, which the GPU machine has and this project's CI machines do not (no pip
registry): bench/gpu/run.sh runs it there and brings the files back under $OUT.

Usage: hf_fixtures.py OUT_DIR
OUT_DIR/<case>/: config.json and model.safetensors as save_pretrained writes them (fp32), and
reference.safetensors holding
  input_ids [2, T] int64, labels [2, T] int64 (transformers' convention: unshifted, -100 = not
  trained), logits [2, T, V] float32, loss [1] float32 (transformers' mean over trained tokens)
with metadata naming the transformers and torch versions.
"""
import inspect
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file

T = 24
COMMON = dict(vocab_size=256, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
              rms_norm_eps=1e-6, bos_token_id=1, eos_token_id=2, pad_token_id=0)


def rope(theta, scaling=None):
    """RoPE settings as this transformers spells them: rope_parameters (transformers 5, so the
    config.json is what users of 5 get) or rope_theta + rope_scaling (4.x)."""
    if "rope_parameters" in inspect.signature(transformers.LlamaConfig.__init__).parameters:
        return {"rope_parameters": {**(scaling or {"rope_type": "default"}), "rope_theta": theta}}
    return {"rope_theta": theta, "rope_scaling": scaling}


# Each case exercises what sets its architecture apart (see tests/unit/trainer/model/tiny_model.h).
CASES = {
    "llama": (transformers.LlamaConfig, dict(**rope(10000.0), tie_word_embeddings=False)),
    "llama3-rope": (transformers.LlamaConfig, dict(
        **rope(500000.0, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 32}),
        tie_word_embeddings=False)),
    "qwen2": (transformers.Qwen2Config, dict(**rope(1000000.0), tie_word_embeddings=True)),
    "qwen3": (transformers.Qwen3Config, dict(**rope(1000000.0), tie_word_embeddings=True, head_dim=32)),
    "mistral": (transformers.MistralConfig, dict(**rope(1000000.0), tie_word_embeddings=False,
                                                 num_key_value_heads=1, sliding_window=None)),
}


def spread_weights(model, generator):
    """HF's own init (std 0.02) leaves attention nearly uniform and the logits nearly flat, which
    hides mistakes; spread the weights so every rotation, norm weight and bias matters."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=generator))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))
            else:
                p.copy_(torch.randn(p.shape, generator=generator) / p.shape[-1] ** 0.5 * 1.5)


def main():
    out = sys.argv[1]
    torch.use_deterministic_algorithms(True)
    for case, (config_class, extra) in CASES.items():
        generator = torch.Generator().manual_seed(1234)
        config = config_class(**{**COMMON, **extra})
        config._attn_implementation = "eager"  # the textbook computation, not a fused kernel
        try:
            model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        except TypeError:  # transformers < 4.56 says torch_dtype
            model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32)
        spread_weights(model, generator)
        model.eval()
        input_ids = torch.randint(3, COMMON["vocab_size"], (2, T), generator=generator)
        labels = input_ids.clone()
        labels[1, :8] = -100  # a prompt that is not trained
        with torch.no_grad():
            result = model(input_ids=input_ids, labels=labels)
        directory = os.path.join(out, case)
        os.makedirs(directory, exist_ok=True)
        model.save_pretrained(directory, safe_serialization=True)
        for extra_file in ("generation_config.json",):
            path = os.path.join(directory, extra_file)
            if os.path.exists(path):
                os.remove(path)
        save_file({"input_ids": input_ids.contiguous(), "labels": labels.contiguous(),
                   "logits": result.logits.float().contiguous(), "loss": result.loss.float().reshape(1)},
                  os.path.join(directory, "reference.safetensors"),
                  metadata={"transformers": transformers.__version__, "torch": torch.__version__, "case": case})
        print(f"{case}: loss {result.loss.item():.6f}, max |logit| {result.logits.abs().max().item():.3f} "
              f"({sum(p.numel() for p in model.parameters())} parameters)")
    with open(os.path.join(out, "VERSIONS.json"), "w") as f:
        json.dump({"transformers": transformers.__version__, "torch": torch.__version__}, f, indent=1)


if __name__ == "__main__":
    main()
