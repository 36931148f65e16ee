#!/usr/bin/env python3
"""`make image-test`: a cluster of eft containers that survives the loss of a node (issue 52; docs/docker.md,
"A cluster of containers: make image-test").

Everything in the cluster runs from the image, started the way docs/docker.md starts it:
  - a user-defined Docker network (a subnet of its own, so that a container reconnected after
    `docker network disconnect` gets its address back, as a node does after a network cut);
  - the controller container: a named volume for its state, the join token and the auth tokens
    mounted read-only, docs/docker.md's command (no ports published on the host: the test reaches it
    on the network, so two runs and other work on the machine do not collide on 7070/8080);
  - three worker containers, each `--slots 1` on the CPU, docs/docker.md's flags except `--gpus` and
    `--network host` (the Docker network instead, the worker's address its container name), its
    --work-dir /var/lib/eft-worker and memory snapshots in the container's own /dev/shm
    (`--shm-size`, as k8s/base/worker.yaml gives each pod a memory /dev/shm), and a host directory
    mounted at /shared in every worker: the shared filesystem for the model, the data and checkpoints;
  - the model made by the image's `eft-train init-model`; jobs submitted and read with the image's
    `eftctl` (`docker exec` in a client container on the network, as a user's shell would run it).
The job is tests/netns/workload.py's: a tiny Qwen3, 40 steps at world size up to 3, memory snapshots
every step, a checkpoint every 5 steps; the workers pace each step (EFT_DEBUG_STALL) so that the faults
land mid-run. Phases:
  1. reference: the job uninterrupted, at world size 3;
  2. faults: the same job; `docker kill` of a worker -> goes on at world size 2; `docker start` of it
     -> back to 3; `docker network disconnect` of another -> 2; `docker network connect` -> 3; it must
     SUCCEED with final weights within workload.TOLERANCE (1e-4) of the reference's;
  3. the controller container stopped and started again on its volume: `eftctl job list` shows both
     jobs in the states they ended in, and the three workers are READY again.
Everything started (containers, network, volume, the host directory) is removed at the end, also on
failure or Ctrl-C; on failure every container's log and the workers' rank logs are saved to a
directory whose path is printed.

Usage: tests/image/cluster_test.py [--image eft:dev] [--pace SECONDS] [--keep]
Needs a Docker engine (`make image` starts one) and the repository's .venv (safetensors, numpy) for the
weight comparison. Exit 0: passed; 1: failed; 77: skipped (no engine or no image).
"""
import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "netns"))
import workload  # noqa: E402  (the job, its tolerance and the weight comparison, as the netns tests use them)

UID = 10001  # the image's user (Dockerfile)
WORKERS = 3
SHARED = "/shared"  # where every worker (and the client) mounts the shared filesystem
JOB_TIMEOUT_S = 300
LEASE_LIMIT_S = 10.0
T0 = time.time()


def log(msg):
    print(f"[{time.time() - T0:6.1f}s] {msg}", flush=True)


class Failed(Exception):
    pass


def docker(*args, check=True, timeout=120):
    try:
        r = subprocess.run(["docker", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Failed(f"docker {' '.join(args[:3])}...: no answer in {timeout} s")
    if check and r.returncode != 0:
        raise Failed(f"docker {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def pick_subnet(name, label):
    """Creates network `name` on a free 10.2xx.y.0/24; returns the subnet's first three octets."""
    rng = random.Random(os.getpid())
    last = ""
    for _ in range(20):
        prefix = f"10.{rng.randrange(200, 250)}.{rng.randrange(0, 256)}"
        r = docker("network", "create", "--subnet", f"{prefix}.0/24", "--label", label, name, check=False)
        if r.returncode == 0:
            return prefix
        last = r.stderr.strip()
    raise Failed(f"docker network create: no free subnet: {last}")


class Cluster:
    def __init__(self, image, pace, shm_size):
        self.image = image
        self.pace = pace
        self.shm_size = shm_size
        self.run_id = f"eft-it-{os.getpid()}"
        self.label = f"eft-image-test={self.run_id}"
        self.dir = tempfile.mkdtemp(prefix="eft-image-test-", dir=os.environ.get("TMPDIR", "/tmp"))
        self.shared = os.path.join(self.dir, "shared")
        self.secrets = os.path.join(self.dir, "secrets")
        self.net = f"{self.run_id}-net"
        self.volume = f"{self.run_id}-state"
        self.controller = f"{self.run_id}-controller"
        self.client = f"{self.run_id}-client"
        self.prefix = None
        self.token = ""

    # ---- names ----------------------------------------------------------------------------------

    def worker(self, i):
        return f"{self.run_id}-node{i}"

    def node_name(self, i):
        return f"node{i}"

    def worker_ip(self, i):
        return f"{self.prefix}.{10 + i}"

    # ---- set-up ---------------------------------------------------------------------------------

    def files(self):
        os.makedirs(self.shared)
        os.makedirs(self.secrets)
        # The shared filesystem, writable by the image's user, as docs/docker.md asks of it.
        try:
            os.chown(self.shared, UID, UID)
            os.chmod(self.shared, 0o755)
        except PermissionError:  # not root: a docker-group user
            os.chmod(self.shared, 0o777)
        with open(os.path.join(self.secrets, "join-token"), "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        self.token = os.urandom(32).hex()
        import hashlib
        digest = hashlib.sha256(self.token.encode()).hexdigest()
        with open(os.path.join(self.secrets, "tokens.yaml"), "w") as f:
            f.write(f"- {{user: tester, role: admin, token_sha256: {digest}}}\n")
        for name in ("join-token", "tokens.yaml"):  # readable by uid 10001 (docs/docker.md)
            os.chmod(os.path.join(self.secrets, name), 0o644)
        # The data: workload.py's pretokenized SFT set (the same random numbers), written here: a text
        # file, not a program. The model is made in the image (make_model).
        rng = random.Random(0)
        with open(os.path.join(self.shared, "sft.jsonl"), "w") as f:
            for _ in range(96):
                a = rng.randrange(10, 500)
                answer = [(a + k) % 500 + 10 for k in range(1, 13)]
                f.write(json.dumps({"input_ids": [1, 2, 3, a] + answer, "labels": [-100] * 4 + answer}) + "\n")
        os.chmod(os.path.join(self.shared, "sft.jsonl"), 0o644)

    def network(self):
        self.prefix = pick_subnet(self.net, self.label)
        docker("volume", "create", "--label", self.label, self.volume)

    def make_model(self):
        started = time.time()
        docker("run", "--rm", "--label", self.label, "-v", f"{self.shared}:{SHARED}", self.image,
               "eft-train", "init-model", "--arch", "qwen3", "--hidden", "64", "--layers", "2", "--heads", "4",
               "--kv-heads", "2", "--head-dim", "16", "--intermediate", "128", "--vocab-size", "512",
               "--tie-embeddings", "--dtype", "float32", "--seed", "1", "--out", f"{SHARED}/model")
        log(f"model: eft-train init-model in the image wrote {SHARED}/model ({time.time() - started:.1f} s)")

    def start_controller(self, create=True):
        """docs/docker.md's controller command, on the test's network (no -p: see the module doc)."""
        if create:
            docker("run", "-d", "--name", self.controller, "--label", self.label, "--network", self.net,
                   "--network-alias", "eft-controller",
                   "-v", f"{self.volume}:/var/lib/eft",
                   "-v", f"{self.secrets}/tokens.yaml:/etc/eft/tokens.yaml:ro",
                   "-v", f"{self.secrets}/join-token:/etc/eft/join-token:ro",
                   self.image,
                   "eft-controller", "--db", "/var/lib/eft/eft.db", "--listen", "0.0.0.0:7070",
                   "--http", "0.0.0.0:8080", "--auth-tokens", "/etc/eft/tokens.yaml",
                   "--join-token-file", "/etc/eft/join-token")
        else:
            docker("start", self.controller)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.eftctl("node", "list", check=False).returncode == 0:
                return
            if docker("inspect", "-f", "{{.State.Running}}", self.controller).stdout.strip() != "true":
                raise Failed("the controller container exited: " + self.logs_tail(self.controller))
            time.sleep(0.5)
        raise Failed("the controller does not answer eftctl after 60 s: " + self.logs_tail(self.controller))

    def start_client(self):
        """A container with the image's eftctl on the network: a user's shell (EFT_CONTROLLER, EFT_TOKEN)."""
        docker("run", "-d", "--name", self.client, "--label", self.label, "--network", self.net,
               "-v", f"{self.shared}:{SHARED}:ro", "-e", "EFT_CONTROLLER=eft-controller:7070",
               "-e", f"EFT_TOKEN={self.token}", self.image, "sleep", "infinity")

    def start_worker(self, i):
        """docs/docker.md's worker command ("A worker on a Docker network")."""
        env = []
        for k, v in workload.STEP_PACE_ENV.items():
            env += ["-e", f"{k}={self.pace if k == 'EFT_DEBUG_STALL_SECONDS' else v}"]
        shm = ["--shm-size", self.shm_size] if self.shm_size else []
        docker("run", "-d", "--name", self.worker(i), "--label", self.label, "--hostname", self.node_name(i),
               "--init", "--network", self.net, "--ip", self.worker_ip(i), *shm, "--stop-timeout", "300", *env,
               "-v", f"{self.shared}:{SHARED}", "-v", f"{self.secrets}/join-token:/etc/eft/join-token:ro",
               self.image,
               "eft-worker", "--controller", "eft-controller:7070", "--join-token-file", "/etc/eft/join-token",
               "--name", self.node_name(i), "--address", self.node_name(i), "--metrics", "0.0.0.0:9101",
               "--work-dir", "/var/lib/eft-worker", "--slots", "1")

    def ranks(self, i):
        """PIDs of the eft-train processes in worker i's container (`docker top`, from the host)."""
        r = docker("top", self.worker(i), "-o", "pid,comm", check=False)
        return [line.split()[0] for line in r.stdout.splitlines()[1:] if line.split()[1:2] == ["eft-train"]]

    def shm_used(self, i):
        r = docker("exec", self.worker(i), "df", "-k", "/dev/shm", check=False)
        lines = r.stdout.splitlines()
        return f"{int(lines[1].split()[2]) / 1024:.1f} of {int(lines[1].split()[1]) / 1024:.0f} MiB" if len(lines) > 1 else "?"

    # ---- eftctl ---------------------------------------------------------------------------------

    def eftctl(self, *args, check=True, timeout=30):
        r = docker("exec", self.client, "eftctl", *args, check=False, timeout=timeout)
        if check and r.returncode != 0:
            raise Failed(f"eftctl {' '.join(args)}: {r.stderr.strip()}")
        return r

    def eftctl_json(self, *args):
        r = self.eftctl(*args, "-o", "json", check=False, timeout=20)
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)
        except json.JSONDecodeError:
            return None

    def job(self, job_id):
        return self.eftctl_json("job", "get", str(job_id))

    def nodes(self):
        nodes = self.eftctl_json("node", "list")
        if nodes is None:
            return None
        return nodes.get("nodes", []) if isinstance(nodes, dict) else nodes

    def ready(self):
        return sorted(n.get("name", "") for n in (self.nodes() or []) if n.get("state") == "NODE_STATE_READY")

    def wait_ready(self, count, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            seen = self.ready()
            if len(seen) >= count:
                return seen
            time.sleep(0.5)
        raise Failed(f"fewer than {count} nodes READY after {timeout} s: {self.nodes()}")

    def submit(self, name, nodes_min=1, nodes_max=3):
        spec = os.path.join(self.shared, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(f"""name: {name}
model: {SHARED}/model
data: {{train: {SHARED}/sft.jsonl, format: pretokenized, max_seq_len: 64, packing: false}}
resources: {{nodes: {{min: {nodes_min}, max: {nodes_max}}}, gpus_per_node: 1, resize_cooldown_seconds: 0}}
training: {{epochs: 10, global_batch_size: 24, micro_batch_size: 4, lr: 3.0e-4, precision: fp32, seed: 7}}
checkpoint: {{dir: {SHARED}/ckpt-{name}, every_steps: 5, keep_last: 2, memory_every_steps: "1"}}
fault_tolerance: {{max_restarts: 10}}
env: {{OMP_NUM_THREADS: "1"}}
""")
        os.chmod(spec, 0o644)
        r = self.eftctl("job", "submit", "-f", f"{SHARED}/{name}.yaml", "-o", "json")
        return json.loads(r.stdout)["id"]

    # ---- diagnostics and clean-up ---------------------------------------------------------------

    def logs_tail(self, container, lines=15):
        r = docker("logs", "--tail", str(lines), container, check=False)
        return (r.stdout + r.stderr).strip()

    def save_logs(self, where):
        os.makedirs(where, exist_ok=True)
        names = docker("ps", "-a", "--filter", f"label={self.label}", "--format", "{{.Names}}",
                       check=False).stdout.split()
        for name in names:
            r = docker("logs", "-t", name, check=False)
            with open(os.path.join(where, f"{name}.log"), "w") as f:
                f.write(r.stdout + r.stderr)
            if "-node" in name:  # the ranks' logs in the worker's --work-dir
                docker("cp", f"{name}:/var/lib/eft-worker", os.path.join(where, f"{name}-work-dir"), check=False)
        for name in os.listdir(self.shared) if os.path.isdir(self.shared) else []:
            if name.endswith(".yaml"):
                shutil.copy(os.path.join(self.shared, name), where)

    def close(self):
        ids = docker("ps", "-aq", "--filter", f"label={self.label}", check=False).stdout.split()
        if ids:
            docker("rm", "-f", *ids, check=False, timeout=180)
        docker("network", "rm", self.net, check=False)
        docker("volume", "rm", "-f", self.volume, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        if os.path.exists(self.dir):  # not root: files the containers' uid 10001 made
            docker("run", "--rm", "--user", "0", "-v", f"{self.dir}:/x", self.image, "rm", "-rf",
                   "/x/shared", "/x/secrets", check=False)
            shutil.rmtree(self.dir, ignore_errors=True)


class Watcher:
    """Follows a job through eftctl, printing each change of attempt, world size, state and every
    5th step; remembers the world sizes seen."""

    def __init__(self, cluster, job_id, name):
        self.c = cluster
        self.id = job_id
        self.name = name
        self.last = None
        self.job = None
        self.worlds = []  # (attempt, world size), in order

    def poll(self):
        job = self.c.job(self.id)
        if job is None:
            return None
        self.job = job
        attempts = job.get("attempts", [])
        cur = attempts[-1] if attempts else {}
        key = (job.get("attempt"), cur.get("worldSize"), job.get("state"), workload.step_of(job) // 5)
        if key != self.last:
            self.last = key
            log(f"{self.name}: {job.get('state', '?').replace('JOB_STATE_', '')}, attempt {job.get('attempt')}, "
                f"world size {cur.get('worldSize', '-')} on {','.join(cur.get('nodes', []))}, "
                f"step {workload.step_of(job)}")
        for a in attempts:
            entry = (a.get("number"), a.get("worldSize"))
            if entry[1] and entry not in self.worlds:
                self.worlds.append(entry)
        return job

    def until(self, what, predicate, timeout=120):
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = self.poll()
            if job is not None:
                if predicate(job):
                    return job
                if workload.is_terminal(job):
                    raise Failed(f"{self.name} ended while waiting for {what}:\n{workload.describe(job)}")
            time.sleep(0.3)
        raise Failed(f"{self.name}: no {what} after {timeout} s:\n{workload.describe(self.job)}")

    def running_at(self, world, after_attempt):
        """Predicate: an attempt newer than after_attempt RUNNING at world size `world`."""
        def ok(job):
            attempts = job.get("attempts", [])
            return (job.get("state") == "JOB_STATE_RUNNING" and job.get("attempt", 0) > after_attempt and attempts
                    and attempts[-1].get("worldSize") == world)
        return ok

    def step_at_least(self, step):
        return lambda job: job.get("state") == "JOB_STATE_RUNNING" and workload.step_of(job) >= step

    def end(self, timeout=JOB_TIMEOUT_S):
        deadline = time.time() + timeout
        while time.time() < deadline:
            job = self.poll()
            if job is not None and workload.is_terminal(job):
                return job
            time.sleep(0.5)
        raise Failed(f"{self.name} did not end in {timeout} s:\n{workload.describe(self.job)}")


def final_checkpoint(cluster, name):
    return workload.final_checkpoint(cluster.shared, name)


def check_succeeded(cluster, name, job):
    if job.get("state") != "JOB_STATE_SUCCEEDED":
        raise Failed(f"{name}: {workload.describe(job)}")
    final = final_checkpoint(cluster, name)
    if not final.endswith(f"/step-{workload.STEPS}"):
        raise Failed(f"{name}: the newest checkpoint is {final or '(none)'}, not step-{workload.STEPS}")
    problems = workload.checkpoint_problems(workload.checkpoint_root(cluster.shared, name))
    if problems:
        raise Failed(f"{name}: checkpoints: {problems}")
    return final


def run(args):
    timings = []
    phase_start = time.time()

    def phase_done(what):
        nonlocal phase_start
        timings.append((what, time.time() - phase_start))
        phase_start = time.time()

    c = Cluster(args.image, args.pace, args.shm_size)
    ok = False
    try:
        info = docker("image", "inspect", "-f", "{{.Id}} {{.Created}}", args.image).stdout.split()
        engine = docker("version", "-f", "{{.Server.Version}}", check=False).stdout.strip()
        log(f"image {args.image} ({info[0][7:19]}, built {info[1][:19]}), Docker {engine}; files in {c.dir}; "
            f"docker objects labelled {c.label}")
        c.files()
        c.network()
        log(f"network {c.net} ({c.prefix}.0/24), volume {c.volume}")
        c.make_model()
        c.start_client()
        c.start_controller()
        log("controller: answers the image's eftctl")
        for i in range(1, WORKERS + 1):
            c.start_worker(i)
        log(f"workers: READY {c.wait_ready(WORKERS)}")
        phase_done("set-up (network, volume, model, controller, 3 workers)")

        # ---- 1. the reference: uninterrupted -----------------------------------------------------
        ref_id = c.submit("reference")
        w = Watcher(c, ref_id, "reference")
        ref = w.end()
        reference = check_succeeded(c, "reference", ref)
        if [ws for _, ws in w.worlds] != [3]:
            raise Failed(f"reference: world sizes {w.worlds}, expected one attempt at 3:\n{workload.describe(ref)}")
        log(f"reference: SUCCEEDED at world size 3, {reference}")
        phase_done("reference run (uninterrupted, world size 3)")

        # ---- 2. the same job through a kill and a network cut -------------------------------------
        job_id = c.submit("faults")
        w = Watcher(c, job_id, "faults")
        job = w.until("step 5 at world size 3", lambda j: w.step_at_least(5)(j) and w.running_at(3, 0)(j))
        victim = int(job["attempts"][-1]["nodes"][0][4:])  # rank 0's node: the hardest one to lose
        attempt = job["attempt"]
        log(f"faults: docker kill {c.worker(victim)} (rank 0's node) at step {workload.step_of(job)}")
        t = time.time()
        docker("kill", c.worker(victim))
        job = w.until("an attempt at world size 2 after the kill", w.running_at(2, attempt))
        recovered = time.time() - t
        log(f"faults: attempt {job['attempt']} RUNNING at world size 2, {recovered:.1f} s after the kill")
        attempt = job["attempt"]
        w.until("progress at world size 2", w.step_at_least(workload.step_of(job) + 1))
        log(f"faults: docker start {c.worker(victim)}")
        t = time.time()
        docker("start", c.worker(victim))
        job = w.until("an attempt at world size 3 after the restart", w.running_at(3, attempt))
        regrown = time.time() - t
        log(f"faults: attempt {job['attempt']} RUNNING at world size 3, {regrown:.1f} s after docker start")
        attempt = job["attempt"]
        job = w.until("progress at world size 3", w.step_at_least(workload.step_of(job) + 1))
        cut = next(i for i in range(1, WORKERS + 1) if i != victim)
        log(f"faults: docker network disconnect {c.net} {c.worker(cut)} at step {workload.step_of(job)}")
        log(f"faults: /dev/shm (memory snapshots) in use on {c.node_name(cut)}: {c.shm_used(cut)}")
        t = time.time()
        docker("network", "disconnect", c.net, c.worker(cut))
        job = w.until("an attempt at world size 2 after the cut", w.running_at(2, attempt))
        cut_recovered = time.time() - t
        log(f"faults: attempt {job['attempt']} RUNNING at world size 2, {cut_recovered:.1f} s after the cut")
        # The cut-off worker's lease (the controller's 3 s node-loss timeout) stops its rank: no
        # split brain. 3 s plus the kill and reap, with slack for a loaded machine.
        while c.ranks(cut) and time.time() < t + LEASE_LIMIT_S:
            time.sleep(0.2)
        if c.ranks(cut):
            raise Failed(f"{c.node_name(cut)}'s rank still runs {LEASE_LIMIT_S} s after the cut")
        rank_gone = time.time() - t
        log(f"faults: {c.node_name(cut)}'s rank gone {rank_gone:.1f} s after the cut (its lease)")
        attempt = job["attempt"]
        w.until("progress at world size 2", w.step_at_least(workload.step_of(job) + 1))
        log(f"faults: docker network connect --ip {c.worker_ip(cut)} {c.net} {c.worker(cut)}")
        t = time.time()
        docker("network", "connect", "--ip", c.worker_ip(cut), c.net, c.worker(cut))
        job = w.until("an attempt at world size 3 after the reconnect", w.running_at(3, attempt))
        healed = time.time() - t
        log(f"faults: attempt {job['attempt']} RUNNING at world size 3, {healed:.1f} s after the reconnect")
        job = w.end()
        final = check_succeeded(c, "faults", job)
        diff = workload.weight_diff(reference, final)
        sizes = [ws for _, ws in w.worlds]
        log(f"faults: SUCCEEDED; world sizes by attempt {sizes}; max |w - w_ref| = {diff:.3g}")
        print(workload.describe(job), flush=True)
        for a in job.get("attempts", [])[1:]:
            print(f"  attempt {a.get('number')}: resumed from step {a.get('resumeStep', '?')} "
                  f"({a.get('resumeFrom', '')}), steps lost {a.get('stepsLost', '?')}", flush=True)
        if diff > workload.TOLERANCE:
            raise Failed(f"faults: final weights differ from the reference's by {diff} > {workload.TOLERANCE}")
        for want in ([3, 2], [2, 3]):
            if not any(sizes[k:k + 2] == want for k in range(len(sizes) - 1)):
                raise Failed(f"faults: world sizes {sizes}: no change {want[0]} -> {want[1]}")
        phase_done("fault run (kill, restart, disconnect, reconnect)")

        # ---- 3. the controller restarted on its volume -------------------------------------------
        before = {j["id"]: j["state"] for j in (c.eftctl_json("job", "list") or {}).get("jobs", [])}
        log(f"controller: docker stop + docker start ({len(before)} jobs: {before})")
        docker("stop", "-t", "30", c.controller, timeout=60)
        status = docker("inspect", "-f", "{{.State.ExitCode}}", c.controller).stdout.strip()
        if status != "0":
            raise Failed(f"the controller exited {status} on docker stop: {c.logs_tail(c.controller)}")
        c.start_controller(create=False)
        listing = c.eftctl("job", "list").stdout
        print(listing, flush=True)
        after = {j["id"]: j["state"] for j in (c.eftctl_json("job", "list") or {}).get("jobs", [])}
        if after != before or set(after) != {ref_id, job_id}:
            raise Failed(f"after the controller's restart, eftctl job list shows {after}; before: {before}")
        log(f"controller: restarted on volume {c.volume}: eftctl job list shows every job in its state")
        c.wait_ready(WORKERS, timeout=60)
        time.sleep(4)  # past the 3 s node-loss timeout: READY from heartbeats, not only from the database
        log(f"controller: the workers are back: READY {c.wait_ready(WORKERS, timeout=60)}")
        phase_done("controller restart on its volume")
        ok = True
        total = time.time() - T0
        print("\nimage-test: PASSED", flush=True)
        for what, secs in timings:
            print(f"  {secs:6.1f} s  {what}")
        print(f"  {total:6.1f} s  in all (clean-up after)")
        print(f"  world sizes by attempt: {sizes}; recovery: kill {recovered:.1f} s, regrow {regrown:.1f} s, "
              f"cut {cut_recovered:.1f} s (its rank gone in {rank_gone:.1f} s), reconnect {healed:.1f} s; weight diff {diff:.3g} (<= {workload.TOLERANCE})")
        return 0
    except (Failed, subprocess.SubprocessError, OSError) as e:
        print(f"\nimage-test: FAILED: {e}", file=sys.stderr, flush=True)
        return 1
    except SystemExit as e:
        print(f"\nimage-test: interrupted (exit {e.code}): removing what it started", file=sys.stderr, flush=True)
        raise
    finally:
        if not ok or args.save_logs:
            keep_logs = args.save_logs or tempfile.mkdtemp(prefix="eft-image-test-logs-",
                                                           dir=os.environ.get("TMPDIR", "/tmp"))
            try:
                c.save_logs(keep_logs)
            except Exception as e:  # the clean-up must run regardless
                print(f"saving logs: {e}", file=sys.stderr)
            print(f"image-test: container logs, the workers' rank logs and the job specs in {keep_logs}",
                  file=sys.stderr, flush=True)
        if args.keep:
            print(f"image-test: --keep: left running (labelled {c.label}); files in {c.dir}")
        else:
            t = time.time()
            c.close()
            log(f"removed the containers, network {c.net}, volume {c.volume} and {c.dir} ({time.time() - t:.1f} s)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default=os.environ.get("EFT_IMAGE", "eft:dev"))
    parser.add_argument("--pace", default=os.environ.get("EFT_IMAGE_TEST_PACE", "0.5"),
                        help="seconds each step stalls on the workers (EFT_DEBUG_STALL_SECONDS)")
    parser.add_argument("--shm-size", default="1g",
                        help="the workers' docker run --shm-size ('': Docker's default, 64 MiB)")
    parser.add_argument("--save-logs", metavar="DIR", default="",
                        help="save the containers' logs here also when the test passes")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running (debugging)")
    args = parser.parse_args()
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], stdout=subprocess.DEVNULL,
                                                          stderr=subprocess.DEVNULL).returncode != 0:
        print("SKIPPED: no Docker engine answers (make image starts one)")
        return 77
    if subprocess.run(["docker", "image", "inspect", args.image], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        print(f"SKIPPED: no image {args.image} (make image)")
        return 77

    def on_signal(sig, _frame):
        raise SystemExit(128 + sig)  # unwinds through run()'s finally: everything is removed

    # Also SIGINT: a shell without job control starts background commands with it ignored.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
