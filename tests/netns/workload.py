"""The job the network tests and the network soak run: the fault soak's (docs/benchmarks.md, "Fault
soak"): a tiny Qwen3 trained by real eft-train ranks for 40 steps at world size up to 3, a sharded
checkpoint every 5 steps. Workers pace each step (EFT_DEBUG_STALL=step, in their environment:
STEP_PACE_ENV) so that a fault lands mid-run; pacing changes no weight."""
import json
import os
import random
import subprocess
import sys
import time

STEPS = 40
STEP_PACE_ENV = {"EFT_DEBUG_STALL": "step", "EFT_DEBUG_STALL_SECONDS": "0.1"}
# Final weights after a change of world size differ from the uninterrupted run's by the order of
# fp32 summation only (docs/checkpoints.md, "Equal weights at another world size").
TOLERANCE = 1e-4

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "soak"))
import soak_util  # noqa: E402  (the loopback soak's checks, shared)


def make_inputs(workdir, build):
    """The model and the data, once per run."""
    model = os.path.join(workdir, "model")
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([os.path.join(build, "trainer", "eft-train"), "init-model", "--arch", "qwen3", "--hidden", "64",
                        "--layers", "2", "--heads", "4", "--kv-heads", "2", "--head-dim", "16", "--intermediate",
                        "128", "--vocab-size", "512", "--tie-embeddings", "--dtype", "float32", "--seed", "1",
                        "--out", model], check=True, stdout=subprocess.DEVNULL)
    rng = random.Random(0)
    with open(os.path.join(workdir, "sft.jsonl"), "w") as f:
        for _ in range(96):
            a = rng.randrange(10, 500)
            answer = [(a + k) % 500 + 10 for k in range(1, 13)]
            f.write(json.dumps({"input_ids": [1, 2, 3, a] + answer, "labels": [-100] * 4 + answer}) + "\n")


def write_spec(workdir, name, nodes_min=1, nodes_max=3, max_restarts=10, memory_every_steps="0", every_steps=5):
    """The job's YAML (its checkpoints in <workdir>/ckpt-<name>); returns its path.

    memory_every_steps: checkpoint.memory_every_steps ("0": none; tests/netns/network_test.py asks
    for "1", with its cluster's workers holding snapshots)."""
    path = os.path.join(workdir, f"{name}.yaml")
    with open(path, "w") as f:
        f.write(f"""name: {name}
model: {workdir}/model
data: {{train: {workdir}/sft.jsonl, format: pretokenized, max_seq_len: 64, packing: false}}
resources: {{nodes: {{min: {nodes_min}, max: {nodes_max}}}, gpus_per_node: 1, resize_cooldown_seconds: 0}}
training: {{epochs: 10, global_batch_size: 24, micro_batch_size: 4, lr: 3.0e-4, precision: fp32, seed: 7}}
checkpoint: {{dir: {workdir}/ckpt-{name}, every_steps: {every_steps}, keep_last: 2, memory_every_steps: "{memory_every_steps}"}}
fault_tolerance: {{max_restarts: {max_restarts}}}
env: {{OMP_NUM_THREADS: "1"}}
""")
    return path


def checkpoint_root(workdir, name):
    return os.path.join(workdir, f"ckpt-{name}")


def final_checkpoint(workdir, name):
    """The newest step-N directory of the job, or ""."""
    root = checkpoint_root(workdir, name)
    try:
        steps = [(int(d[5:]), d) for d in os.listdir(root) if d.startswith("step-") and d[5:].isdigit()]
    except OSError:
        return ""
    return os.path.join(root, max(steps)[1]) if steps else ""


def weight_diff(a_dir, b_dir):
    """max |a - b| over the tensors of two checkpoints' model.safetensors."""
    return soak_util.weight_diff(os.path.join(a_dir, "model.safetensors"), os.path.join(b_dir, "model.safetensors"))


def checkpoint_problems(root):
    """What is wrong with the committed checkpoints under root (a step-N.tmp left behind, a manifest
    that does not match its files)."""
    return soak_util.committed_problems(root)


def step_of(job):
    return int((job or {}).get("progress", {}).get("step", 0) or 0)


def is_terminal(job):
    return (job or {}).get("state") in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED")


def wait_for(cluster, job_id, predicate, timeout):
    """Polls the job until predicate(job) or timeout; returns the last job seen (None: never read)."""
    deadline = time.time() + timeout
    job = None
    while time.time() < deadline:
        seen = cluster.job(job_id)
        if seen is not None:
            job = seen
            if predicate(job):
                return job
        time.sleep(0.1)
    return job


def describe(job):
    if not job:
        return "(job not readable)"
    lines = [f"state {job.get('state')}: {job.get('reason', '')}"]
    for a in job.get("attempts", []):
        lines.append(f"  attempt {a.get('number')}: world {a.get('worldSize')} on {a.get('nodes')}: "
                     f"{a.get('endReason', '')}")
    return "\n".join(lines)
