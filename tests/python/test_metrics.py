"""--metrics on the daemons (issue 12): GET /metrics in Prometheus text exposition,
/healthz and /readyz, on a real ferry-dispatcher and ferry-worker serving a real job.
The text is checked line by line against the exposition format (and by `promtool check
metrics` where Prometheus is installed), and the figures against the job: the batches
the client read were sent and acknowledged."""
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, method="GET"):
    """(status, body) of an HTTP request; retried while the server is not up yet."""
    deadline = time.time() + 10
    while True:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except (urllib.error.URLError, ConnectionError):
            if time.time() > deadline:
                raise
            time.sleep(0.05)


def parse(text):
    """{(name, labels): value}, checking the exposition format: every sample's family
    has a HELP and a TYPE before it, names and labels are well formed, values are numbers."""
    typed, samples = {}, {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert NAME.match(line.split()[2]), line
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert NAME.match(name) and kind in ("counter", "gauge", "histogram", "summary", "untyped"), line
            assert name not in typed, "a family twice: " + name
            typed[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, "not a sample line: %r" % line
            name = m.group(1)
            family = name
            if name not in typed:  # a histogram's series
                family = re.sub(r"_(bucket|sum|count)$", "", name)
                assert typed.get(family) == "histogram", "a sample before its TYPE: " + line
            if typed[family] == "counter":
                assert name.endswith("_total"), "a counter's name ends in _total: " + name
            samples[(name, m.group(2) or "")] = float(m.group(4))
    return samples


def promtool_ok(text):
    promtool = shutil.which("promtool")
    if promtool is None:
        return True  # checked by parse() alone
    r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stdout + r.stderr
    return True


def start(argv, tmp_path, name):
    err = open(str(tmp_path / (name + ".err")), "w")
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
    line = p.stdout.readline()
    assert line.startswith("listening on "), line
    return p, line.split()[-1]


def stop(procs):
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def test_metrics_health_and_readiness_of_a_running_job(ferry, ferry_local, small_tree, tmp_path):
    bindir = os.path.dirname(ferry_local)
    dport, wport = free_port(), free_port()
    d, dispatcher = start([os.path.join(bindir, "ferry-dispatcher"), "--listen", "127.0.0.1:0", "--work-dir",
                           str(tmp_path / "journal"), "--metrics", "127.0.0.1:%d" % dport,
                           "--heartbeat-interval-ms", "100"], tmp_path, "dispatcher")
    w, _ = start([os.path.join(bindir, "ferry-worker"), "--listen", "127.0.0.1:0", "--threads", "1", "--dispatcher",
                  dispatcher, "--metrics", "127.0.0.1:%d" % wport], tmp_path, "worker")
    lonely, _ = start([os.path.join(bindir, "ferry-worker"), "--listen", "127.0.0.1:0", "--threads", "1",
                       "--dispatcher", "127.0.0.1:%d" % free_port(), "--metrics", "127.0.0.1:%d" % (lport := free_port())],
                      tmp_path, "lonely")
    try:
        dm, wm = "http://127.0.0.1:%d" % dport, "http://127.0.0.1:%d" % wport
        for base in (dm, wm):
            assert get(base + "/healthz") == (200, "ok\n")
            assert get(base + "/nope")[0] == 404
            assert get(base + "/metrics", method="POST")[0] == 405
        deadline = time.time() + 20
        while get(wm + "/readyz")[0] != 200:
            assert time.time() < deadline, "the worker never became ready"
            time.sleep(0.05)
        assert get(dm + "/readyz") == (200, "ready\n")
        # A worker whose dispatcher is not there is alive but not ready.
        assert get("http://127.0.0.1:%d/healthz" % lport)[0] == 200
        status, body = get("http://127.0.0.1:%d/readyz" % lport)
        assert status == 503, body
        assert parse(get("http://127.0.0.1:%d/metrics" % lport)[1])[("ferry_worker_registered", "")] == 0

        loader = ferry.Loader(data=small_tree, pipeline={"decode": "rgb", "ops": [{"op": "center_crop", "size": 16}],
                                                          "output": {"dtype": "uint8", "layout": "NHWC"}},
                              batch_size=8, dispatcher=dispatcher, job_name="metrics", batches_per_split=2, epochs=1)
        batches = sum(1 for _ in loader)
        loader.close()
        assert batches == 120 // 8
        splits = -(-batches // 2)

        status, text = get(wm + "/metrics")
        assert status == 200
        w_samples = parse(text)
        assert promtool_ok(text)
        assert w_samples[("ferry_worker_batches_sent_total", "")] >= batches
        assert w_samples[("ferry_worker_registered", "")] == 1
        assert w_samples[("ferry_worker_streams_total", "")] >= 1
        assert w_samples[("ferry_worker_heartbeats_total", "")] > 0
        # Per-stage histograms: every sample read, decoded and augmented once; every
        # batch assembled and sent once. Buckets are cumulative and end at the count.
        assert w_samples[("ferry_worker_samples_total", "")] == 120
        assert w_samples[("ferry_worker_bytes_sent_total", "")] >= 120 * 16 * 16 * 3
        for stage, n in (("read", 120), ("decode", 120), ("augment", 120), ("assemble", batches), ("send", batches)):
            buckets = sorted((float(k[1].split('le="')[1].split('"')[0]), v) for k, v in w_samples.items()
                             if k[0] == "ferry_worker_stage_seconds_bucket" and 'stage="%s"' % stage in k[1])
            assert len(buckets) == 21 and buckets[-1][0] == float("inf"), stage
            assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), stage + ": buckets not cumulative"
            count = w_samples[("ferry_worker_stage_seconds_count", '{stage="%s"}' % stage)]
            assert count == buckets[-1][1] == n, (stage, count, n)
            assert w_samples[("ferry_worker_stage_seconds_sum", '{stage="%s"}' % stage)] > 0, stage
        assert sum(v for k, v in w_samples.items() if k[0] == "ferry_worker_skipped_samples_total") == 0
        assert w_samples[("ferry_worker_skipped_samples_total", '{reason="corrupt"}')] == 0
        assert w_samples[("ferry_worker_queued_batches", "")] >= 0

        deadline = time.time() + 10
        while True:  # the last acks arrive with the client's close
            status, text = get(dm + "/metrics")
            d_samples = parse(text)
            if d_samples[("ferry_dispatcher_acks_total", "")] >= splits or time.time() > deadline:
                break
            time.sleep(0.1)
        assert promtool_ok(text)
        assert d_samples[("ferry_dispatcher_acks_total", "")] >= splits, "every split acknowledged"
        # The finished job is collected once its client has gone: until then, its epoch is complete.
        assert d_samples.get(("ferry_job_epoch", '{ferry_job="metrics"}'), 1) == 1, "the job's one epoch is complete"
        assert d_samples[("ferry_dispatcher_leases_total", "")] >= splits
        assert d_samples[("ferry_workers", '{state="serving"}')] == 1
        assert d_samples[("ferry_dispatcher_journal_writable", "")] == 1
        assert d_samples[("ferry_dispatcher_requests_total", "")] > 0
        assert d_samples[("ferry_dispatcher_connections_by_role", '{role="worker"}')] >= 1
        assert d_samples[("ferry_dispatcher_journal_bytes", "")] > 0
        assert d_samples[("ferry_dispatcher_journal_sync_seconds_count", "")] > 0, "every change is synced"
        assert d_samples[("ferry_dispatcher_splits_returned_total", "")] == 0, "no worker died"
    finally:
        stop([w, lonely, d])
