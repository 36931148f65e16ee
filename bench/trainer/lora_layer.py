"""Time of one decoder layer's linear layers with LoRA adapters computed in fp32 (PEFT without
autocast) or in bf16 (eft-train: the adapters cast to the compute dtype), against full
fine-tuning and the frozen layer alone. PyTorch 1.13 on the CPU, the shapes of
bench/trainer/bench_model.sh's ~20M Llama (hidden 512, MLP 1376, 4 KV heads of 64, r 16),
one sequence of 512 tokens; each repetition is a forward without grad, a forward with grad
and a backward, as activation checkpointing runs a layer. The attention itself is replaced by
an elementwise stand-in: it is the same in every variant.

Usage: OPENBLAS_NUM_THREADS=1 python3 bench/trainer/lora_layer.py [THREADS] [ROUNDS]
(eft-train keeps OpenBLAS single-threaded; docs/benchmarks.md, "LoRA against full fine-tuning")."""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

HIDDEN, MLP, KV, TOKENS, R, SCALE = 512, 1376, 256, 512, 16, 2.0
BF16 = torch.bfloat16
SHAPES = {"q": (HIDDEN, HIDDEN), "k": (KV, HIDDEN), "v": (KV, HIDDEN), "o": (HIDDEN, HIDDEN),
          "gate": (MLP, HIDDEN), "up": (MLP, HIDDEN), "down": (HIDDEN, MLP)}


def weights(trainable):
    return {n: (torch.randn(s) * 0.02).to(BF16).requires_grad_(trainable) for n, s in SHAPES.items()}


def adapters():
    return {n: ((torch.randn(R, i) * 0.02).requires_grad_(True), (torch.randn(o, R) * 0.02).requires_grad_(True))
            for n, (o, i) in SHAPES.items()}


def update_fp32(x, a, b):  # PEFT's order without autocast: fp32 adapter path, sum in fp32, cast back
    return lambda y: (y + F.linear(F.linear(x.to(torch.float32), a), b) * SCALE).to(y.dtype)


def update_bf16(x, a, b):  # eft-train: the adapters cast to the compute dtype
    return lambda y: y + F.linear(F.linear(x, a.to(BF16)), (b * SCALE).to(BF16))


def layer(w, lora, update, x):
    def lin(name, inp):
        y = F.linear(inp, w[name])
        return update(inp, *lora[name])(y) if lora else y
    q, k, v = lin("q", x), lin("k", x), lin("v", x)
    attn = q * 0.5 + k.repeat(1, 1, 2) + v.repeat(1, 1, 2)
    h = x + lin("o", attn)
    return h + lin("down", F.silu(lin("gate", h)) * lin("up", h))


def time_variant(w, lora, update, reps=20):
    x = torch.randn(1, TOKENS, HIDDEN).to(BF16).requires_grad_(True)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        with torch.no_grad():
            layer(w, lora, update, x)
        layer(w, lora, update, x).float().sum().backward()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    full, frozen, lora = weights(True), weights(False), adapters()
    variants = {"full fine-tuning": (full, None, None), "frozen, no adapters": (frozen, None, None),
                "LoRA, fp32 adapters": (frozen, lora, update_fp32), "LoRA, bf16 adapters": (frozen, lora, update_bf16)}
    results = {name: [] for name in variants}
    for _ in range(rounds):  # interleaved
        for name, args in variants.items():
            results[name].append(time_variant(*args) * 1e3)
    print("| variant | ms per layer (median of rounds, min-max) |")
    print("|---|---|")
    for name, ms in results.items():
        print(f"| {name} | {statistics.median(ms):.1f} ({min(ms):.1f}-{max(ms):.1f}) |")


if __name__ == "__main__":
    main()
