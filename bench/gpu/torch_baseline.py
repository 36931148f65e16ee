#!/usr/bin/env python3
"""What a user runs instead of eft-train on one GPU: the PyTorch baseline of issue 28's goal.

Hugging Face transformers' model built from the same config.json eft trains (weights random: speed
does not depend on their values), fp32 parameters under bf16 autocast, SDPA attention, fused AdamW
(torch.optim.AdamW(fused=True)), gradient clipping at 1.0, gradient accumulation to the global batch,
random full-length rows; optionally HF's gradient checkpointing (activation checkpointing, every
layer) and torch.compile of the model. One process, one device.

  torch_baseline.py --model DIR --seq 2048 --global-batch 16 --micro-batch 4 --steps 10
                    [--compile] [--checkpointing] [--device cuda] --events FILE

Writes one JSON line per optimizer step to --events: {"step", "seconds", "tokens_per_s", "loss",
"mfu"} (MFU with eft's formula, ModelConfig::TrainingFlopsPerToken, against --peak-tflops), and a
last {"peak_gpu_bytes"} line. The first steps include compilation and warm-up: take medians after them.
"""
import argparse
import json
import time

import torch


def flops_per_token(model, cfg, seq):
    """eft's ModelConfig::TrainingFlopsPerToken: 6 x the parameters that multiply (all of them, less an
    untied input embedding, which is a lookup) + causal attention's 12 x layers x heads x head_dim x seq."""
    params = sum(p.numel() for p in model.parameters())  # a tied embedding counts once
    if not cfg.tie_word_embeddings:
        params -= cfg.vocab_size * cfg.hidden_size
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 6.0 * params + 12.0 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim * seq


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True)
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--global-batch", type=int, default=16)
    p.add_argument("--micro-batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--checkpointing", action="store_true")
    p.add_argument("--device", default="cuda")
    p.add_argument("--peak-tflops", type=float, default=989.0)
    p.add_argument("--events", required=True)
    a = p.parse_args()

    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(0)
    device = torch.device(a.device)
    cfg = AutoConfig.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32).to(device)
    model.config.use_cache = False
    if a.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    step_model = torch.compile(model) if a.compile else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, fused=True)
    micro_steps = a.global_batch // a.micro_batch
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    flops = flops_per_token(model, cfg, a.seq)
    tokens = a.global_batch * a.seq
    gen = torch.Generator(device="cpu").manual_seed(1)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with open(a.events, "w") as events:
        for step in range(1, a.steps + 1):
            batches = [torch.randint(1, cfg.vocab_size, (a.micro_batch, a.seq), generator=gen).to(device)
                       for _ in range(micro_steps)]
            sync()
            t0 = time.perf_counter()
            total = 0.0
            for ids in batches:
                with autocast:
                    loss = step_model(input_ids=ids, labels=ids).loss / micro_steps
                loss.backward()
                total += loss.detach()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss_value = float(total)
            sync()
            seconds = time.perf_counter() - t0
            tps = tokens / seconds
            line = {"step": step, "seconds": seconds, "tokens_per_s": tps, "loss": loss_value,
                    "mfu": flops * tps / (a.peak_tflops * 1e12)}
            events.write(json.dumps(line) + "\n")
            events.flush()
            print(f"{'compile' if a.compile else 'eager'} step {step} {seconds:.2f}s {tps:,.0f} tokens/s", flush=True)
        peak = torch.cuda.max_memory_allocated() if device.type == "cuda" else None
        events.write(json.dumps({"peak_gpu_bytes": peak}) + "\n")


if __name__ == "__main__":
    main()
