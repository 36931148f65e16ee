#!/usr/bin/env python3
"""An eft cluster whose hosts are network namespaces (docs/architecture.md, "Tests").

Every host (the controller `ctl`, workers `node1`..`nodeN`) is a network namespace of its own with
its own addresses, on two networks: management (controller <-> workers, 10.231.1.0/24) and data
(rank <-> rank, 10.231.2.0/24). The two bridges live in a "switch" namespace of their own, each host
joined to them by a veth pair, so nothing is added to the machine's own namespace and the same
addresses can be used by two runs at once. A partition takes the switch end of a host's link down.

Each process runs under `ip netns exec`, which also mounts /etc/netns/<ns>/hosts over /etc/hosts,
and in a UTS namespace of its own whose host name is the node's name: so a host's name can be made
to resolve to its management address, or to 127.0.1.1 as on hosts cloned from one image.

Everything is removed at exit, also on an exception or SIGTERM/SIGINT; namespaces left behind by a
run that was killed (their names carry its PID) are removed by the next run. Needs root and
`ip netns`: `available()` says why not, and the callers skip.

Library use: `with NetnsCluster(workdir, ...) as c: c.start_controller(); c.start_workers(); ...`.
"""
import json
import os
import re
import shutil
import tempfile
import signal
import subprocess
import sys
import time

MGMT = "mgmt"
DATA = "data"
_NS_PREFIX = "eftn"
_NS_RE = re.compile(r"^eftn(\d+)-")
CONTROLLER_PORT = 7100


def _run(*args, check=True):
    return subprocess.run(list(args), check=check, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def available():
    """"" when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "not root: network namespaces need root"
    if shutil.which("ip") is None or shutil.which("unshare") is None:
        return "ip (iproute2) or unshare (util-linux) is not installed"
    probe = f"{_NS_PREFIX}{os.getpid()}-probe"
    r = _run("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return "ip netns add failed: " + r.stderr.strip()
    _run("ip", "netns", "del", probe, check=False)
    return ""


def _pid_alive(pid):
    """Running (a zombie, killed but not yet reaped, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def delete_namespace(name):
    """Kills what still runs in namespace `name`, deletes it and its /etc/netns files."""
    for pid in _run("ip", "netns", "pids", name, check=False).stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    _run("ip", "netns", "del", name, check=False)
    shutil.rmtree(f"/etc/netns/{name}", ignore_errors=True)


def run_tests(doc, set_build):
    """main() of a test script: `script.py BUILD_DIR [unittest arguments]`; exit 77 (skipped, saying
    why) where namespaces cannot be made."""
    import unittest

    if len(sys.argv) < 2:
        sys.exit(doc)
    set_build(os.path.abspath(sys.argv.pop(1)))
    why = available()
    if why:
        print(f"SKIPPED: {why}")
        return 77
    return 0 if unittest.main(exit=False, verbosity=2).result.wasSuccessful() else 1


def remove_stale_namespaces():
    """Namespaces (and their /etc/netns files) of earlier runs whose process is gone."""
    r = _run("ip", "netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = _NS_RE.match(name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            delete_namespace(name)


class Process:
    """A process started in a namespace, in a session of its own; stopped by killing its group."""

    def __init__(self, name, argv, log_path, env):
        self.name = name
        self.log_path = log_path
        self._log = open(log_path, "ab")
        self.popen = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                      start_new_session=True)

    @property
    def pid(self):
        return self.popen.pid

    def alive(self):
        return self.popen.poll() is None

    def signal(self, sig):
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self):
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()


class NetnsCluster:
    """A controller and `workers` workers, each a host in a network namespace (see the module doc).

    data_network: workers also get a data-network address, given to eft-worker as --data-address;
      without it, rank traffic shares the management network.
    address: how each worker is told its address: "ip" (--address <management address>) or
      "hostname" (no --address: eft-worker's default, the host name).
    loopback_names: the nodes whose host name resolves to 127.0.1.1 (as on cloned hosts).
    heartbeat: None for the controller's defaults, else (interval_s, timeout_s).
    worker_env: added to every worker's environment (ranks inherit it).
    """

    def __init__(self, workdir, build, workers=3, data_network=True, address="ip", loopback_names=(),
                 heartbeat=None, worker_env=None, trainer=None, snapshots=False):
        # snapshots: the workers hold memory snapshots (off unless asked for: --snapshots=false).
        self.snapshots = snapshots
        self.workdir = os.path.abspath(workdir)
        # Memory snapshots in memory (tmpfs), as on a real node: on the run's disk they would be
        # written back and slow every fsync there, the controller's too. Made by __enter__, removed by
        # close().
        self.shm = os.path.join(self.workdir, "shm")
        self.build = os.path.abspath(build)
        self.n = workers
        self.data_network = data_network
        self.address = address
        self.loopback_names = set(loopback_names)
        self.heartbeat = heartbeat
        self.worker_env = dict(worker_env or {})
        self.trainer = trainer or os.path.join(self.build, "trainer", "eft-train")
        self.tag = f"{_NS_PREFIX}{os.getpid()}-"
        self.hosts = ["ctl"] + [self.node(i) for i in range(1, workers + 1)]
        self.controller = None
        self.workers = {}
        self._made = []
        self._old_handlers = {}
        os.makedirs(self.workdir, exist_ok=True)

    # ---- names and addresses --------------------------------------------------------------------

    @staticmethod
    def node(i):
        return f"node{i}"

    def ns(self, host):
        return self.tag + host

    def mgmt_ip(self, host):
        return "10.231.1.1" if host == "ctl" else f"10.231.1.{10 + int(host[4:])}"

    def data_ip(self, host):
        return f"10.231.2.{10 + int(host[4:])}"

    @property
    def controller_address(self):
        return f"{self.mgmt_ip('ctl')}:{CONTROLLER_PORT}"

    def _switch_port(self, host, net):
        return f"{host[:6]}-{net[0]}"  # "node1-m": at most 15 characters, as Linux wants

    # ---- the networks ---------------------------------------------------------------------------

    def __enter__(self):
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[sig] = signal.signal(sig, self._on_signal)
        if os.path.isdir("/dev/shm"):
            self.shm = tempfile.mkdtemp(prefix="eft-netns-", dir="/dev/shm")
        try:
            remove_stale_namespaces()
            self._make_networks()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _on_signal(self, sig, _frame):
        raise SystemExit(128 + sig)

    def _ip(self, *args):
        _run("ip", *args)

    def _make_networks(self):
        sw = self.ns("sw")
        for host in ["sw"] + self.hosts:
            self._ip("netns", "add", self.ns(host))
            self._made.append(self.ns(host))
            self._ip("-n", self.ns(host), "link", "set", "lo", "up")
        nets = [MGMT, DATA] if self.data_network else [MGMT]
        for net in nets:
            self._ip("-n", sw, "link", "add", f"br-{net}", "type", "bridge")
            self._ip("-n", sw, "link", "set", f"br-{net}", "up")
        for host in self.hosts:
            for net in nets:
                if net == DATA and host == "ctl":
                    continue  # the controller is on the management network only
                port = self._switch_port(host, net)
                self._ip("-n", sw, "link", "add", port, "type", "veth", "peer", "name", f"{net}0", "netns",
                         self.ns(host))
                self._ip("-n", sw, "link", "set", port, "master", f"br-{net}", "up")
                ip = self.mgmt_ip(host) if net == MGMT else self.data_ip(host)
                self._ip("-n", self.ns(host), "addr", "add", f"{ip}/24", "dev", f"{net}0")
                self._ip("-n", self.ns(host), "link", "set", f"{net}0", "up")
            self._write_hosts_file(host)

    def _write_hosts_file(self, host):
        """/etc/hosts as `host` sees it: every host's name at its management address, except that a
        node in loopback_names sees its own name at 127.0.1.1."""
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        for other in self.hosts:
            if other == host and host in self.loopback_names:
                lines.append(f"127.0.1.1 {other}")
            else:
                lines.append(f"{self.mgmt_ip(other)} {other}")
        path = f"/etc/netns/{self.ns(host)}"
        os.makedirs(path, exist_ok=True)
        with open(f"{path}/hosts", "w") as f:
            f.write("\n".join(lines) + "\n")

    def set_loopback_name(self, host, on):
        """From now on (for processes started after), `host`'s name resolves to 127.0.1.1 there
        (on) or to its management address (off)."""
        (self.loopback_names.add if on else self.loopback_names.discard)(host)
        self._write_hosts_file(host)

    def set_link(self, host, net, up):
        """Takes `host`'s link to network `net` down (a partition) or up again."""
        self._ip("-n", self.ns("sw"), "link", "set", self._switch_port(host, net), "up" if up else "down")

    def cut(self, host, *nets):
        for net in nets or ([MGMT, DATA] if self.data_network and host != "ctl" else [MGMT]):
            self.set_link(host, net, False)

    def heal(self, host, *nets):
        for net in nets or ([MGMT, DATA] if self.data_network and host != "ctl" else [MGMT]):
            self.set_link(host, net, True)

    def close(self):
        procs = ([self.controller] if self.controller else []) + list(self.workers.values())
        for p in procs:
            p.kill()
        self.controller = None
        self.workers = {}
        for name in reversed(self._made):
            delete_namespace(name)
        self._made = []
        shutil.rmtree(self.shm, ignore_errors=True)
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)
        self._old_handlers = {}

    # ---- processes ------------------------------------------------------------------------------

    def command(self, host, argv):
        """argv run on `host`: in its network namespace, with its host name."""
        return ["ip", "netns", "exec", self.ns(host), "unshare", "--uts", "--", "sh", "-c",
                'hostname "$0" && exec "$@"', host] + list(argv)

    def run(self, host, argv, timeout=60, env=None):
        return subprocess.run(self.command(host, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout, env=env)

    def start_controller(self):
        config = os.path.join(self.workdir, "controller.yaml")
        with open(config, "w") as f:
            f.write(f"trainer_program: {self.trainer}\n")
        argv = [os.path.join(self.build, "controller", "eft-controller"), "--listen", self.controller_address,
                "--db", os.path.join(self.workdir, "controller.db"), "--config", config,
                # No one but this cluster's hosts can reach its networks (namespaces of its own).
                "--insecure-listen-anywhere"]
        if self.heartbeat:
            argv += ["--heartbeat-interval", str(self.heartbeat[0]), "--heartbeat-timeout", str(self.heartbeat[1])]
        self.controller = Process("controller", self.command("ctl", argv),
                                  os.path.join(self.workdir, "controller.log"), dict(os.environ))
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.eftctl("node", "list", check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("the controller did not come up (controller.log)")

    def start_worker(self, i):
        host = self.node(i)
        argv = [os.path.join(self.build, "worker", "eft-worker"), "--controller", self.controller_address,
                "--name", host, "--slots", "1", "--work-dir", os.path.join(self.workdir, "work", host),
                "--snapshot-dir", os.path.join(self.shm, host)]
        if not self.snapshots:
            argv.append("--snapshots=false")
        if self.address == "ip":
            argv += ["--address", self.mgmt_ip(host)]
        if self.data_network:
            argv += ["--data-address", self.data_ip(host)]
        env = dict(os.environ)
        env["CUDA_VISIBLE_DEVICES"] = ""
        env.update(self.worker_env)
        self.workers[i] = Process(host, self.command(host, argv), os.path.join(self.workdir, f"{host}.log"), env)

    def stop_worker(self, i):
        p = self.workers.pop(i, None)
        if p:
            p.kill()

    def start_workers(self):
        for i in range(1, self.n + 1):
            self.start_worker(i)
        self.wait_ready(self.n)

    def eftctl(self, *args, check=True, timeout=30):
        env = dict(os.environ, EFT_CONTROLLER=self.controller_address)
        r = self.run("ctl", [os.path.join(self.build, "cli", "eftctl"), *args], timeout=timeout, env=env)
        if check and r.returncode != 0:
            raise RuntimeError(f"eftctl {' '.join(args)}: {r.stderr.strip()}")
        return r

    def ready_nodes(self):
        r = self.eftctl("node", "list", "-o", "json", check=False)
        if r.returncode != 0:
            return 0
        try:
            nodes = json.loads(r.stdout)
        except json.JSONDecodeError:
            return 0
        nodes = nodes.get("nodes", nodes) if isinstance(nodes, dict) else nodes
        return sum(1 for n in nodes if n.get("state") == "NODE_STATE_READY")

    def wait_ready(self, count, timeout=60):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.ready_nodes() >= count:
                return
            time.sleep(0.2)
        raise RuntimeError(f"fewer than {count} nodes READY after {timeout} s (node*.log)")

    def submit(self, spec_yaml_path):
        r = self.eftctl("job", "submit", "-f", spec_yaml_path, "-o", "json")
        return json.loads(r.stdout)["id"]

    def job(self, job_id):
        """The job as `eftctl job get -o json` shows it; None when the controller does not answer."""
        r = self.eftctl("job", "get", str(job_id), "-o", "json", check=False, timeout=10)
        if r.returncode != 0:
            return None
        try:
            return json.loads(r.stdout)
        except json.JSONDecodeError:
            return None

    def rank_pids(self, i):
        """PIDs of the ranks (eft-train processes) that worker i runs."""
        w = self.workers.get(i)
        if not w:
            return []
        out = []
        for pid in _run("ip", "netns", "pids", self.ns(self.node(i)), check=False).stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"eft-train"):
                out.append(int(pid))
        return out


def _main(argv):
    """`netns_cluster.py check`: prints why namespaces cannot be made here, exit 1; else exit 0."""
    if argv[1:] == ["check"]:
        why = available()
        print(why or "network namespaces: available")
        return 1 if why else 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv))
