"""A real Prometheus server (Debian's `prometheus`) scrapes a ferry-dispatcher and two
ferry-workers while they serve a job (issue 12). Checked through Prometheus' own HTTP
query API: all three targets are up, both workers' sample counters and per-stage
histograms are stored, and the dispatcher's job series are there; `promtool check
metrics` passes on each endpoint; every query of the Grafana dashboard
(deploy/grafana) runs and names only metrics Ferry exported. The test command installs Prometheus; elsewhere the
test is skipped when it is missing (under CI=true it fails instead)."""
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import pytest

from test_metrics import free_port, get, parse, start, stop


def need(tool):
    path = shutil.which(tool)
    if path is None:
        if os.environ.get("CI") == "true":
            pytest.fail("%s is not installed (bench/setup.sh installs the prometheus package)" % tool)
        pytest.skip("%s is not installed" % tool)
    return path


def query(base, promql):
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    with urllib.request.urlopen(url, timeout=5) as r:
        reply = json.loads(r.read().decode())
    assert reply["status"] == "success", reply
    return reply["data"]["result"]


def test_prometheus_scrapes_a_dispatcher_and_two_workers_during_a_job(ferry, ferry_local, small_tree, tmp_path):
    prometheus, promtool = need("prometheus"), need("promtool")
    bindir = os.path.dirname(ferry_local)
    dport, pport = free_port(), free_port()
    wports = [free_port(), free_port()]
    procs = []
    try:
        d, dispatcher = start([os.path.join(bindir, "ferry-dispatcher"), "--listen", "127.0.0.1:0", "--work-dir",
                               str(tmp_path / "journal"), "--metrics", "127.0.0.1:%d" % dport,
                               "--heartbeat-interval-ms", "100"], tmp_path, "dispatcher")
        procs.append(d)
        for i, port in enumerate(wports):
            w, _ = start([os.path.join(bindir, "ferry-worker"), "--listen", "127.0.0.1:0", "--threads", "1",
                          "--dispatcher", dispatcher, "--metrics", "127.0.0.1:%d" % port], tmp_path, "worker%d" % i)
            procs.append(w)

        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n"
            "  - job_name: ferry-dispatcher\n    static_configs:\n      - targets: ['127.0.0.1:%d']\n"
            "  - job_name: ferry-worker\n    static_configs:\n      - targets: ['127.0.0.1:%d', '127.0.0.1:%d']\n"
            % (dport, wports[0], wports[1]))
        r = subprocess.run([promtool, "check", "config", str(config)], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        plog = open(str(tmp_path / "prometheus.log"), "w")
        prom = subprocess.Popen([prometheus, "--config.file=" + str(config), "--storage.tsdb.path=" +
                                 str(tmp_path / "tsdb"), "--web.listen-address=127.0.0.1:%d" % pport],
                                stdout=plog, stderr=subprocess.STDOUT)
        procs.append(prom)
        base = "http://127.0.0.1:%d" % pport

        # A job that runs until Prometheus has seen both workers produce: the client
        # reads slowly (one batch per 20 ms) and stops once the query below succeeds.
        loader = ferry.Loader(data=small_tree, pipeline={"decode": "rgb", "ops": [{"op": "center_crop", "size": 16}],
                                                          "output": {"dtype": "uint8", "layout": "NHWC"}},
                              batch_size=4, dispatcher=dispatcher, job_name="scraped", batches_per_split=1, epochs=None)
        stop_reading = threading.Event()
        read = []

        failure = []

        def consume():
            try:
                while not stop_reading.is_set():  # each pass is an epoch
                    for _ in loader:
                        read.append(1)
                        if stop_reading.is_set():
                            break
                        time.sleep(0.02)
            except Exception as e:  # shown by the main thread
                failure.append(repr(e))

        reader = threading.Thread(target=consume, daemon=True)
        reader.start()
        t0 = time.time()
        deadline = t0 + 90
        while True:
            assert reader.is_alive(), "the job ended on its own after %d batches: %s" % (len(read), failure)
            try:
                up = query(base, "up")
                produced = query(base, "ferry_worker_samples_total > 0")
            except OSError:  # Prometheus not listening yet
                up, produced = [], []
            if len(up) == 3 and all(s["value"][1] == "1" for s in up) and len(produced) == 2:
                break
            assert time.time() < deadline, "Prometheus never saw 3 targets up and 2 producing workers: %s %s" % (
                up, produced)
            time.sleep(0.5)
        print("prometheus saw the targets after %.1f s" % (time.time() - t0))
        assert sorted(s["metric"]["job"] for s in up) == ["ferry-dispatcher", "ferry-worker", "ferry-worker"]

        # Per-stage series of both workers, and the job as the dispatcher sees it,
        # stored while the job runs.
        deadline = time.time() + 30
        while True:
            stages = query(base, 'sum by (instance, stage) (ferry_worker_stage_seconds_count) > 0')
            job = query(base, 'ferry_job_consumers{ferry_job="scraped"}')
            leases = query(base, "ferry_dispatcher_leases_total > 0")
            if len(stages) == 10 and job and leases:
                break
            assert time.time() < deadline, "stages %s\njob %s\nleases %s" % (stages, job, leases)
            time.sleep(0.5)
        assert {(s["metric"]["instance"], s["metric"]["stage"]) for s in stages} == {
            ("127.0.0.1:%d" % p, st) for p in wports for st in ("read", "decode", "augment", "assemble", "send")}
        assert job[0]["value"][1] == "1"
        # What a dashboard asks: the median decode time over the last minute (once
        # two scrapes of the series are stored).
        deadline = time.time() + 30
        while True:
            decode_p50 = query(base, 'histogram_quantile(0.5, sum by (le) (increase(ferry_worker_stage_seconds_bucket'
                                     '{stage="decode"}[1m])))')
            if decode_p50 or time.time() > deadline:
                break
            time.sleep(0.5)
        assert decode_p50 and 0 < float(decode_p50[0]["value"][1]) < 1, decode_p50
        assert read, "the client read batches"

        # The dispatcher's view of the job's input (its consumers report their wait
        # with their acks), in Prometheus and in ferry-ctl status.
        deadline = time.time() + 30
        while True:
            wait = query(base, 'ferry_job_input_wait_ratio{ferry_job="scraped"}')
            if wait or time.time() > deadline:
                break
            time.sleep(0.5)
        assert wait and 0 <= float(wait[0]["value"][1]) <= 1, wait
        ctl = os.path.join(os.path.dirname(os.path.dirname(ferry_local)), "client", "ferry-ctl")
        out = subprocess.run([ctl, "status", "--dispatcher", dispatcher], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert re.search(r"input wait \d+%, demand \d+ samples/s", out.stdout), out.stdout

        # The Grafana dashboard (deploy/grafana): every query runs on this Prometheus,
        # and every metric it names is one Ferry exported here.
        dashboard = json.load(open(os.path.join(os.path.dirname(__file__), "..", "..", "deploy", "grafana",
                                                "ferry-dashboard.json")))
        exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        exprs += [v["definition"].replace("label_values(", "").split(",")[0] for v in dashboard["templating"]["list"]
                  if v.get("definition")]
        assert len(exprs) >= 10, exprs
        wanted = set()
        for e in exprs:
            wanted |= set(re.findall(r"\b(ferry_[a-z_]+|up)\b(?!\s*\()", e)) - {"ferry_job"}
        deadline = time.time() + 30
        while True:
            with urllib.request.urlopen(base + "/api/v1/label/__name__/values", timeout=5) as r:
                stored = set(json.loads(r.read().decode())["data"])
            if wanted <= stored or time.time() > deadline:
                break
            time.sleep(0.5)
        assert wanted <= stored, "the dashboard names metrics Ferry did not export: %s" % sorted(wanted - stored)
        for e in exprs:
            query(base, e.replace("$job", ".*"))  # a bad query fails here

        # promtool on each endpoint, during the job.
        for port in [dport] + wports:
            status, text = get("http://127.0.0.1:%d/metrics" % port)
            assert status == 200
            parse(text)
            r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
            assert r.returncode == 0, "port %d: %s%s" % (port, r.stdout, r.stderr)
        stop_reading.set()
        reader.join(timeout=30)
        loader.close()
    finally:
        stop(procs)
