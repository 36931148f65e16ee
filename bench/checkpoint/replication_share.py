#!/usr/bin/env python3
"""What the replication of memory snapshots costs the data network (issue 48; docs/benchmarks.md,
"Memory snapshots", "Replication's share of the data network").

Three workers on hosts of their own (network namespaces, tests/netns/netns_cluster.py), each rank's
collectives (gloo) and each worker's snapshot pushes to its peer on the data network. The same job
runs with memory snapshots every step and without them, interleaved round by round; each run counts
the bytes every host sent on its data link (/sys/class/net/data0/statistics/tx_bytes) while the job
ran, and its seconds per step. The difference per step is what replication adds; its share is that
difference over all the data-network bytes of the run with snapshots. Neither depends on the
micro-batches of a step (eft's FSDP reduces gradients once a step), but the seconds a step do, so
--accumulation K shows the same bytes spread over a longer step.

Usage: replication_share.py [--build DIR] [--rounds N] [--steps N] [--hidden H] [--layers L]
                            [--accumulation K] [--seq S]
Needs root and `ip netns` (exit 77 otherwise). Prints one line per run and a summary last.
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "netns"))
import netns_cluster as nc  # noqa: E402
import workload  # noqa: E402


def make_inputs(workdir, build, args):
    model = os.path.join(workdir, "model")
    subprocess.run([os.path.join(build, "trainer", "eft-train"), "init-model", "--arch", "qwen3", "--hidden",
                    str(args.hidden), "--layers", str(args.layers), "--heads", "8", "--kv-heads", "4", "--head-dim",
                    str(args.hidden // 8), "--intermediate", str(args.hidden * 3), "--vocab-size", "4096",
                    "--dtype", "float32", "--seed", "1", "--out", model], check=True, stdout=subprocess.DEVNULL)
    rng = random.Random(0)
    with open(os.path.join(workdir, "sft.jsonl"), "w") as f:
        for _ in range(3 * args.accumulation * args.steps * 2):
            ids = [rng.randrange(10, 4000) for _ in range(args.seq)]
            f.write(json.dumps({"input_ids": ids, "labels": ids}) + "\n")
    return model


def write_spec(workdir, name, args, memory):
    path = os.path.join(workdir, f"{name}.yaml")
    batch = 3 * args.accumulation  # world size 3, micro-batch 1
    with open(path, "w") as f:
        f.write(f"""name: {name}
model: {workdir}/model
data: {{train: {workdir}/sft.jsonl, format: pretokenized, max_seq_len: {args.seq}, packing: false}}
resources: {{nodes: {{min: 3, max: 3}}, gpus_per_node: 1}}
training: {{max_steps: {args.steps}, global_batch_size: {batch}, micro_batch_size: 1, lr: 1.0e-4, precision: fp32, seed: 7}}
checkpoint: {{dir: {workdir}/ckpt-{name}, every_steps: 100000, keep_last: 1, memory_every_steps: "{memory}"}}
env: {{OMP_NUM_THREADS: "1"}}
""")
    return path


def data_tx_bytes(c):
    total = 0
    for i in range(1, c.n + 1):
        r = nc._run("ip", "netns", "exec", c.ns(c.node(i)), "cat", "/sys/class/net/data0/statistics/tx_bytes")
        total += int(r.stdout.strip())
    return total


def run_job(c, workdir, args, memory, n):
    """(bytes sent on the data network while the job ran, seconds per step)."""
    spec = write_spec(workdir, f"share-{n}-m{memory}", args, memory)
    before = data_tx_bytes(c)
    job_id = c.submit(spec)
    job = workload.wait_for(c, job_id, lambda j: j.get("state") == "JOB_STATE_RUNNING" or workload.is_terminal(j),
                            300)
    started = time.time()
    job = workload.wait_for(c, job_id, workload.is_terminal, 1800)
    seconds = time.time() - started
    sent = data_tx_bytes(c) - before
    if (job or {}).get("state") != "JOB_STATE_SUCCEEDED" or len(job.get("attempts", [])) != 1:
        raise SystemExit(f"job {job_id} (memory_every_steps {memory}) did not succeed in one attempt: "
                         f"{workload.describe(job)}")
    shutil.rmtree(os.path.join(workdir, f"ckpt-share-{n}-m{memory}"), ignore_errors=True)
    return sent, seconds / args.steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--accumulation", type=int, default=1)
    ap.add_argument("--seq", type=int, default=128)
    args = ap.parse_args()
    why = nc.available()
    if why:
        print(f"replication_share: skipped: {why}", file=sys.stderr)
        return 77
    workdir = tempfile.mkdtemp(prefix="eft-share-")
    results = {"0": [], "1": []}
    try:
        with nc.NetnsCluster(workdir, args.build, snapshots=True) as c:
            make_inputs(workdir, args.build, args)
            c.start_controller()
            c.start_workers()
            n = 0
            for r in range(args.rounds):
                for memory in (("0", "1") if r % 2 == 0 else ("1", "0")):
                    n += 1
                    sent, per_step = run_job(c, workdir, args, memory, n)
                    results[memory].append((sent / args.steps, per_step))
                    print(f"round {r + 1}, memory_every_steps {memory}: {sent / args.steps / 1e6:.2f} MB a step "
                          f"on the data network, {per_step:.3f} s a step", flush=True)
        without = statistics.median(b for b, _ in results["0"])
        with_ = statistics.median(b for b, _ in results["1"])
        t0 = statistics.median(s for _, s in results["0"])
        t1 = statistics.median(s for _, s in results["1"])
        print(f"model hidden {args.hidden}, {args.layers} layers, seq {args.seq}, {args.accumulation} micro-batch(es) "
              f"a step, world size 3; medians of {args.rounds} rounds:")
        print(f"  data network a step: {without / 1e6:.2f} MB without snapshots, {with_ / 1e6:.2f} MB with "
              f"(replication {(with_ - without) / 1e6:.2f} MB, {100 * (with_ - without) / with_:.0f}% of the traffic)")
        print(f"  seconds a step: {t0:.3f} without, {t1:.3f} with ({100 * (t1 / t0 - 1):+.1f}%)")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
