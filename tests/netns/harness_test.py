#!/usr/bin/env python3
"""The namespace harness leaves nothing behind (docs/architecture.md, "Tests"): its networks are
what they claim (addresses per host, a link down is a partition, names resolve as set), and its
namespaces, /etc/netns files and processes are gone after a normal exit, an exception, SIGTERM, and
(by the next run's sweep) kill -9.

Usage: harness_test.py BUILD_DIR. Skipped (exit 77) without root or `ip netns`."""
import os
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import netns_cluster as nc  # noqa: E402

BUILD = None


def namespaces_of(pid):
    out = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(f"eftn{pid}-")]


def etc_of(pid):
    try:
        return [d for d in os.listdir("/etc/netns") if d.startswith(f"eftn{pid}-")]
    except FileNotFoundError:
        return []


# A child that makes a cluster with a running process in it, says "up", then does what argv[1] says.
CHILD = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {here!r})
    import netns_cluster as nc
    with nc.NetnsCluster({dir!r}, {build!r}) as c:
        c.processes_for_test = nc.Process("sleeper", c.command("node1", ["sleep", "300"]), {dir!r} + "/s.log", None)
        print("up", c.processes_for_test.pid, flush=True)
        sys.stdin.readline()  # the parent has counted the namespaces
        if sys.argv[1] == "raise":
            raise RuntimeError("on purpose")
        time.sleep(300)
""")


class HarnessTest(unittest.TestCase):
    def start_child(self, mode):
        d = tempfile.mkdtemp(prefix="eft-netns-h-")
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        p = subprocess.Popen([sys.executable, "-c", CHILD.format(here=HERE, dir=d, build=BUILD), mode],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.addCleanup(p.stdout.close)
        self.addCleanup(p.stdin.close)
        line = p.stdout.readline().split()
        self.assertEqual(line[0], "up")
        # Counted before the child goes on: in "raise" mode it would otherwise be removing them already.
        self.assertEqual(len(namespaces_of(p.pid)), 5)  # switch, controller, three workers
        p.stdin.write("go\n")
        p.stdin.flush()
        return p, int(line[1])

    def assertAllGone(self, pid, sleeper):
        self.assertEqual(namespaces_of(pid), [])
        self.assertEqual(etc_of(pid), [])
        deadline = time.time() + 5
        while nc._pid_alive(sleeper) and time.time() < deadline:
            time.sleep(0.05)
        self.assertFalse(nc._pid_alive(sleeper), "the process in the namespace survived")

    def test_exception_removes_everything(self):
        p, sleeper = self.start_child("raise")
        p.wait(timeout=30)
        self.assertNotEqual(p.returncode, 0)
        self.assertAllGone(p.pid, sleeper)

    def test_sigterm_removes_everything(self):
        p, sleeper = self.start_child("sleep")
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=30)
        self.assertAllGone(p.pid, sleeper)

    def test_the_next_run_removes_what_a_killed_one_left(self):
        p, sleeper = self.start_child("sleep")
        p.kill()
        p.wait(timeout=30)
        self.assertEqual(len(namespaces_of(p.pid)), 5)
        nc.remove_stale_namespaces()
        self.assertAllGone(p.pid, sleeper)

    def test_networks(self):
        d = tempfile.mkdtemp(prefix="eft-netns-h-")
        self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        with nc.NetnsCluster(d, BUILD, loopback_names=["node3"]) as c:
            def reaches(host, ip, port=22):
                # A refused connection proves the address answers; a timeout means nothing does.
                r = c.run(host, [sys.executable, "-c", textwrap.dedent(f"""
                    import socket, sys
                    s = socket.socket(); s.settimeout(1.5)
                    try:
                        s.connect(({ip!r}, {port}))
                    except ConnectionRefusedError:
                        pass
                    except OSError:
                        sys.exit(1)
                """)])
                return r.returncode == 0

            self.assertTrue(reaches("node1", c.mgmt_ip("ctl")))
            self.assertTrue(reaches("node1", c.data_ip("node2")))
            self.assertFalse(reaches("ctl", c.data_ip("node2")))  # the controller is not on the data network
            c.cut("node2", nc.DATA)
            self.assertFalse(reaches("node1", c.data_ip("node2")))
            self.assertTrue(reaches("node1", c.mgmt_ip("node2")))
            c.heal("node2", nc.DATA)
            self.assertTrue(reaches("node1", c.data_ip("node2")))
            resolve = "import socket, sys; print(socket.gethostbyname(sys.argv[1]))"
            self.assertEqual(c.run("node1", [sys.executable, "-c", resolve, "node1"]).stdout.strip(), c.mgmt_ip("node1"))
            self.assertEqual(c.run("node3", [sys.executable, "-c", resolve, "node3"]).stdout.strip(), "127.0.1.1")
            self.assertEqual(c.run("node2", ["hostname"]).stdout.strip(), "node2")
            self.assertNotIn(c.mgmt_ip("node1"), socket.gethostbyname_ex(socket.gethostname())[2])


def set_build(path):
    global BUILD
    BUILD = path

if __name__ == "__main__":
    sys.exit(nc.run_tests(__doc__, set_build))
