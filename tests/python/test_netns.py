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

# One subnet and one bridge for every test here: they run on one pytest process, in turn.
pytestmark = pytest.mark.xdist_group("netns")


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


def resource_config(tmp_path, current):
    """A SageMaker heterogeneous cluster's resourceconfig.json, as seen on `current`."""
    c = {"current_host": current, "current_instance_type": "ml.c5.18xlarge", "current_group_name":
         "data_group" if current in ("algo-1", "algo-2") else "train_group",
         "hosts": ["algo-1", "algo-2", "algo-3"],
         "instance_groups": [
             {"instance_group_name": "data_group", "instance_type": "ml.c5.18xlarge", "hosts": ["algo-1", "algo-2"]},
             {"instance_group_name": "train_group", "instance_type": "ml.p4d.24xlarge", "hosts": ["algo-3"]}],
         "network_interface_name": "eth0"}
    path = tmp_path / ("resourceconfig-%s.json" % current)
    path.write_text(json.dumps(c))
    return str(path)


def test_ferry_launch_from_a_resource_config_on_each_host(can, ferry, ferry_local, small_tree, tmp_path):
    """ferry-launch, the same command on three hosts of a fake heterogeneous cluster: the
    data group's first host runs the dispatcher and a worker, the second a worker, the
    training host the trainer with FERRY_DISPATCHER set; an epoch arrives exactly once
    and the data group exits by itself when training ends."""
    bindir = os.path.dirname(ferry_local)
    launch = os.path.join(bindir, "ferry-launch")
    pydir = os.path.dirname(os.path.dirname(ferry.__file__))
    with netns.Hosts(["algo-1", "algo-2", "algo-3"]) as h:
        mapping = []
        for name in ("algo-1", "algo-2", "algo-3"):
            mapping += ["--host-address", "%s=%s" % (name, h.ip(name))]
        data = []
        # The data roots as a SageMaker job's environment gives them: comma-separated, a
        # URL root among them (its colon once split it in two), to both daemons.
        env = dict(os.environ, FERRY_DATA_ROOT="%s,s3://bucket/train/" % small_tree)
        for name in ("algo-1", "algo-2"):
            data.append(h.popen(name, [launch, "--resource-config", resource_config(tmp_path, name), "--work-dir",
                                       str(tmp_path / ("work-" + name))] + mapping,
                                stderr=open(str(tmp_path / ("%s.log" % name)), "w"), env=env))
        out = tmp_path / "trainer.json"
        t = h.popen("algo-3", [launch, "--resource-config", resource_config(tmp_path, "algo-3")] + mapping +
                    ["--", "/usr/bin/python3", TRAINER, "--python-dir", pydir, "--data", small_tree, "--out", str(out)],
                    stdout=subprocess.DEVNULL, stderr=open(str(tmp_path / "algo-3.log"), "w"))
        assert t.wait(timeout=120) == 0, open(str(tmp_path / "algo-3.log")).read()[-3000:]
        [epoch] = json.load(open(str(out)))["epochs"]
        assert sorted(epoch) == list(range(120))
        for name, p in zip(("algo-1", "algo-2"), data):
            try:
                rc = p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                pytest.fail("the data group did not exit after training: " + open(str(tmp_path / (name + ".log"))).read())
            assert rc == 0, open(str(tmp_path / (name + ".log"))).read()
        log1 = open(str(tmp_path / "algo-1.log")).read()
        assert "ferry-dispatcher on" in log1 and "ferry-worker on" in log1, log1
        assert "ferry-dispatcher on" not in open(str(tmp_path / "algo-2.log")).read()
        roots = "only paths under: %s, s3://bucket/train" % os.path.realpath(small_tree)
        assert roots in log1, log1
        assert "read only under: %s, s3://bucket/train" % os.path.realpath(small_tree) in \
            open(str(tmp_path / "algo-2.log")).read()
        assert "dispatcher %s:7000" % h.ip("algo-1") in open(str(tmp_path / "algo-3.log")).read()


def test_ferry_launch_refuses_a_bad_config_clearly(ferry_local, tmp_path):
    launch = os.path.join(os.path.dirname(ferry_local), "ferry-launch")
    r = subprocess.run([launch, "--resource-config", str(tmp_path / "nope.json")], capture_output=True, text=True)
    assert r.returncode == 2 and "cannot read the resource config" in r.stderr, r.stderr
    (tmp_path / "flat.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    r = subprocess.run([launch, "--resource-config", str(tmp_path / "flat.json")], capture_output=True, text=True)
    assert r.returncode == 2 and "instance_groups" in r.stderr, r.stderr
    r = subprocess.run([launch, "--resource-config", resource_config(tmp_path, "algo-3")], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "trainer command" in r.stderr, r.stderr
    r = subprocess.run([launch, "--resource-config", resource_config(tmp_path, "algo-1"), "--data-group", "gpu"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no data group 'gpu'" in r.stderr, r.stderr


def _free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _daemons_of(*patterns):
    """pids of processes whose command line holds one of `patterns` (the dispatcher's
    work dir, its address: every daemon of one launch names one of them)."""
    pids = set()
    for pattern in patterns:
        out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout.split()
        pids.update(int(p) for p in out if int(p) != os.getpid())
    return sorted(pids)


def test_ferry_launch_leaves_no_daemon_behind(ferry_local, tmp_path):
    """A data host whose worker cannot start stops its dispatcher and exits non-zero; a
    launch killed with SIGKILL takes its daemons with it (PR_SET_PDEATHSIG)."""
    launch = os.path.join(os.path.dirname(ferry_local), "ferry-launch")
    base = [launch, "--resource-config", resource_config(tmp_path, "algo-1"), "--host-address", "algo-1=127.0.0.1"]
    work, port = str(tmp_path / "work-failed"), _free_port()
    r = subprocess.run(base + ["--work-dir", work, "--port", str(port), "--worker-port", str(_free_port()),
                               "--worker-arg=--no-such-flag"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "ferry-worker did not start" in r.stderr, r.stderr
    assert "ferry-dispatcher on" in r.stderr, r.stderr
    assert _daemons_of(work, "127.0.0.1:%d" % port) == [], "the dispatcher outlived a failed launch"

    work, port = str(tmp_path / "work-killed"), _free_port()
    log = open(str(tmp_path / "killed.log"), "w+")
    p = subprocess.Popen(base + ["--work-dir", work, "--port", str(port), "--worker-port", str(_free_port())],
                         stderr=log)
    deadline = time.time() + 30
    while "ferry-worker on" not in open(str(tmp_path / "killed.log")).read():
        assert time.time() < deadline and p.poll() is None, open(str(tmp_path / "killed.log")).read()
        time.sleep(0.1)
    assert len(_daemons_of(work, "127.0.0.1:%d" % port)) == 3, "the launch, its dispatcher and its worker run"
    p.kill()
    p.wait()
    deadline = time.time() + 15
    while _daemons_of(work, "127.0.0.1:%d" % port) and time.time() < deadline:
        time.sleep(0.2)
    assert _daemons_of(work, "127.0.0.1:%d" % port) == [], "daemons outlived a killed launch"
