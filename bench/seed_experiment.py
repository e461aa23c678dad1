"""The seed experiment on emulated hosts (issue 12): a CPU-bound trainer on a trainer
host (bench/seed_trainer.py, pinned to CPU 0, a fixed CPU cost per step) with its input
decoded in-process on that same core, then offloaded to 1, 2, ... worker hosts. Hosts
are network namespaces on a bridge (tests/netns/hosts.py). Each worker host is given
--host-share of CPU 1 (a cgroup CPU quota), so that adding a host adds CPU as it would
across machines, on a machine of two cores. At each point: the trainer's step time and
input wait, and the dispatcher's advice (ferry-ctl status: recommended workers and what
limits the job). Writes a Markdown table and a PNG plot.

    /usr/bin/python3 bench/seed_experiment.py [--work-ms 60] [--host-share 0.3]
        [--max-workers 3] [--seconds 15] [--out-png F] [--out-md F] [--python-transforms]

--python-transforms: as PyTorch users ran it, the input made in Python (a PIL Dataset
of the trainer's own with torchvision's transforms, bench/seed_trainer.py): in-process
by torch's DataLoader with one worker process on the trainer's core, then by Ferry's
Python processes on the worker hosts (--allow-user-code).

Needs root (namespaces, cgroups) and python3-matplotlib for the plot."""
import argparse
import glob
import json
import os
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "netns"))
import hosts as netns  # noqa: E402

CGROUP = "/sys/fs/cgroup/cpu"


def cpu_cgroup(name, share):
    """A CPU cgroup (v1) limited to `share` of one CPU; its path."""
    for stale in glob.glob(os.path.join(CGROUP, "ferry-seed-*")):
        try:
            os.rmdir(stale)  # only empty ones (a killed run's)
        except OSError:
            pass
    path = os.path.join(CGROUP, "ferry-seed-%d-%s" % (os.getpid(), name))
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "cpu.cfs_period_us"), "w") as f:
        f.write("100000")
    with open(os.path.join(path, "cpu.cfs_quota_us"), "w") as f:
        f.write(str(int(share * 100000)))
    return path


def first_line(p):
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        raise RuntimeError("a daemon did not start: %r" % line)
    return line.split()[-1]


def run_point(a, workers):
    trainer_argv = ["/usr/bin/python3", os.path.join(ROOT, "bench", "seed_trainer.py"), "--python-dir", a.python_dir,
                    "--data", a.data, "--work-ms", str(a.work_ms), "--cpu", "0", "--seconds", str(a.seconds),
                    "--warmup", str(a.warmup), "--batch-size", str(a.batch_size)]
    if a.python_transforms:
        trainer_argv.append("--python-transforms")
    names = ["trainer"] + (["dispatcher"] + ["w%d" % i for i in range(1, workers + 1)] if workers else [])
    groups = []
    advice = {}
    with netns.Hosts(names) as h:
        if workers:
            d = h.popen("dispatcher", ["taskset", "-c", "1", os.path.join(a.bin_dir, "ferry-dispatcher"), "--listen",
                                       h.ip("dispatcher") + ":7000", "--work-dir", "/tmp/ferry-seed-%d-%d" % (os.getpid(), workers),
                                       "--heartbeat-interval-ms", "200"],
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            dispatcher = first_line(d)
            for i in range(1, workers + 1):
                g = cpu_cgroup("w%d" % i, a.host_share)
                groups.append(g)
                # The worker joins its host's cgroup before it starts (a shell that moves
                # itself, then execs it): its Python processes, which it starts at once,
                # are in it too. (Moved after its start, they were not: they ran on CPU 1
                # unthrottled, and one host did the work of two.) nsenter, sh and taskset
                # exec in place: the pid is the daemon's.
                w = h.popen("w%d" % i, ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', g,
                                        "taskset", "-c", "1", os.path.join(a.bin_dir, "ferry-worker"), "--listen",
                                        h.ip("w%d" % i) + ":7100", "--threads", "1", "--dispatcher", dispatcher] +
                            (["--allow-user-code", "--python-processes", "1"] if a.python_transforms else []),
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                first_line(w)
            trainer_argv += ["--dispatcher", dispatcher]
        else:
            trainer_argv += ["--threads", "1"]
        t = h.popen("trainer", trainer_argv, stdout=subprocess.PIPE, text=True)
        stop = threading.Event()

        def poll():  # the dispatcher's advice while the job runs (it goes when the trainer does)
            ctl = os.path.join(os.path.dirname(a.bin_dir), "client", "ferry-ctl")
            while workers and not stop.wait(2):
                r = h.run("trainer", [ctl, "status", "--json", "--dispatcher", dispatcher, "--timeout", "2"],
                          capture_output=True, text=True)
                if r.returncode == 0:
                    for j in json.loads(r.stdout)["jobs"]:
                        if j["name"] == "seed" and j["limited_by"]:
                            advice.update(j)

        poller = threading.Thread(target=poll)
        poller.start()
        out = t.stdout.read()
        t.wait()
        stop.set()
        poller.join()
    for g in groups:
        for _ in range(50):
            try:
                os.rmdir(g)
                break
            except OSError:
                time.sleep(0.1)
    r = json.loads(out.strip().splitlines()[-1])
    r.update(workers=workers, recommended=advice.get("recommended_workers", 0), limited_by=advice.get("limited_by", ""),
             advised_wait=advice.get("input_wait"))
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "sample"))
    ap.add_argument("--bin-dir", default=os.path.join(ROOT, "build", "server"))
    ap.add_argument("--python-dir", default=os.path.join(ROOT, "build", "python"))
    ap.add_argument("--work-ms", type=float, default=60)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--host-share", type=float, default=0.3)
    ap.add_argument("--max-workers", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--warmup", type=float, default=5)
    ap.add_argument("--out-png", default=os.path.join(ROOT, "bench", "results", "seed_experiment.png"))
    ap.add_argument("--out-md", default=None)
    ap.add_argument("--python-transforms", action="store_true")
    a = ap.parse_args()
    ok, why = netns.available()
    if not ok:
        sys.exit("seed_experiment: " + why)
    rows = []
    for workers in range(0, a.max_workers + 1):
        r = run_point(a, workers)
        rows.append(r)
        print(json.dumps(r), flush=True)
    table = ["| input | step time (ms) | input wait | samples/s | dispatcher's advice | limited by (dispatcher) |",
             "|---|---:|---:|---:|---:|---|"]
    for r in rows:
        here = "torch DataLoader, 1 worker process" if a.python_transforms else "1 thread"
        where = "in-process (%s, trainer's core)" % here if r["workers"] == 0 else "%d worker host%s" % (
            r["workers"], "s" if r["workers"] > 1 else "")
        table.append("| %s | %.1f | %.0f%% | %.0f | %s | %s |" % (
            where, r["step_ms"], 100 * r["input_wait"], r["samples_per_s"],
            r["recommended"] or "-", r["limited_by"] or "-"))
    text = "\n".join(table)
    print(text)
    if a.out_md:
        open(a.out_md, "w").write(text + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("seed_experiment: no matplotlib (apt-get install python3-matplotlib): no plot")
        return
    labels = ["in-process"] + ["%d host%s" % (r["workers"], "s" if r["workers"] > 1 else "") for r in rows[1:]]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    ax1.bar(labels, [r["step_ms"] for r in rows], color="#4878a8")
    ax1.axhline(a.work_ms, color="gray", linestyle="--", label="the step's own CPU work (%g ms)" % a.work_ms)
    ax1.set_ylabel("step time (ms)")
    ax1.set_ylim(0, 1.25 * max(r["step_ms"] for r in rows))  # room for the legend above the bars
    ax1.legend(loc="upper right", fontsize=8)
    ax2.bar(labels, [100 * r["input_wait"] for r in rows], color="#c05050")
    ax2.axhline(10, color="gray", linestyle="--", label="input-bound above 10%")
    for i, r in enumerate(rows):
        if r["recommended"]:
            ax2.annotate("advice: %d" % r["recommended"], (i, 100 * r["input_wait"]), ha="center", va="bottom",
                         fontsize=8)
    ax2.set_ylabel("input wait (% of the trainer's time)")
    ax2.set_ylim(0, 1.25 * max(12, max(100 * r["input_wait"] for r in rows)))
    ax2.legend(loc="upper right", fontsize=8)
    fig.suptitle("CPU-bound trainer on one core: input %sin-process vs offloaded to worker hosts (%g core each)"
                 % ("made in Python (a PIL Dataset, torchvision transforms),\n" if a.python_transforms else "",
                    a.host_share), fontsize=10)
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.out_png), exist_ok=True)
    fig.savefig(a.out_png, dpi=100)
    print("wrote", a.out_png)


if __name__ == "__main__":
    main()
