"""Ferry across (emulated) hosts, issue 12: network namespaces joined by veth pairs on a
bridge, each link shaped with tc (tests/netns/hosts.py), a real ferry-dispatcher, real
ferry-workers and a trainer process each on a host of its own, talking over the
10.77.0.0/24 links and nothing else.
- an epoch from two worker hosts reaches the trainer host exactly once;
- a worker host's cable cut (`ip link set eth0 down`, no FIN, no RST) is survived like a
  worker death: both epochs exactly once;
- the harness leaves nothing behind, also when it is killed with SIGKILL.
Needs root (CI is root); skipped where namespaces cannot be made (under CI=true that
fails instead)."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "netns"))
import hosts as netns  # noqa: E402

TRAINER = os.path.join(HERE, "..", "netns", "trainer.py")


@pytest.fixture(scope="module")
def can():
    ok, why = netns.available()
    if not ok:
        if os.environ.get("CI") == "true":
            pytest.fail("the namespace harness cannot run here: " + why)
        pytest.skip(why)


def first_line(p):
    line = p.stdout.readline()
    assert line.startswith("listening on "), line
    return line.split()[-1]


def cluster(h, bindir, tmp_path, workers):
    """A dispatcher on host "dispatcher", a worker on each named host; the dispatcher's address."""
    logs = []

    def log(name):
        f = open(str(tmp_path / (name + ".log")), "w")
        logs.append(f)
        return f

    d = h.popen("dispatcher", [os.path.join(bindir, "ferry-dispatcher"), "--listen", h.ip("dispatcher") + ":7000",
                               "--work-dir", str(tmp_path / "journal"), "--heartbeat-interval-ms", "100",
                               "--heartbeat-timeout-ms", "1000", "--log-level", "debug"],
                stdout=subprocess.PIPE, stderr=log("dispatcher"), text=True)
    dispatcher = first_line(d)
    for w in workers:
        p = h.popen(w, [os.path.join(bindir, "ferry-worker"), "--listen", h.ip(w) + ":7100", "--threads", "1",
                        "--dispatcher", dispatcher], stdout=subprocess.PIPE, stderr=log(w), text=True)
        first_line(p)
    return dispatcher


def trainer(h, ferry, small_tree, tmp_path, dispatcher, epochs, sleep_ms=0):
    pydir = os.path.dirname(os.path.dirname(ferry.__file__))
    out = tmp_path / "trainer.json"
    p = h.popen("trainer", ["/usr/bin/python3", TRAINER, "--python-dir", pydir, "--data", small_tree, "--dispatcher",
                            dispatcher, "--epochs", str(epochs), "--sleep-ms", str(sleep_ms), "--out", str(out)],
                stdout=subprocess.PIPE, stderr=open(str(tmp_path / "trainer.log"), "w"), text=True)
    return p, out


def test_an_epoch_from_two_worker_hosts_reaches_the_trainer_host_exactly_once(can, ferry, ferry_local, small_tree,
                                                                              tmp_path):
    bindir = os.path.dirname(ferry_local)
    with netns.Hosts(["dispatcher", "w1", "w2", "trainer"]) as h:
        dispatcher = cluster(h, bindir, tmp_path, ["w1", "w2"])
        p, out = trainer(h, ferry, small_tree, tmp_path, dispatcher, epochs=1)
        p.stdout.read()
        assert p.wait(timeout=120) == 0, open(str(tmp_path / "trainer.log")).read()
        [epoch] = json.load(open(str(out)))["epochs"]
        assert sorted(epoch) == list(range(120))
        # Both worker hosts served it, over their links.
        log = open(str(tmp_path / "dispatcher.log")).read()
        for w in ("w1", "w2"):
            assert "registered at %s:7100" % h.ip(w) in log, log[-2000:]
            assert "leased to worker %s:7100" % h.ip(w) in log, "worker host %s served no split" % w
        # The trainer host cannot reach anything but the emulated hosts.
        r = h.run("trainer", ["/usr/bin/python3", "-c", "import socket; socket.create_connection(('127.0.0.1', 7000), 1)"],
                  capture_output=True)
        assert r.returncode != 0


def test_a_worker_hosts_cable_cut_is_survived_like_a_worker_death(can, ferry, ferry_local, small_tree, tmp_path):
    bindir = os.path.dirname(ferry_local)
    with netns.Hosts(["dispatcher", "w1", "w2", "trainer"]) as h:
        dispatcher = cluster(h, bindir, tmp_path, ["w1", "w2"])
        p, out = trainer(h, ferry, small_tree, tmp_path, dispatcher, epochs=2, sleep_ms=20)
        for _ in range(6):
            assert p.stdout.readline().startswith("step")
        h.link_down("w1")  # no FIN, no RST: its packets just stop
        p.stdout.read()
        assert p.wait(timeout=180) == 0, open(str(tmp_path / "trainer.log")).read()[-3000:]
        epochs = json.load(open(str(out)))["epochs"]
        assert [sorted(e) for e in epochs] == [list(range(120))] * 2, "each sample of each epoch exactly once"
        log = open(str(tmp_path / "dispatcher.log")).read()
        assert "missed its heartbeats: removed" in log, log[-2000:]


def test_the_harness_leaves_nothing_behind_when_killed(can, tmp_path):
    code = ("import sys, time; sys.path.insert(0, %r); import hosts\n"
            "h = hosts.Hosts(['a', 'b'])\n"
            "p = h.popen('a', ['sleep', '1000'])\n"
            "print(' '.join(str(x.pid) for x in list(h.holders.values()) + [p]), flush=True)\n"
            "time.sleep(1000)\n") % os.path.join(HERE, "..", "netns")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pids = [int(x) for x in child.stdout.readline().split()]
    assert len(pids) == 4
    child.send_signal(signal.SIGKILL)
    child.wait()
    deadline = time.time() + 10
    while any(os.path.exists("/proc/%d" % pid) for pid in pids) and time.time() < deadline:
        time.sleep(0.05)
    alive = [pid for pid in pids if os.path.exists("/proc/%d" % pid)]
    assert not alive, "left behind: %s" % alive
    # No link of the harness in this namespace either.
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert "port0" not in links and "br0" not in links, links
