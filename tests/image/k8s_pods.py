"""The pods of k8s/ as a kubelet lays them out, in Docker: the manifests rendered (Rendered), each pod's
containers started with `docker run` as its spec says (Pod, Container: user and groups, read-only root,
capabilities, volumes, environment with fieldRefs and Secrets, limits) and its probes run as the kubelet
runs them (Prober). k8s_pods_test.py (`make image-k8s-test`) starts them per overlay and checks what
they do; its docstring says what is laid out and how.
"""
import base64
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import yaml

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from cluster_test import T0, Failed, docker, log, pick_subnet  # noqa: E402,F401  (shared with make image-test)

OVERLAYS = {"base": "k8s/base", "dev": "k8s/overlays/dev", "production": "k8s/overlays/production",
            "soperator": "k8s/overlays/soperator"}
WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")
NODES = ("gpu-node-1", "gpu-node-2")  # the two worker "nodes" of each overlay
JOB_TIMEOUT_S = 240


class Skipped(Exception):
    pass


# ---- Kubernetes quantities and helpers ---------------------------------------------------------------

SUFFIXES = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
            "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18, "m": 1e-3}


def quantity(q):
    m = re.fullmatch(r"([0-9.]+(?:e[0-9]+)?)([A-Za-z]*)", str(q))
    if not m or (m.group(2) and m.group(2) not in SUFFIXES):
        raise Failed(f"cannot read the quantity {q!r}")
    return float(m.group(1)) * SUFFIXES.get(m.group(2), 1)


def expand(text, env):
    """$(VAR) as the kubelet expands it in command, args and env values: $$ is a literal $, unknown
    references stay as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def http_status(url, timeout, headers=()):
    """curl from the host as the kubelet's prober: HTTPS unverified, the timeout for the whole request."""
    cmd = ["curl", "-sS", "-k", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", str(timeout), url]
    for h in headers:
        cmd += ["-H", f"{h['name']}: {h['value']}"]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    code = int(r.stdout.strip() or 0)
    return code, (r.stderr.strip() or f"HTTP {code}")


def http_get(url, timeout=5):
    r = subprocess.run(["curl", "-sS", "-k", "--max-time", str(timeout), "-w", "\n%{http_code}", url],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    body, _, code = r.stdout.rpartition("\n")
    return int(code or 0), body


# ---- probes --------------------------------------------------------------------------------------------

class Prober(threading.Thread):
    """One probe of one container, run as the kubelet runs it, until stop()."""

    def __init__(self, container, kind, spec, startup_done=None):
        super().__init__(daemon=True)
        self.c, self.kind, self.spec = container, kind, spec
        self.period = spec.get("periodSeconds", 10)
        self.timeout = spec.get("timeoutSeconds", 1)
        self.failure_threshold = spec.get("failureThreshold", 3)
        self.success_threshold = spec.get("successThreshold", 1)
        self.delay = spec.get("initialDelaySeconds", 0)
        self.startup_done = startup_done  # an Event: liveness/readiness wait for the startup probe
        self.done = threading.Event() if kind == "startupProbe" else None
        self._stop = threading.Event()
        self.results = []  # (seconds since start, ok, detail)
        self.passed = False  # readiness: Ready; startup: succeeded
        self.tripped = None  # liveness/startup: why the kubelet would have restarted the container
        self.consecutive_failures = 0
        self.consecutive_successes = 0
        self.started = time.time()
        self.handler = next((h for h in ("httpGet", "tcpSocket", "exec", "grpc") if h in spec), None)
        if self.handler in (None, "grpc"):
            raise Failed(f"{container.name}: {kind} {spec}: this test cannot run a {self.handler} probe")

    def describe(self):
        s = self.spec
        if "httpGet" in s:
            g = s["httpGet"]
            return f"{g.get('scheme', 'HTTP')} GET :{g['port']}{g.get('path', '/')}"
        if "tcpSocket" in s:
            return f"TCP :{s['tcpSocket']['port']}"
        return f"exec {s['exec']['command']}"

    def once(self):
        s = self.spec
        if "httpGet" in s:
            g = s["httpGet"]
            port = self.c.port(g["port"])
            host = g.get("host") or self.c.pod.ip
            url = f"{g.get('scheme', 'HTTP').lower()}://{host}:{port}{g.get('path', '/')}"
            code, detail = http_status(url, self.timeout, g.get("httpHeaders", []))
            return 200 <= code < 400, detail
        if "tcpSocket" in s:
            try:
                socket.create_connection((self.c.pod.ip, self.c.port(s["tcpSocket"]["port"])), self.timeout).close()
                return True, "connected"
            except OSError as e:
                return False, str(e)
        try:
            r = subprocess.run(["docker", "exec", self.c.cname, *s["exec"]["command"]], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=self.timeout + 2)
            return r.returncode == 0, f"exit {r.returncode}: {r.stdout.strip()[:200]}"
        except subprocess.TimeoutExpired:
            return False, f"no answer in {self.timeout} s"

    def run(self):
        if self.startup_done is not None:
            while not self.startup_done.wait(0.2):
                if self._stop.is_set():
                    return
        if self._stop.wait(self.delay):
            return
        while not self._stop.is_set():
            ok, detail = self.once()
            if self._stop.is_set():
                return  # a probe cut short by the container's deliberate stop counts for nothing
            self.results.append((time.time() - self.started, ok, detail))
            if ok:
                self.consecutive_failures = 0
                self.consecutive_successes += 1
                if self.consecutive_successes >= self.success_threshold:
                    self.passed = True
                    if self.done is not None:
                        self.done.set()
                        return  # the kubelet stops a startup probe once it succeeded
            else:
                self.consecutive_successes = 0
                self.consecutive_failures += 1
                if self.kind == "readinessProbe" and self.consecutive_failures >= self.failure_threshold:
                    self.passed = False
                if self.kind != "readinessProbe" and self.consecutive_failures >= self.failure_threshold and not self.tripped:
                    self.tripped = (f"{self.kind} {self.describe()} failed {self.consecutive_failures} times in a row "
                                    f"(failureThreshold {self.failure_threshold}): {detail}; the kubelet would "
                                    "restart the container")
            self._stop.wait(self.period)

    def stop(self):
        self._stop.set()

    def summary(self):
        good = sum(1 for _, ok, _ in self.results if ok)
        return f"{self.kind} {self.describe()}: {good}/{len(self.results)} passed"


# ---- an overlay's objects, Secrets and volumes --------------------------------------------------------

class Rendered:
    def __init__(self, name, directory, root):
        self.name, self.root = name, root
        proc = subprocess.run([os.path.join(SRC, "tests/deploy/render_k8s.sh"), SRC, os.path.join(SRC, directory)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc.returncode == 77:
            raise Skipped(proc.stderr.strip())
        if proc.returncode != 0:
            raise Failed(f"{name}: rendering {directory} failed:\n{proc.stderr}")
        self.renderer = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "?"
        os.makedirs(root, exist_ok=True)
        with open(os.path.join(root, f"{name}.yaml"), "w") as f:
            f.write(proc.stdout)
        self.objects = [o for o in yaml.safe_load_all(proc.stdout) if o]
        workloads = self.of_kind(*WORKLOAD_KINDS)
        self.namespace = next((o["metadata"].get("namespace") for o in workloads if o["metadata"].get("namespace")),
                              "default")
        self.configmaps = {o["metadata"]["name"]: dict(o.get("data", {})) for o in self.of_kind("ConfigMap")}
        self.secrets = {}
        for o in self.of_kind("Secret"):
            data = {k: base64.b64decode(v).decode() for k, v in (o.get("data") or {}).items()}
            data.update(o.get("stringData") or {})
            self.secrets[o["metadata"]["name"]] = data
        self.admin_token = None
        self.made = []  # Secrets this test made as the docs say
        self._make_missing_secrets()
        for data in self.secrets.values():  # the API is called as the first admin with a plain token
            for entry in yaml.safe_load(data.get("tokens.yaml", "")) or []:
                if entry.get("role") == "admin" and entry.get("token") and not self.admin_token:
                    self.admin_token = entry["token"]
        if not self.admin_token:
            raise Failed(f"{name}: no admin token to call the controller with (tokens.yaml)")

    def of_kind(self, *kinds):
        return [o for o in self.objects if o["kind"] in kinds]

    def _make_missing_secrets(self):
        """Secrets that pods use and the render lacks: made the way docs/kubernetes.md tells operators."""
        documented = {}
        for line in open(os.path.join(SRC, "docs/kubernetes.md")):
            m = re.search(r"create secret generic (\S+)((?: --from-file=\S+)+)", line)
            if m:
                documented[m.group(1)] = re.findall(r"--from-file=(\S+)", m.group(2))
        used = set()
        for w in self.of_kind(*WORKLOAD_KINDS):
            spec = pod_spec(w)
            for v in spec.get("volumes", []):
                if "secret" in v:
                    used.add(v["secret"]["secretName"])
            for c in spec.get("containers", []) + spec.get("initContainers", []):
                for e in c.get("env", []):
                    ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                    if ref:
                        used.add(ref["name"])
        admin = "admin-" + os.urandom(16).hex()
        viewer = "viewer-" + os.urandom(16).hex()
        for name in sorted(used - set(self.secrets)):
            if name not in documented:
                raise Failed(f"{self.name}: pods use Secret {name}, which neither the render nor docs/kubernetes.md's "
                             "`kubectl create secret generic` lines make")
            data = {}
            for key in documented[name]:
                if key == "tokens.yaml":  # docs/auth.md: prefer hashes; the admin's hash, and a viewer's
                    data[key] = "".join(f"- {{user: {u}, role: {r}, token_sha256: {hashlib.sha256(t.encode()).hexdigest()}}}\n"
                                        for u, r, t in (("admin", "admin", admin), ("prometheus", "viewer", viewer)))
                    self.admin_token = admin
                elif key in ("join.token", "join-token"):
                    data[key] = os.urandom(32).hex() + "\n"
                elif key in ("tls.crt", "tls.key", "ca.crt"):
                    data.update(self._certificate())
                else:
                    raise Failed(f"{self.name}: Secret {name} key {key}: this test does not know what it holds")
            self.secrets[name] = {k: data[k] for k in documented[name]}
            self.made.append(f"{name} ({', '.join(documented[name])})")

    def _certificate(self):
        """A self-signed certificate naming the Service (docs/kubernetes.md), which is its own CA."""
        d = tempfile.mkdtemp(dir=self.root)
        svc = "eft-controller"
        names = [svc, f"{svc}.{self.namespace}.svc", f"{svc}.{self.namespace}.svc.cluster.local"]
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                        "-days", "2", "-subj", f"/CN={svc}", "-addext", "subjectAltName=" + ",".join(f"DNS:{n}" for n in names),
                        "-keyout", f"{d}/tls.key", "-out", f"{d}/tls.crt"], check=True, capture_output=True)
        crt, key = open(f"{d}/tls.crt").read(), open(f"{d}/tls.key").read()
        return {"tls.crt": crt, "tls.key": key, "ca.crt": crt}

    def services_for(self, labels):
        return [s for s in self.of_kind("Service")
                if s["spec"].get("selector") and all(labels.get(k) == v for k, v in s["spec"]["selector"].items())]


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


class Pod:
    """One pod of a workload: its volumes made on the host, its eft containers run with docker."""

    def __init__(self, t, r, workload, pod_name, node, ip):
        self.t, self.r, self.w = t, r, workload
        self.name, self.node, self.ip = pod_name, node, ip
        self.host_ip = ip  # the node's address: set by the caller where the pod is not on the host network
        self.spec = pod_spec(workload)
        self.labels = workload["spec"]["template"].get("metadata", {}).get("labels", {})
        self.host_network = bool(self.spec.get("hostNetwork"))
        self.root = os.path.join(t.dir, r.name, "pods", pod_name)
        self.security = self.spec.get("securityContext", {})
        self.fs_group = self.security.get("fsGroup")
        self.containers = []
        for c in self.spec.get("initContainers", []):
            raise Failed(f"{pod_name}: init container {c['name']}: not exercised by this test")
        for c in self.spec["containers"]:
            if not c["image"].startswith(t.image_repo):
                log(f"{r.name}: {pod_name}: container {c['name']} ({c['image']}) is not the eft image: not run")
                continue
            self.containers.append(Container(self, c))
        if not self.containers:
            raise Failed(f"{pod_name}: no container of the eft image")
        self.volumes = {}  # name -> ("bind", host path) | ("tmpfs", size) | ("files", dir)
        self._make_volumes()

    # -- volumes, as the kubelet makes them --

    def _own(self, path, mode):
        gid = self.fs_group if self.fs_group is not None else 0
        os.chown(path, 0, gid)
        os.chmod(path, mode | (0o2000 if self.fs_group is not None and os.path.isdir(path) else 0))

    def _files(self, vname, data, items, default_mode):
        d = os.path.join(self.root, "volumes", vname)
        os.makedirs(d, exist_ok=True)
        files = {i["path"]: (data[i["key"]], i.get("mode", default_mode)) for i in items} if items else \
            {k: (v, default_mode) for k, v in data.items()}
        for rel, (content, mode) in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(content)
            self._own(p, mode)
        self._own(d, 0o755)
        return d

    def _make_volumes(self):
        for tpl in self.w["spec"].get("volumeClaimTemplates", []):  # one claim per pod, kept when it is recreated
            name = tpl["metadata"]["name"]
            self.volumes[name] = ("bind", self.t.claim(self.r, f"{name}-{self.name}", self, tpl["spec"].get("accessModes", [])))
        for v in self.spec.get("volumes", []):
            name = v["name"]
            if "configMap" in v:
                cm = v["configMap"]
                if cm["name"] not in self.r.configmaps:
                    raise Failed(f"{self.name}: ConfigMap {cm['name']} is not in the render")
                self.volumes[name] = ("files", self._files(name, self.r.configmaps[cm["name"]], cm.get("items"),
                                                           cm.get("defaultMode", 0o644)))
            elif "secret" in v:
                s = v["secret"]
                data = self.r.secrets[s["secretName"]]
                missing = [i["key"] for i in s.get("items", []) if i["key"] not in data]
                if missing:
                    raise Failed(f"{self.name}: Secret {s['secretName']} has no key {missing}")
                self.volumes[name] = ("files", self._files(name, data, s.get("items"), s.get("defaultMode", 0o644)))
            elif "emptyDir" in v:
                if v["emptyDir"].get("medium") == "Memory":
                    limit = v["emptyDir"].get("sizeLimit")
                    self.volumes[name] = ("tmpfs", int(quantity(limit)) if limit else None)
                else:
                    d = os.path.join(self.root, "volumes", name)
                    os.makedirs(d, exist_ok=True)
                    self._own(d, 0o777)
                    self.volumes[name] = ("bind", d)
            elif "persistentVolumeClaim" in v:
                cname = v["persistentVolumeClaim"]["claimName"]
                pvc = next((o for o in self.r.of_kind("PersistentVolumeClaim") if o["metadata"]["name"] == cname), None)
                if pvc is None:
                    raise Failed(f"{self.name}: PersistentVolumeClaim {cname} is not in the render")
                self.volumes[name] = ("bind", self.t.claim(self.r, cname, self, pvc["spec"].get("accessModes", [])))
            else:
                raise Failed(f"{self.name}: volume {name} ({sorted(v)}): not laid out by this test")

    def start(self):
        for c in self.containers:
            c.start()

    def stop(self):
        """docker stop with the pod's grace period: the exit statuses, by container."""
        for c in self.containers:
            c.stop_probes()
        grace = self.spec.get("terminationGracePeriodSeconds", 30)
        codes = {}
        for c in self.containers:
            t = time.time()
            docker("stop", "-t", str(grace), c.cname, timeout=grace + 30)
            codes[c.name] = (docker("inspect", "-f", "{{.State.ExitCode}}", c.cname).stdout.strip(), time.time() - t)
        return codes

    def remove(self):
        for c in self.containers:
            c.stop_probes()
            docker("rm", "-f", c.cname, check=False)


class Container:
    def __init__(self, pod, spec):
        self.pod, self.spec, self.name = pod, spec, spec["name"]
        self.cname = f"{pod.t.run_id}-{pod.r.name}-{pod.name}-{spec['name']}"
        self.probers = []

    def port(self, p):
        if isinstance(p, int) or str(p).isdigit():
            return int(p)
        for cp in self.spec.get("ports", []):
            if cp.get("name") == p:
                return cp["containerPort"]
        raise Failed(f"{self.cname}: no container port named {p}")

    def security(self):
        merged = dict(self.pod.security)
        merged.update(self.spec.get("securityContext", {}))
        return merged

    def environment(self):
        """The container's environment as the kubelet makes it: Service variables, envFrom, env."""
        env = {}
        r, pod = self.pod.r, self.pod
        for s in r.of_kind("Service"):  # enableServiceLinks (default true): the Service address here
            if self.pod.spec.get("enableServiceLinks", True) is False:
                break
            n = s["metadata"]["name"].upper().replace("-", "_")
            host = self.pod.t.service_ip.get((r.name, s["metadata"]["name"]))
            if not host:
                continue
            ports = s["spec"]["ports"]
            env[f"{n}_SERVICE_HOST"], env[f"{n}_SERVICE_PORT"] = host, str(ports[0]["port"])
            env[f"{n}_PORT"] = f"tcp://{host}:{ports[0]['port']}"
            for p in ports:
                if p.get("name"):
                    env[f"{n}_SERVICE_PORT_{p['name'].upper().replace('-', '_')}"] = str(p["port"])
                pre = f"{n}_PORT_{p['port']}_TCP"
                env.update({pre: f"tcp://{host}:{p['port']}", f"{pre}_PROTO": "tcp", f"{pre}_PORT": str(p["port"]),
                            f"{pre}_ADDR": host})
        for ef in self.spec.get("envFrom", []):
            src = r.configmaps.get(ef["configMapRef"]["name"]) if "configMapRef" in ef else r.secrets.get(ef["secretRef"]["name"])
            for k, v in (src or {}).items():
                env[ef.get("prefix", "") + k] = v
        limits = self.spec.get("resources", {}).get("limits", {})
        requests = self.spec.get("resources", {}).get("requests", {})
        fields = {"metadata.name": pod.name, "metadata.namespace": r.namespace, "metadata.uid": pod.t.run_id + pod.name,
                  "spec.nodeName": pod.node, "spec.serviceAccountName": pod.spec.get("serviceAccountName", "default"),
                  "status.podIP": pod.ip, "status.podIPs": pod.ip, "status.hostIP": pod.host_ip,
                  "status.hostIPs": pod.host_ip}
        for k, v in pod.labels.items():
            fields[f"metadata.labels['{k}']"] = v
        for e in self.spec.get("env", []):
            if "value" in e:
                env[e["name"]] = expand(e["value"], env)
                continue
            ref = e.get("valueFrom", {})
            if "fieldRef" in ref:
                path = ref["fieldRef"]["fieldPath"]
                if path not in fields:
                    raise Failed(f"{self.cname}: env {e['name']}: fieldRef {path} is not filled by this test")
                env[e["name"]] = fields[path]
            elif "resourceFieldRef" in ref:
                rf = ref["resourceFieldRef"]
                which, res = rf["resource"].split(".", 1)
                q = (limits if which == "limits" else requests).get(res)
                if q is None:
                    raise Failed(f"{self.cname}: env {e['name']}: no {rf['resource']} (the kubelet would use the node's)")
                value = quantity(q) / quantity(rf.get("divisor", "1"))
                env[e["name"]] = str(int(-(-value // 1)))  # rounded up, as the kubelet does
            elif "secretKeyRef" in ref or "configMapKeyRef" in ref:
                kr = ref.get("secretKeyRef") or ref["configMapKeyRef"]
                src = (r.secrets if "secretKeyRef" in ref else r.configmaps).get(kr["name"], {})
                if kr["key"] not in src:
                    if kr.get("optional"):
                        continue
                    raise Failed(f"{self.cname}: env {e['name']}: {kr['name']} has no key {kr['key']}")
                env[e["name"]] = src[kr["key"]]
            else:
                raise Failed(f"{self.cname}: env {e['name']}: {sorted(ref)} not filled by this test")
        return env

    def docker_args(self):
        pod, t = self.pod, self.pod.t
        args = ["--name", self.cname, "--label", t.label, "--label", f"eft-k8s-pod={pod.r.name}/{pod.name}"]
        if self is pod.containers[0]:
            args += ["--hostname", pod.node if pod.host_network else pod.name, "--network", pod.t.net(pod.r),
                     "--ip", pod.ip]
            if not pod.host_network:
                for s in pod.r.services_for(pod.labels):  # the Service's DNS names lead to this pod
                    sname = s["metadata"]["name"]
                    for p in s["spec"]["ports"]:
                        target = p.get("targetPort", p["port"])
                        if self.port(target) != p["port"]:
                            raise Failed(f"Service {sname} port {p['port']} -> {target}: a network alias cannot remap ports")
                    for alias in (sname, f"{sname}.{pod.r.namespace}.svc", f"{sname}.{pod.r.namespace}.svc.cluster.local"):
                        args += ["--network-alias", alias]
                    t.service_ip[(pod.r.name, sname)] = pod.ip
            if pod.spec.get("shareProcessNamespace"):
                args += ["--init"]  # the pod's pause process as PID 1, reaping what ranks leave
        else:
            args += ["--network", f"container:{pod.containers[0].cname}"]
            if pod.spec.get("shareProcessNamespace"):
                args += ["--pid", f"container:{pod.containers[0].cname}"]
        sec = self.security()
        user, group = sec.get("runAsUser"), sec.get("runAsGroup")
        if user is not None:
            args += ["--user", f"{user}:{group}" if group is not None else str(user)]
        elif group is not None:
            raise Failed(f"{self.cname}: runAsGroup without runAsUser: not exercised")
        if sec.get("runAsNonRoot"):
            effective = user if user is not None else t.image_user
            if not str(effective).split(":")[0].isdigit() or int(str(effective).split(":")[0]) == 0:
                raise Failed(f"{self.cname}: runAsNonRoot, but the user would be {effective!r}: the kubelet refuses "
                             "a non-numeric or root image user")
        for g in ([pod.fs_group] if pod.fs_group is not None else []) + pod.security.get("supplementalGroups", []):
            args += ["--group-add", str(g)]
        if sec.get("readOnlyRootFilesystem"):
            args += ["--read-only"]
        if sec.get("allowPrivilegeEscalation") is False:
            args += ["--security-opt", "no-new-privileges"]
        if sec.get("privileged"):
            args += ["--privileged"]
        caps = sec.get("capabilities", {})
        args += [a for c in caps.get("drop", []) for a in ("--cap-drop", c)]
        args += [a for c in caps.get("add", []) for a in ("--cap-add", c)]
        seccomp = sec.get("seccompProfile", {}).get("type", "RuntimeDefault")
        if seccomp == "Unconfined":
            args += ["--security-opt", "seccomp=unconfined"]
        elif seccomp != "RuntimeDefault":
            raise Failed(f"{self.cname}: seccompProfile {seccomp}: not exercised")
        args += ["--stop-timeout", str(pod.spec.get("terminationGracePeriodSeconds", 30))]
        res = self.spec.get("resources", {})
        limits, requests = res.get("limits", {}), res.get("requests", {})
        if "memory" in limits:
            args += ["--memory", str(int(quantity(limits["memory"])))]
        if "cpu" in limits:
            args += ["--cpus", f"{quantity(limits['cpu']):g}"]
        if "cpu" in requests:
            args += ["--cpu-shares", str(max(2, int(quantity(requests["cpu"]) * 1024)))]
        for m in self.spec.get("volumeMounts", []):
            kind, what = pod.volumes[m["name"]]
            ro = m.get("readOnly") or kind == "files"  # ConfigMap and Secret volumes are always read-only
            if kind == "tmpfs":
                size = what or (int(quantity(limits["memory"])) if "memory" in limits else None)
                opts = ["rw", "exec", "nosuid", "nodev", "mode=1777"] + ([f"size={size}"] if size else [])
                if pod.fs_group is not None:
                    opts.append(f"gid={pod.fs_group}")
                args += ["--tmpfs", f"{m['mountPath']}:{','.join(opts)}"]
                continue
            source = os.path.join(what, m["subPath"]) if m.get("subPath") else what
            if not os.path.exists(source):
                if kind == "files":
                    raise Failed(f"{self.cname}: mount {m['name']} subPath {m['subPath']}: no such key")
                os.makedirs(source)
            args += ["-v", f"{source}:{m['mountPath']}" + (":ro" if ro else "")]
        env = self.environment()
        for k, v in env.items():
            args += ["-e", f"{k}={v}"]
        if self.spec.get("workingDir"):
            args += ["-w", self.spec["workingDir"]]
        command = [expand(a, env) for a in self.spec.get("command", [])]
        cargs = [expand(a, env) for a in self.spec.get("args", [])]
        if command:
            return args + ["--entrypoint", command[0], t.image] + command[1:] + cargs, command + cargs
        return args + [t.image] + cargs, cargs

    def start(self):
        args, self.argv = self.docker_args()
        docker("run", "-d", *args)
        startup = self.spec.get("startupProbe")
        self.probers = []
        gate = None
        if startup:
            p = Prober(self, "startupProbe", startup)
            self.probers.append(p)
            gate = p.done
        for kind in ("livenessProbe", "readinessProbe"):
            if self.spec.get(kind):
                self.probers.append(Prober(self, kind, self.spec[kind], gate))
        for p in self.probers:
            p.start()

    def stop_probes(self):
        for p in self.probers:
            p.stop()

    def running(self):
        return docker("inspect", "-f", "{{.State.Running}}", self.cname, check=False).stdout.strip() == "true"

    def logs_tail(self, n=20):
        r = docker("logs", "--tail", str(n), self.cname, check=False)
        return (r.stdout + r.stderr).strip()

    def probe_faults(self):
        return [p.tripped for p in self.probers if p.tripped]

    def wait_probes(self, timeout=60):
        """Until readiness passes and startup succeeded (the kubelet's Ready), failing on a container
        exit or a tripped liveness/startup probe."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if not self.running():
                raise Failed(f"{self.cname} exited ({docker('inspect', '-f', '{{.State.ExitCode}}', self.cname).stdout.strip()}):\n"
                             f"{self.logs_tail()}")
            if self.probe_faults():
                raise Failed(f"{self.cname}: {self.probe_faults()[0]}\n{self.logs_tail()}")
            waiting = [p for p in self.probers if p.kind in ("readinessProbe", "startupProbe") and not p.passed]
            # A liveness probe must answer too (the kubelet's own, every periodSeconds, goes on).
            waiting += [p for p in self.probers if p.kind == "livenessProbe" and not p.once()[0]]
            if not waiting:
                return
            time.sleep(0.2)
        raise Failed(f"{self.cname}: not Ready after {timeout} s: "
                     f"{[(p.kind, p.results[-3:]) for p in self.probers]}\n{self.logs_tail()}")
