#!/usr/bin/env python3
"""The network fault soak (issue 40; docs/benchmarks.md, "Network fault soak"): the fault soak's job
(bench/soak/run.sh: a tiny Qwen3, 40 paced steps at world size up to 3, a sharded checkpoint every 5)
on hosts with their own addresses: a controller and three workers in network namespaces, on a
management and a data network (tests/netns/netns_cluster.py), the controller at its DEFAULT
heartbeat settings. Each trial hits one job with one network fault at a random step:

  node_partition       a node's links to both networks down for 6 s (longer than the 3 s node-loss
                       timeout): the node is lost, the job goes on without it and grows back
  mgmt_partition       only a node's management link down for 6 s: the controller loses it while its
                       rank still reaches its peers and the checkpoint storage (rank 0's node in half
                       the trials: the split brain the lease and the fencing token prevent)
  data_partition       only a node's data link down for 1-5 s: the controller hears every node, the
                       collectives wait for the link and go on
  controller_cut_short the controller cut off from every worker for 1.5 s (< the timeout): nothing
                       may restart
  controller_cut_long  the controller cut off for 6 s: every worker's lease stops its ranks; the job
                       resumes from its newest checkpoint once the network is back
  loopback_host        a node killed (-9) and restarted on a host whose name now resolves to
                       127.0.1.1 (as on hosts cloned from one image), started with --address as a
                       user would: the job shrinks, then grows back onto it

Checked per trial as in run.sh: SUCCEEDED, step 40 reached, final weights equal to an uninterrupted
run's (bit for bit at world size 3 throughout, else within workload.TOLERANCE), every committed
checkpoint verifies; controller_cut_short also: one attempt. Recovery: seconds from the fault until
the job trains past the fault's step again (class Recovered says how that is told), watched from
the moment the fault begins.

Memory snapshots (issue 48; docs/checkpoints.md, "Memory snapshots"): --memory-every N (or auto) turns
them on, the workers holding them in /dev/shm and replicating them over the data network;
--disk-every sets the disk interval (default 5); --max-steps-lost N fails a trial any of whose attempts
lost more than N steps. `--disk-every 200 --memory-every 1 --max-steps-lost 1` is issue 48's network
soak: every recovery from the peers' memory.

Usage: netns_soak.py [--trials N] [--seed S] [--build DIR] [--kinds a,b] [--disk-every N]
[--memory-every N|auto] [--max-steps-lost N]; prints a table by kind and "N passed, M failed" last;
exit 0 only when every trial passed. Needs root and `ip netns`.
"""
import argparse
import json
import os
import random
import sys
import tempfile
import time

SRC = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SRC, "tests", "netns"))
import netns_cluster as nc  # noqa: E402
import workload  # noqa: E402
import soak_util  # noqa: E402  (beside this file; workload.py put its folder on the path)

KINDS = ["node_partition", "mgmt_partition", "data_partition", "controller_cut_short", "controller_cut_long",
         "loopback_host"]


def inject(c, kind, job, rng):
    """Applies the fault; returns (what was done, for the log; how long it lasts, s; how to undo it)."""
    nodes = job["attempts"][-1]["nodes"]
    node = rng.choice(nodes)
    if kind == "node_partition":
        c.cut(node)
        return f"cut {node} off for 6 s", 6, lambda: c.heal(node)
    if kind == "mgmt_partition":
        if rng.random() < 0.5:
            node = nodes[0]  # rank 0's
        c.cut(node, nc.MGMT)
        return (f"cut {node}'s management link for 6 s" + (" (rank 0's node)" if node == nodes[0] else ""), 6,
                lambda: c.heal(node, nc.MGMT))
    if kind == "data_partition":
        seconds = round(rng.uniform(1, 5), 1)
        c.cut(node, nc.DATA)
        return f"cut {node}'s data link for {seconds} s", seconds, lambda: c.heal(node, nc.DATA)
    if kind == "controller_cut_short":
        c.cut("ctl")
        return "cut the controller off for 1.5 s", 1.5, lambda: c.heal("ctl")
    if kind == "controller_cut_long":
        c.cut("ctl")
        return "cut the controller off for 6 s", 6, lambda: c.heal("ctl")
    if kind == "loopback_host":
        i = int(node[4:])
        c.stop_worker(i)
        c.set_loopback_name(node, True)
        return (f"killed {node}, restarted it with its name resolving to 127.0.1.1", 3,
                lambda: c.start_worker(i))
    raise ValueError(kind)


def restore(c):
    """Back to three healthy nodes with resolvable names between trials."""
    for host in c.hosts:
        c.heal(host)
    for node in list(c.loopback_names):
        c.set_loopback_name(node, False)
        i = int(node[4:])
        c.stop_worker(i)
        c.start_worker(i)
    c.wait_ready(3)


class Recovered:
    """Whether a job hit by a fault at `step` has recovered: for the kinds that restart it, a step
    past the fault's reported by a later attempt (the job's progress shows the old attempt's last
    step until the new one reports, and a node cut off from the controller only trains on until it
    is declared lost); for the others, a step two past the fault's (one in flight may end after the
    cut without anything having recovered)."""
    RESTARTING = {"node_partition", "mgmt_partition", "controller_cut_long", "loopback_host"}

    def __init__(self, kind, job, step):
        self.restarting = kind in self.RESTARTING
        self.attempts = len(job["attempts"])
        self.step = step
        self.stale = None  # the progress step when the later attempt was first seen
        self.done = False

    def __call__(self, job):
        if workload.is_terminal(job):  # finished before it was seen training on (a late fault)
            self.done = job.get("state") == "JOB_STATE_SUCCEEDED"
            return True
        now = workload.step_of(job)
        if not self.restarting:
            self.done = now >= self.step + 2
        elif len(job["attempts"]) > self.attempts and "endTime" not in job["attempts"][-1]:
            if self.stale is None:
                self.stale = now
            self.done = now != self.stale and now > self.step
        return self.done


def trial(c, work, n, kind, rng, reference, args):
    at = rng.randrange(3, 33)
    name = f"t{n}"
    job_id = c.submit(workload.write_spec(work, name, every_steps=args.disk_every,
                                          memory_every_steps=args.memory_every))
    job = workload.wait_for(c, job_id, lambda j: workload.step_of(j) >= at or workload.is_terminal(j), 120)
    step = workload.step_of(job)
    t_fault = time.time()
    what, seconds, undo = inject(c, kind, job, rng)
    # Recovery is watched while the fault lasts too: a job that goes on without a cut-off node
    # recovers before the link is back.
    moved_on = Recovered(kind, job, step)
    recovered = workload.wait_for(c, job_id, moved_on, seconds)
    recovery = round(time.time() - t_fault, 1) if moved_on.done else None
    time.sleep(max(0.0, t_fault + seconds - time.time()))
    undo()
    lasted = time.time() - t_fault  # a late heal (a slow poll above) makes a longer fault than asked
    if recovery is None:
        recovered = workload.wait_for(c, job_id, moved_on, 180)
        recovery = round(time.time() - t_fault, 1) if moved_on.done else None
    job = workload.wait_for(c, job_id, workload.is_terminal, 300)
    attempts = (job or {}).get("attempts", [])
    worlds = ",".join(str(a.get("worldSize", 0)) for a in attempts)
    # The most steps any attempt lost, and where each restart resumed from.
    lost = max([int(a.get("stepsLost", 0)) for a in attempts] or [0])
    sources = ",".join("memory" if a.get("resumeFrom", "").endswith(".snapshot") else
                       ("disk" if a.get("resumeFrom") else "-") for a in attempts[1:])
    why, diff = "", None
    final = workload.final_checkpoint(work, name)
    problems = workload.checkpoint_problems(workload.checkpoint_root(work, name))
    if not job or job.get("state") != "JOB_STATE_SUCCEEDED":
        why = f"ended {(job or {}).get('state')}: {(job or {}).get('reason', '')}"
    elif not final.endswith(f"/step-{workload.STEPS}"):
        why = f"final checkpoint {final}, not step-{workload.STEPS}"
    elif problems:
        why = "; ".join(problems)
    elif args.max_steps_lost is not None and lost > args.max_steps_lost:
        why = f"an attempt lost {lost} steps (more than {args.max_steps_lost}; resumed from: {sources})"
    else:
        diff = workload.weight_diff(reference, final)
        if set(worlds.split(",")) == {"3"}:
            if diff != 0.0:
                why = f"weights differ by {diff} at world size 3 throughout"
        elif diff > workload.TOLERANCE:
            why = f"weights differ by {diff} (> {workload.TOLERANCE}) after world sizes {worlds}"
        if kind == "controller_cut_short" and len(job["attempts"]) != 1:
            why = f"a cut shorter than the node-loss timeout restarted the job (world sizes {worlds})"
    # On the transcript, each line flushed: the soak runs for long.
    print(f"trial {n}: {kind} at step {step} ({what}, undone after {lasted:.1f} s): worlds {worlds}, weights off by {diff}, recovered in "
          f"{recovery} s, {lost} steps lost (resumed from {sources or '-'}): {'passed' if not why else 'FAILED: ' + why}",
          flush=True)
    return {"trial": n, "kind": kind, "at_step": step, "what": what, "worlds": worlds, "weight_diff": diff,
            "recovery_s": recovery, "fault_s": round(lasted, 1), "steps_lost": lost, "resumed_from": sources, "passed": not why, "why": why}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--disk-every", type=int, default=5, help="checkpoint.every_steps")
    ap.add_argument("--memory-every", default="0", help="checkpoint.memory_every_steps (0: no memory snapshots)")
    ap.add_argument("--max-steps-lost", type=int, default=None)
    args = ap.parse_args()
    why = nc.available()
    if why:
        sys.exit(f"netns soak: {why}")
    kinds = args.kinds.split(",")
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="eft-netns-soak-")
    print(f"netns soak: {args.trials} trials, seed {args.seed}, kinds {' '.join(kinds)}, disk checkpoints every "
          f"{args.disk_every}, memory snapshots every {args.memory_every}; files in {work}", flush=True)
    results_path = os.path.join(work, "results.jsonl")
    with nc.NetnsCluster(work, args.build, worker_env=workload.STEP_PACE_ENV,
                         snapshots=args.memory_every != "0") as c:
        workload.make_inputs(work, c.build)
        c.start_controller()
        c.start_workers()
        print("netns soak: reference run (no fault)", flush=True)
        ref_id = c.submit(workload.write_spec(work, "reference"))
        ref = workload.wait_for(c, ref_id, workload.is_terminal, 300)
        reference = workload.final_checkpoint(work, "reference")
        if (ref or {}).get("state") != "JOB_STATE_SUCCEEDED" or not reference.endswith(f"/step-{workload.STEPS}"):
            sys.exit(f"netns soak: the reference run did not succeed: {workload.describe(ref)}")
        with open(results_path, "w") as results:
            for n in range(1, args.trials + 1):
                kind = rng.choice(kinds)
                r = trial(c, work, n, kind, rng, reference, args)
                r["seed"] = args.seed
                results.write(json.dumps(r) + "\n")
                results.flush()
                restore(c)
    soak_util.table(results_path)
    with open(results_path) as f:
        return 0 if all(json.loads(line)["passed"] for line in f if line.strip()) else 1


if __name__ == "__main__":
    sys.exit(main())
