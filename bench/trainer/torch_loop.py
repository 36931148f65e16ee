#!/usr/bin/env python3
"""The plain PyTorch training loop eft-train is measured against (bench/trainer/compare.sh).

What a user would write instead of eft-train for the same job, with PyTorch (the project's .venv): a
Llama decoder as nn.Modules (HF layout, rotate-half RoPE, grouped-query attention, SwiGLU MLP,
RMSNorm, tied or untied head), torch.utils.checkpoint around every layer for full activation
checkpointing, bf16 through CPU autocast (fp32 master weights, as eft keeps), AdamW (torch.optim),
gradient clipping at 1.0, and at world size > 1 DistributedDataParallel over Gloo with no_sync() on
every micro-batch but the last of a step, so gradients are all-reduced once per optimizer step.

Usage (one process per rank; torchrun-style environment: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
  torch_loop.py --model DIR --data FILE.jsonl --seq 512 --global-batch 8 --micro-batch 1
                --precision bf16|fp32 --steps 8 --threads 2 --events FILE
DIR holds the HF config.json (weights are not read: throughput does not depend on their values);
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
        b, t, _ = x.shape
        y = self.input_layernorm(x)
        q = self.q_proj(y).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(y).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask
        attn = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, t, -1)
        x = x + self.o_proj(out)
        y = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(y)) * self.up_proj(y))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c["vocab_size"], c["hidden_size"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.norm = RMSNorm(c["hidden_size"], c.get("rms_norm_eps", 1e-6))
        self.lm_head = nn.Linear(c["hidden_size"], c["vocab_size"], bias=False)
        if c.get("tie_word_embeddings", False):
            self.lm_head.weight = self.embed_tokens.weight
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=c.get("initializer_range", 0.02))

    def forward(self, ids):
        t = ids.shape[1]
        head_dim = self.layers[0].head_dim
        inv = 1.0 / (self.c.get("rope_theta", 10000.0) ** (torch.arange(0, head_dim, 2).float() / head_dim))
        angles = torch.outer(torch.arange(t).float(), inv)
        emb = torch.cat((angles, angles), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.full((t, t), float("-inf")).triu(1)
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = ckpt.checkpoint(layer, x, cos, sin, mask, use_reentrant=False)
        return self.lm_head(self.norm(x))


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
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if world > 1:
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    config = json.load(open(os.path.join(a.model, "config.json")))
    model = Llama(config)
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0)
    rows = [json.loads(line)["input_ids"][: a.seq] for line in open(a.data)]
    per_rank = a.global_batch // world
    micro_steps = per_rank // a.micro_batch
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if a.precision == "bf16" else contextlib.nullcontext
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
            with (contextlib.nullcontext() if sync else ddp.no_sync()):
                with autocast():
                    logits = ddp(chunk[:, :-1])
                loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), chunk[:, 1:].reshape(-1),
                                       reduction="sum")
                (loss * (world / total_tokens)).backward()  # DDP averages over ranks
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
