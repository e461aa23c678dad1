"""Emulated hosts for Ferry's cross-host tests and benchmarks: each host is a Linux
network namespace with one interface (eth0, 10.77.<net>.<i>/24) on a bridge that lives
in a namespace of its own, every link shaped with tc (netem: delay and rate; where the
kernel has no netem, tbf: the rate alone, and `shaping` says so).

Nothing is created in the machine's own namespace, and nothing outlives the harness:
every namespace is held by a `sleep` started under unshare(1) with PR_SET_PDEATHSIG,
the veth pairs are created inside those namespaces, and the commands run in a host
(nsenter) die with the harness too. Killed with SIGKILL, the harness's namespaces,
links and processes all go with it. Traffic stays between these namespaces: they have
no route out. Needs root (CI is root); `available()` says whether this machine can.

    with Hosts(["dispatcher", "w1", "w2", "trainer"]) as h:
        p = h.popen("w1", ["ferry-worker", "--listen", h.ip("w1") + ":7100", ...])
        h.link_down("w1")   # the host's cable cut
"""
import ctypes
import os
import signal
import subprocess

_libc = ctypes.CDLL(None, use_errno=True)
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setsid()  # its own group: stop() signals it without touching the harness


def available():
    """(True, "") when this process may build namespaces and links, else (False, why)."""
    if os.geteuid() != 0:
        return False, "needs root"
    for tool in ("unshare", "nsenter", "ip", "tc"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            return False, tool + " is not installed"
    r = subprocess.run(["unshare", "--net", "ip", "link", "add", "ferryprobe0", "type", "veth", "peer", "name",
                        "ferryprobe1"], capture_output=True, text=True)
    if r.returncode != 0:
        return False, "cannot create veth pairs in a network namespace: " + r.stderr.strip()
    return True, ""


class Hosts:
    def __init__(self, names, rate="10gbit", delay_ms=0.2, net=77):
        self.names = list(names)
        self.rate, self.delay_ms = rate, delay_ms
        self.holders = {}
        self.procs = []
        self.shaping = None
        self._ips = {n: "10.%d.0.%d" % (net, i + 1) for i, n in enumerate(self.names)}
        try:
            self._build()
        except Exception:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def ip(self, name):
        return self._ips[name]

    def _hold(self, key):
        p = subprocess.Popen(["unshare", "--net", "--", "sleep", "infinity"], preexec_fn=_die_with_parent)
        self.holders[key] = p
        # The namespace exists once unshare has exec'd sleep in it.
        for _ in range(200):
            try:
                if os.readlink("/proc/%d/ns/net" % p.pid) != os.readlink("/proc/self/ns/net") and \
                        os.readlink("/proc/%d/exe" % p.pid).endswith("sleep"):
                    return
            except OSError:
                pass
            subprocess.run(["sleep", "0.01"])
        raise RuntimeError("namespace holder for %s did not start" % key)

    def _in(self, key, argv, check=True):
        r = subprocess.run(["nsenter", "--net=/proc/%d/ns/net" % self.holders[key].pid, "--"] + argv,
                           capture_output=True, text=True)
        if check and r.returncode != 0:
            raise RuntimeError("%s in %s: %s" % (" ".join(argv), key, r.stderr.strip()))
        return r

    def _shape(self, key, dev):
        delay = "%gms" % (self.delay_ms / 2)  # each way: the round trip between two hosts is delay_ms
        r = self._in(key, ["tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", delay, "rate", self.rate],
                     check=False)
        if r.returncode == 0:
            self.shaping = "netem: %s each way, %s" % (delay, self.rate)
            return
        self._in(key, ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", self.rate, "burst", "1mb",
                       "latency", "50ms"])
        self.shaping = "tbf: %s (no netem in this kernel: no added delay)" % self.rate

    def _build(self):
        self._hold("bridge")
        self._in("bridge", ["ip", "link", "add", "br0", "type", "bridge"])
        self._in("bridge", ["ip", "link", "set", "br0", "up"])
        bridge_pid = str(self.holders["bridge"].pid)
        for i, name in enumerate(self.names):
            self._hold(name)
            port = "port%d" % i
            self._in(name, ["ip", "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns", bridge_pid])
            self._in(name, ["ip", "addr", "add", self._ips[name] + "/24", "dev", "eth0"])
            self._in(name, ["ip", "link", "set", "eth0", "up"])
            self._in(name, ["ip", "link", "set", "lo", "up"])
            self._in("bridge", ["ip", "link", "set", port, "master", "br0"])
            self._in("bridge", ["ip", "link", "set", port, "up"])
            self._shape(name, "eth0")    # host -> bridge
            self._shape("bridge", port)  # bridge -> host

    def popen(self, name, argv, **kw):
        """`argv` running in host `name` (it dies with the harness)."""
        p = subprocess.Popen(["nsenter", "--net=/proc/%d/ns/net" % self.holders[name].pid, "--"] + list(argv),
                             preexec_fn=_die_with_parent, **kw)
        self.procs.append(p)
        return p

    def run(self, name, argv, **kw):
        return subprocess.run(["nsenter", "--net=/proc/%d/ns/net" % self.holders[name].pid, "--"] + list(argv), **kw)

    def link_down(self, name):
        self._in(name, ["ip", "link", "set", "eth0", "down"])

    def link_up(self, name):
        self._in(name, ["ip", "link", "set", "eth0", "up"])

    @staticmethod
    def stop(p, timeout=30):
        # The whole group, even when its leader has exited: what it started may not have.
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(p.pid, signal.SIGKILL)  # whatever of the group is left
        except ProcessLookupError:
            pass
        p.wait()

    def close(self):
        for p in self.procs:
            self.stop(p, timeout=10)
        for p in self.holders.values():
            p.kill()
            p.wait()
        self.holders.clear()
