#!/usr/bin/env python3
"""The plain PyTorch training loop eft-train is measured against (bench/trainer/compare.sh).

What a user would write instead of eft-train for the same job, with PyTorch (the project's .venv): a
Llama decoder as nn.Modules (HF layout, rotate-half RoPE, grouped-query attention, SwiGLU MLP,
RMSNorm, tied or untied head), causal attention through F.scaled_dot_product_attention (or, with
--attention matmul, the explicit product and softmax, as the loop had it until 2026-11-27 22:00
with RoPE then in fp32 under autocast),
torch.utils.checkpoint around every layer for full activation checkpointing, bf16 through CPU
autocast (fp32 master weights, as eft keeps), AdamW (torch.optim), gradient clipping at 1.0.

At world size > 1, --parallel picks how a user spreads it over ranks (Gloo):
  ddp    DistributedDataParallel, no_sync() on every micro-batch but the last of a step, so
         gradients are all-reduced once per optimizer step (the default);
  fsdp2  FSDP2 (fully_shard) per layer and at the root, set_requires_gradient_sync(False) on every
         micro-batch but the last; --reshard-after-forward 1 is ZeRO-3 (FSDP2's default, eft's
         `full`), 0 keeps the gathered layers to the backward (eft's `grad_op`); bf16 goes through
         FSDP2's MixedPrecisionPolicy (bf16 gathers, fp32 reductions) instead of autocast.
--compile compiles each layer and the head with its loss (torch.compile, Inductor's CPU backend),
as TorchTitan does: one compiled block reused by every layer, inside the checkpointing.

--hf trains transformers' own model instead (AutoModelForCausalLM with the directory's weights, SDPA
attention, gradient_checkpointing_enable(), the loss from model(input_ids, labels=...)): what a user
fine-tuning a Hugging Face model writes; --compile then compiles each decoder layer (layer.compile()).

Usage (one process per rank; torchrun-style environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
  torch_loop.py --model DIR --data FILE.jsonl --seq 512 --global-batch 8 --micro-batch 1
                --precision bf16|fp32 --steps 8 --threads 2 --events FILE
                [--attention sdpa|matmul] [--compile] [--parallel ddp|fsdp2] [--reshard-after-forward 0|1]
                [--hf]
DIR holds the HF config.json (weights are read only with --hf: throughput does not depend on them);
FILE.jsonl holds {"input_ids": [...]} lines. Rank 0 writes one JSON line per step to --events:
{"step", "seconds", "tokens_per_s", "loss"}, and a final {"peak_rss_bytes"} line.
"""
import argparse
import contextlib
import json
import math
import os
import resource
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint as ckpt


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads, self.kv_heads = c["num_attention_heads"], c.get("num_key_value_heads") or c["num_attention_heads"]
        self.head_dim = c.get("head_dim") or c["hidden_size"] // self.heads
        h, inter, eps = c["hidden_size"], c["intermediate_size"], c.get("rms_norm_eps", 1e-6)
        self.input_layernorm = RMSNorm(h, eps)
        self.q_proj = nn.Linear(h, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(h, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, h, bias=False)
        self.post_attention_layernorm = RMSNorm(h, eps)
        self.gate_proj = nn.Linear(h, inter, bias=False)
        self.up_proj = nn.Linear(h, inter, bias=False)
        self.down_proj = nn.Linear(inter, h, bias=False)

    def forward(self, x, cos, sin, mask):
        """mask None: causal attention through SDPA; else the explicit product with that additive mask."""
        b, t, _ = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = cos.to(q.dtype), sin.to(q.dtype)  # as transformers does: RoPE in the compute dtype
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if mask is None:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        else:
            groups = self.heads // self.kv_heads
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
            attn = torch.softmax(scores.float(), dim=-1).to(q.dtype)
            out = torch.matmul(attn, v)
        out = out.transpose(1, 2).reshape(b, t, -1)
        x = x + self.o_proj(out)
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class Checkpointed(nn.Module):
    """A layer whose activations are recomputed in the backward. Compiling and sharding this module
    (not the inner one) keeps FSDP2's hooks outside the recomputed region, as TorchTitan orders it."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        return ckpt.checkpoint(self.inner, *args, use_reentrant=False)


def head_loss(norm, lm_head, x, labels):
    """Summed cross-entropy of the final norm and head over x: [B, T, H], labels: [B, T]."""
    logits = lm_head(norm(x))
    return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="sum")


class Llama(nn.Module):
    def __init__(self, c, sdpa=True, compile_blocks=False):
        super().__init__()
        self.c = c
        self.sdpa = sdpa
        self.head_loss = torch.compile(head_loss) if compile_blocks else head_loss
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Checkpointed(Layer(c)) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c.get("tie_word_embeddings", False):
            self.lm_head.weight = self.embed_tokens.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=c.get("initializer_range", 0.02))
        if compile_blocks:
            for layer in self.layers:
                layer.compile()

    def forward(self, ids, labels):
        """The summed loss of predicting labels from ids (both [B, T])."""
        t = ids.shape[1]
        head_dim = self.layers[0].inner.head_dim
        inv = 1.0 / (self.c.get("rope_theta", 10000.0) ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(t).float(), inv)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = None if self.sdpa else torch.full((t, t), float("-inf")).triu(1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.head_loss(self.norm, self.lm_head, x, labels)


def hf_model(directory, compile_layers):
    """transformers' model of the directory, as a user fine-tuning it sets it up; and its decoder layers."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32, attn_implementation="sdpa")
    model.config.use_cache = False
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    layers = model.model.layers
    if compile_layers:
        for layer in layers:
            layer.compile()
    return model, layers


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--seq", type=int, default=512)
    p.add_argument("--global-batch", type=int, default=8)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--events", required=True)
    p.add_argument("--attention", choices=["sdpa", "matmul"], default="sdpa")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--parallel", choices=["ddp", "fsdp2"], default="ddp")
    p.add_argument("--reshard-after-forward", type=int, choices=[0, 1], default=1)
    p.add_argument("--hf", action="store_true")
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    if a.hf:
        model, layers = hf_model(a.model, a.compile)
    else:
        config = json.load(open(os.path.join(a.model, "config.json")))
        model = Llama(config, sdpa=a.attention == "sdpa", compile_blocks=a.compile)
        layers = model.layers
    fsdp = world > 1 and a.parallel == "fsdp2"
    bf16 = a.precision == "bf16"
    if fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if bf16 else MixedPrecisionPolicy()
        for layer in layers:
            fully_shard(layer, mp_policy=mp, reshard_after_forward=bool(a.reshard_after_forward))
        fully_shard(model, mp_policy=mp, reshard_after_forward=bool(a.reshard_after_forward))
        wrapped = model
    else:
        wrapped = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    rows = [json.loads(line)["input_ids"][: a.seq] for line in open(a.data)]
    per_rank = a.global_batch // world
    micro_steps = per_rank // a.micro_batch
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16 and not fsdp else contextlib.nullcontext
    events = open(a.events, "w") if rank == 0 else None
    cursor = 0
    for step in range(1, a.steps + 1):
        start = time.perf_counter()
        batch = [rows[(cursor + rank * per_rank + i) % len(rows)] for i in range(per_rank)]
        cursor += a.global_batch
        ids = torch.tensor(batch, dtype=torch.long)
        total_tokens = (ids.shape[1] - 1) * a.global_batch
        loss_sum = 0.0
        for m in range(micro_steps):
            chunk = ids[m * a.micro_batch : (m + 1) * a.micro_batch]
            sync = m == micro_steps - 1 or world == 1
            if fsdp:
                model.set_requires_gradient_sync(sync)
            with (contextlib.nullcontext() if sync or fsdp else wrapped.no_sync()):
                with autocast():
                    if a.hf:  # transformers shifts the labels itself and gives the mean over T - 1 tokens
                        loss = wrapped(input_ids=chunk, labels=chunk).loss * (chunk.numel() - chunk.shape[0])
                    else:
                        loss = wrapped(chunk[:, :-1], chunk[:, 1:])
                (loss * (world / total_tokens)).backward()  # DDP and FSDP2 average over ranks
                loss_sum += loss.item()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        seconds = time.perf_counter() - start
        if events:
            tokens = ids.shape[1] * a.global_batch
            events.write(json.dumps({"step": step, "seconds": seconds, "tokens_per_s": tokens / seconds,
                                     "loss": loss_sum / (total_tokens / world)}) + "\n")
            events.flush()
    if events:
        events.write(json.dumps({"peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}) + "\n")
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
