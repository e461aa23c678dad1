"""The Kubernetes manifests (deploy/kubernetes), validated offline (no cluster is
reachable from CI), issue 12:
- every document parses and has the fields its kind requires (a compact schema of the
  kinds used), and the kustomization lists every file (and renders with `kubectl
  kustomize` where kubectl is installed);
- the references hold: selectors match pod labels, Services and probes name ports the
  containers declare, volumes name the Secret's key, the HPA scales the worker
  Deployment on a metric the dispatcher exports, the ServiceMonitor selects the
  Services, the adapter rule queries that metric; the worker's grace period outlasts
  its drain;
- the containers' commands run: the dispatcher and worker start with the manifests'
  very arguments (addresses moved to loopback, paths to a temporary dir), the worker
  registers, and both answer the probes the manifests point at."""
import glob
import os
import re
import shutil
import subprocess
import time

import pytest

from test_metrics import free_port, get, start, stop

try:
    import yaml
except ImportError:  # bench/setup.sh installs python3-yaml
    if os.environ.get("CI") == "true":
        raise
    yaml = pytest.importorskip("yaml")

HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY = os.path.join(HERE, "..", "..", "deploy", "kubernetes")

# The fields each kind must have (dotted paths), for the kinds the manifests use.
REQUIRED = {
    ("v1", "Secret"): ["stringData"],
    ("v1", "Service"): ["spec.selector", "spec.ports"],
    ("v1", "ConfigMap"): ["data"],
    ("apps/v1", "StatefulSet"): ["spec.serviceName", "spec.selector.matchLabels", "spec.template.spec.containers"],
    ("apps/v1", "Deployment"): ["spec.selector.matchLabels", "spec.template.spec.containers"],
    ("autoscaling/v2", "HorizontalPodAutoscaler"): ["spec.scaleTargetRef.name", "spec.maxReplicas", "spec.metrics"],
    ("monitoring.coreos.com/v1", "ServiceMonitor"): ["spec.selector.matchLabels", "spec.endpoints"],
}


def field(doc, path):
    for key in path.split("."):
        assert isinstance(doc, dict) and key in doc, "missing %s" % path
        doc = doc[key]
    return doc


def load():
    docs = []
    for path in sorted(glob.glob(os.path.join(DEPLOY, "*.yaml"))):
        if os.path.basename(path) == "kustomization.yaml":
            continue
        for d in yaml.safe_load_all(open(path)):
            if d is not None:
                docs.append((os.path.basename(path), d))
    return docs


def pods(docs):
    """(workload doc, pod template) of each Deployment and StatefulSet."""
    return [(d, d["spec"]["template"]) for _, d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def test_manifests_have_the_fields_their_kinds_require_and_refer_to_each_other():
    docs = load()
    kinds = {(d["apiVersion"], d["kind"]) for _, d in docs}
    assert kinds == set(REQUIRED), kinds
    names = set()
    for f, d in docs:
        for path in ["metadata.name"] + REQUIRED[(d["apiVersion"], d["kind"])]:
            field(d, path)
        assert re.match(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", d["metadata"]["name"]), (f, d["metadata"]["name"])
        assert (d["kind"], d["metadata"]["name"]) not in names, "twice: %s" % d["metadata"]["name"]
        names.add((d["kind"], d["metadata"]["name"]))
    kustomization = yaml.safe_load(open(os.path.join(DEPLOY, "kustomization.yaml")))
    assert sorted(kustomization["resources"]) == sorted({f for f, _ in docs}), "the kustomization lists every file"

    secrets = {d["metadata"]["name"]: d for _, d in docs if d["kind"] == "Secret"}
    services = [d for _, d in docs if d["kind"] == "Service"]
    for workload, tpl in pods(docs):
        labels = tpl["metadata"]["labels"]
        assert workload["spec"]["selector"]["matchLabels"].items() <= labels.items(), workload["metadata"]["name"]
        for c in tpl["spec"]["containers"]:
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            assert all(len(n) <= 15 for n in ports), ports
            for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
                assert c[probe]["httpGet"]["path"] == path and c[probe]["httpGet"]["port"] in ports, (c["name"], probe)
            metrics = [a for a in c["args"] if a.startswith("--metrics=")]
            assert metrics and metrics[0].endswith(":%d" % ports["metrics"]), "probes hit the --metrics port"
            mounts = {m["name"] for m in c["volumeMounts"]}
            volumes = {v["name"]: v for v in tpl["spec"].get("volumes", [])}
            claims = {t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])}
            assert mounts <= set(volumes) | claims, (mounts, volumes, claims)
            for v in volumes.values():
                if "secret" in v:
                    s = secrets[v["secret"]["secretName"]]
                    assert all(i["key"] in s["stringData"] for i in v["secret"]["items"])
        # Some Service selects these pods, on ports they declare.
        selecting = [s for s in services if s["spec"]["selector"].items() <= labels.items()]
        assert selecting, workload["metadata"]["name"]
        declared = {p["name"] for c in tpl["spec"]["containers"] for p in c["ports"]}
        for s in selecting:
            assert {p["targetPort"] for p in s["spec"]["ports"]} <= declared, s["metadata"]["name"]

    worker = next(d for d, _ in pods(docs) if d["metadata"]["name"] == "ferry-worker")
    wc = worker["spec"]["template"]["spec"]["containers"][0]
    drain = float(next(a.split("=")[1] for a in wc["args"] if a.startswith("--drain-timeout=")))
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > drain, "the drain ends before SIGKILL"
    dispatcher_arg = next(a.split("=")[1] for a in wc["args"] if a.startswith("--dispatcher="))
    host, port = dispatcher_arg.split(":")
    svc = next(s for s in services if s["metadata"]["name"] == host)
    assert int(port) in [p["port"] for p in svc["spec"]["ports"]], "workers dial the dispatcher's Service"
    assert any(a.startswith("--advertise=$(POD_IP):") for a in wc["args"])
    assert any(e["name"] == "POD_IP" and e["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP" for e in wc["env"])

    hpa = next(d for _, d in docs if d["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ferry-worker"}
    [m] = hpa["spec"]["metrics"]
    assert m["type"] == "External" and m["external"]["metric"]["name"] == "ferry_job_recommended_workers"
    assert m["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
    monitor = next(d for _, d in docs if d["kind"] == "ServiceMonitor")
    monitored = [s for s in services if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()]
    assert {s["metadata"]["name"] for s in monitored} == {"ferry-dispatcher", "ferry-worker-metrics"}
    for ep in monitor["spec"]["endpoints"]:
        assert all(ep["port"] in [p["name"] for p in s["spec"]["ports"]] for s in monitored)
    rules = yaml.safe_load(next(d for _, d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"])
    assert "ferry_job_recommended_workers" in rules["externalRules"][0]["seriesQuery"]

    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run([kubectl, "kustomize", DEPLOY], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        rendered = {(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(out.stdout) if d}
        assert rendered == names


def exported_families(text):
    return {l.split()[2] for l in text.splitlines() if l.startswith("# TYPE ")}


def test_the_manifests_commands_run_and_answer_their_probes(ferry_local, tmp_path):
    docs = load()
    bindir = os.path.dirname(ferry_local)
    (tmp_path / "token").write_text("a-token-for-this-test\n")
    containers = {d["metadata"]["name"]: tpl["spec"]["containers"][0] for d, tpl in pods(docs)}

    def local(args, moves):
        out = []
        for a in args:
            flag, _, value = a.partition("=")
            value = value.replace("$(POD_IP)", "127.0.0.1")
            value = moves.get(flag, value)
            out.append(flag + "=" + value)
        return out

    # Both confine jobs to the dataset mount (SECURITY.md).
    for name in ("ferry-dispatcher", "ferry-worker"):
        assert "--data-root=/data" in containers[name]["args"], containers[name]["args"]
    procs = []
    try:
        dc = containers["ferry-dispatcher"]
        dport = free_port()
        d, dispatcher = start([os.path.join(bindir, dc["command"][0])] + local(dc["args"], {
            "--listen": "127.0.0.1:0", "--work-dir": str(tmp_path / "work"), "--metrics": "127.0.0.1:%d" % dport,
            "--token-file": str(tmp_path / "token"), "--data-root": str(tmp_path)}), tmp_path, "dispatcher")
        procs.append(d)
        wc = containers["ferry-worker"]
        wport, wdata = free_port(), free_port()
        w, _ = start([os.path.join(bindir, wc["command"][0])] + local(wc["args"], {
            "--listen": "127.0.0.1:%d" % wdata, "--dispatcher": dispatcher, "--metrics": "127.0.0.1:%d" % wport,
            "--token-file": str(tmp_path / "token"), "--advertise": "127.0.0.1:%d" % wdata,
            "--data-root": str(tmp_path)}), tmp_path, "worker")
        procs.append(w)
        for port, c in ((dport, dc), (wport, wc)):
            base = "http://127.0.0.1:%d" % port
            deadline = time.time() + 20
            while get(base + c["readinessProbe"]["httpGet"]["path"])[0] != 200:
                assert time.time() < deadline, "%s never became ready" % c["name"]
                time.sleep(0.1)
            assert get(base + c["livenessProbe"]["httpGet"]["path"])[0] == 200
        # The HPA's and the adapter's metric is one the dispatcher exports.
        families = exported_families(get("http://127.0.0.1:%d/metrics" % dport)[1])
        assert "ferry_job_recommended_workers" in families, sorted(families)
        # JSON logs, as the manifests ask.
        import json
        err = open(str(tmp_path / "worker.err")).read().splitlines()
        assert err and all(json.loads(l)["program"] == "ferry-worker" for l in err if l), err[:3]
    finally:
        stop(procs)
