#!/usr/bin/env python3
"""Where a step's time goes, from the Chrome trace `eft-train train --profile-steps A:B` writes.

Sums the trace by kernel family (GEMM, attention, norm, elementwise, loss, optimizer, casts and
copies, communication, other) per profiled step:
  - on a GPU: the kernels' own times, plus the step's idle time (wall time of the "eft_step"
    annotations minus the union of kernel intervals: launch gaps and waits);
  - on the CPU: every ATen op's self time (its time less that of the ops it called), on every
    thread, so a multi-threaded op counts once per thread that ran it; autograd's own nodes as
    "autograd engine"; and the rank's main thread's time outside any op (waits for collectives,
    which are no ATen op on Gloo, and eft's own code).
Prints a table (ms per step and share) and, with --json, the same as JSON. Only the standard library.

  bench/gpu/profile_summary.py trace.rank0.json [--json out.json]
"""
import argparse
import json
import re
import sys
from collections import defaultdict

# First match wins; names are matched lowercase. Kernel names (GPU) and ATen op names (CPU) both;
# eft's own kernels (trainer/kernels/cuda: RopeKernel, SwiGlu*Kernel, CrossEntropyKernel,
# AdamWKernel) go to the families of the ops they replace.
FAMILIES = [
    ("autograd engine", r"autograd::engine|cppnode<|backward0|backward1"),
    ("communication", r"nccl|gloo|all_gather|allgather|reduce_scatter|all_reduce|allreduce|c10d|broadcast"),
    ("attention", r"flash|fmha|attention|sdpa|_efficient_attention|softmax_backward_data.*attn"),
    ("optimizer", r"adam|lerp|multi_tensor|foreach|_fused_adamw"),
    ("loss", r"log_softmax|logsumexp|nll_loss|cross_entropy|crossentropykernel|softmax"),
    ("norm", r"rms_norm|layer_norm|rsqrt|norm_kernel"),
    ("gemm", r"gemm|\bmm\b|aten::mm|addmm|bmm|matmul|linear|cutlass|xmma|sm\d+_|cublas|ampere_|hopper_|nvjet"),
    ("casts and copies", r"copy|_to_copy|\bto\b|cast|contiguous|cat\b|aten::cat|clone|memcpy|memset|fill_|zero_|index"),
    ("elementwise", r"elementwise|vectorized|unrolled|ropekernel|swiglu|silu|mul|add|sub|div|neg|exp|pow|sigmoid|where|sum|mean|reduce"),
]
COMPILED = [(name, re.compile(pattern)) for name, pattern in FAMILIES]


def family(name):
    lowered = name.lower()
    for fam, pattern in COMPILED:
        if pattern.search(lowered):
            return fam
    return "other"


def load(path):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    return [e for e in events if e.get("ph") == "X" and "dur" in e]


def union_length(intervals):
    total, end = 0.0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def cpu_self_times(ops):
    """Self time of each op: its duration less its direct children's, per thread."""
    by_thread = defaultdict(list)
    for e in ops:
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    out = []
    for events in by_thread.values():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [event, children's time]
        for e in events:
            while stack and e["ts"] >= stack[-1][0]["ts"] + stack[-1][0]["dur"]:
                done = stack.pop()
                out.append((done[0]["name"], max(0.0, done[0]["dur"] - done[1])))
            if stack:
                stack[-1][1] += e["dur"]
            stack.append([e, 0.0])
        for done in stack:
            out.append((done[0]["name"], max(0.0, done[0]["dur"] - done[1])))
    return out


def summarize(events):
    steps = [e for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("eft_step")]
    if not steps:
        raise SystemExit("no eft_step annotations in the trace: was it written by eft-train --profile-steps?")
    n = len(steps)
    wall = sum(e["dur"] for e in steps)
    kernels = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    sums = defaultdict(float)
    if kernels:
        source = "GPU kernels"
        for e in kernels:
            sums[family(e["name"])] += e["dur"]
        busy = union_length([(e["ts"], e["ts"] + e["dur"]) for e in kernels])
        sums["idle (launch gaps, waits)"] = max(0.0, wall - busy)
        total = wall
    else:
        source = "CPU ops (self time, all threads)"
        ops = [e for e in events if e.get("cat") == "cpu_op"]
        for name, self_us in cpu_self_times(ops):
            sums[family(name)] += self_us
        main = {(e.get("pid"), e.get("tid")) for e in steps}
        covered = [(e["ts"], e["ts"] + e["dur"]) for e in ops if (e.get("pid"), e.get("tid")) in main]
        sums["outside ops (collective waits, eft code)"] = max(0.0, wall - union_length(covered))
        total = sum(sums.values())
    rows = sorted(sums.items(), key=lambda kv: -kv[1])
    return {
        "source": source,
        "steps": n,
        "step_ms": wall / n / 1000.0,
        "families": [{"family": k, "ms_per_step": v / n / 1000.0, "share": v / total if total else 0.0} for k, v in rows],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trace")
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args()
    summary = summarize(load(args.trace))
    print(f"{args.trace}: {summary['steps']} steps, {summary['step_ms']:.1f} ms per step; {summary['source']}")
    print(f"{'family':<28}{'ms/step':>10}{'share':>8}")
    for row in summary["families"]:
        print(f"{row['family']:<28}{row['ms_per_step']:>10.2f}{row['share'] * 100:>7.1f}%")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
