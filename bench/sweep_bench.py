#!/usr/bin/env python3
"""A sweep decodes once: workers' CPU for 4 trainers of one shared job against 1 trainer.

A ferry-dispatcher and two ferry-workers (--threads 1, each pinned to its own CPU)
serve a sweep: trainers of one job with sharing="every" (each takes every batch, the
workers make each batch once for the trainers that keep pace). Real photographs of
--data, the imagenet-train crop and flip to uint8 224x224 (the trainer makes the
float32), batches of 64.

  cpu       the workers' CPU seconds (utime + stime of both processes) to serve the
            same epochs to 1 trainer (a job of its own) and to 4 trainers of a sweep,
            rounds interleaved; ratio 4 / 1 (target <= 1.25)
  pause     4 trainers that each step at --load of the rate the workers reach for one
            trainer (a GPU-bound sweep, as the advice sizes workers for one decode a
            batch); one of them pauses for --pause seconds, then steps on 30 s behind:
            the window (--share-window, default 1 GB) has dropped what it missed, so its
            batches are made again. The others' rate before the pause, during it, and
            after it (while the paused one is served by re-making) is printed; ratio
            after / before (target >= 0.9).
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

PIPELINES = {
    "imagenet-train": {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 224}, {"op": "hflip", "p": 0.5}],
                       "output": {"dtype": "uint8", "layout": "NHWC"}},
    # DeiT's and timm's recipes: RandAugment after the crop and flip.
    "randaugment": {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 224}, {"op": "hflip", "p": 0.5},
                                             {"op": "rand_augment", "num_ops": 2, "magnitude": 9}],
                    "output": {"dtype": "uint8", "layout": "NHWC"}},
}
PIPELINE = PIPELINES["imagenet-train"]


def cpu_seconds(pid, part=None):
    """utime + stime of a process (or only "user" or "system")."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        user, system = int(fields[11]) / tick, int(fields[12]) / tick
        return {"user": user, "system": system}.get(part, user + system)
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def subset(data, n, work):
    classes = sorted(c for c in os.listdir(data) if os.path.isdir(os.path.join(data, c)))
    per = (n + len(classes) - 1) // len(classes)
    tree = os.path.join(work, "tree")
    copied = 0
    for c in classes:
        os.makedirs(os.path.join(tree, c))
        for f in sorted(os.listdir(os.path.join(data, c)))[:per]:
            if copied == n:
                break
            shutil.copy(os.path.join(data, c, f), os.path.join(tree, c, f))
            copied += 1
    return tree


class Daemons:
    def __init__(self, build, work, share_window):
        self.procs = []
        disp = self._start(["taskset", "-c", "0", os.path.join(build, "server", "ferry-dispatcher"), "--listen",
                            "127.0.0.1:0", "--work-dir", tempfile.mkdtemp(prefix="dispatcher-", dir=work)])
        self.dispatcher = disp
        self.workers, self.metrics = [], []
        for cpu in (0, 1):
            with socket.socket() as s:  # a free port for its /metrics
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            self._start(["taskset", "-c", str(cpu), os.path.join(build, "server", "ferry-worker"), "--listen",
                         "127.0.0.1:0", "--threads", "1", "--dispatcher", disp, "--share-window", share_window,
                         "--metrics", "127.0.0.1:%d" % port])
            self.workers.append(self.procs[-1].pid)
            self.metrics.append(port)

    def metric(self, name):
        """A counter of the workers' /metrics, summed."""
        total = 0.0
        for port in self.metrics:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
                for line in r.read().decode().splitlines():
                    if line.startswith(name + " "):
                        total += float(line.split()[1])
        return total

    def _start(self, argv):
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.procs.append(p)
        return p.stdout.readline().split()[-1]

    def worker_cpu(self, part=None):
        return sum(cpu_seconds(pid, part) for pid in self.workers)

    def close(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def loader(ferry, d, tree, job, trainer=None, epochs=2):
    # Each run its own seed: the window keeps batches by content, and a run of the same
    # content would be served what an earlier run made.
    extra = dict(sharing="every", trainer_id=trainer) if trainer else {}
    return ferry.Loader(data=tree, pipeline=PIPELINES[job.split(":")[0]], batch_size=64, epochs=epochs,
                        seed=zlib.crc32(job.encode()), dispatcher=d.dispatcher,
                        job_name=job, prefetch=4, **extra)


def serve(ferry, d, tree, job, trainers, epochs):
    """Workers' CPU seconds and wall seconds to serve `epochs` to `trainers` trainers."""
    loaders = [loader(ferry, d, tree, job, "t%d" % i if trainers > 1 else None, epochs) for i in range(trainers)]
    images = [0] * trainers

    def run(i):
        for _ in range(epochs):
            for x, _ in loaders[i]:
                images[i] += x.shape[0]

    cpu0, sys0, t0 = d.worker_cpu(), d.worker_cpu("system"), time.perf_counter()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(trainers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    time.sleep(0.3)  # the workers' last CPU ticks
    serve.system = d.worker_cpu("system") - sys0  # the kernel's share (sending is most of it)
    return d.worker_cpu() - cpu0, wall, images


def pause_run(ferry, d, tree, rate, load, pause_s, before_s, after_s):
    """4 trainers stepping at load x rate images/s each; trainer 3 pauses for pause_s.
    Returns the other trainers' images/s before, during and after the pause."""
    step = 64 / (rate * load)
    stamps = [[] for _ in range(4)]
    stop = threading.Event()
    t_pause = [None, None]

    def run(i):
        ld = loader(ferry, d, tree, "imagenet-train:pause", "t%d" % i, epochs=None)
        it = iter(ld)
        next_step = time.perf_counter()
        while not stop.is_set():
            try:
                next(it)
            except StopIteration:
                it = iter(ld)
                continue
            now = time.perf_counter()
            stamps[i].append(now)
            if i == 3 and t_pause[0] is None and stamps[0] and now - stamps[0][0] >= before_s:
                t_pause[0] = now
                time.sleep(pause_s)
                t_pause[1] = time.perf_counter()
                next_step = t_pause[1]
                continue
            next_step += step
            delay = next_step - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            else:
                next_step = time.perf_counter()  # behind: the trainer waited on input

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(4)]
    for t in threads:
        t.start()
    deadline = time.perf_counter() + before_s + pause_s + after_s + 120
    while t_pause[1] is None or time.perf_counter() < t_pause[1] + after_s:
        if time.perf_counter() > deadline:
            raise RuntimeError("the trainers stalled: %s batches" % [len(x) for x in stamps])
        time.sleep(0.2)
    stop.set()
    for t in threads:
        t.join(timeout=60)

    def rate_in(lo, hi):
        return statistics.mean(64 * sum(lo <= s < hi for s in stamps[i]) / (hi - lo) for i in range(3))

    start = stamps[0][0]
    return {"before": rate_in(start + 5, t_pause[0]), "during": rate_in(t_pause[0], t_pause[1]),
            "after": rate_in(t_pause[1], t_pause[1] + after_s),
            "paused_after": 64 * sum(t_pause[1] <= s < t_pause[1] + after_s for s in stamps[3]) / after_s,
            "step_rate": rate * load}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--images", type=int, default=1200)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load", type=float, default=0.35,
                    help="each trainer's step rate, as a share of the rate the workers reach for one trainer")
    ap.add_argument("--pause", type=float, default=30)
    ap.add_argument("--share-window", default="1GB")
    ap.add_argument("--pause-windows", default="1GB,3GB",
                    help="worker windows (--share-window) the pause is run with: one that the pause outlasts, one "
                         "that holds what the paused trainer missed")
    ap.add_argument("--pipelines", default="imagenet-train,randaugment")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    import ferry  # noqa: E402
    work = tempfile.mkdtemp(prefix="ferry-sweep-")
    d = None
    try:
        tree = subset(a.data, a.images, work)
        d = Daemons(a.build, work, a.share_window)
        serve(ferry, d, tree, "imagenet-train:warm", 1, 1)  # page cache, the workers' first listing
        results = {}
        for name in a.pipelines.split(","):
            one, four, rates = [], [], []
            for r in range(a.rounds):
                cpu1, wall1, img1 = serve(ferry, d, tree, "%s:one-%d" % (name, r), 1, a.epochs)
                sys1 = serve.system
                cpu4, wall4, img4 = serve(ferry, d, tree, "%s:sweep-%d" % (name, r), 4, a.epochs)
                sys4 = serve.system
                assert len(set(img4)) == 1 and img4[0] == img1[0], (img1, img4)
                one.append(cpu1)
                four.append(cpu4)
                rates.append(img1[0] / wall1)
                print("%s, round %d: 1 trainer %.2f s CPU (%.2f in the kernel; %.0f images/s), 4 trainers %.2f s CPU "
                      "(%.2f in the kernel; %.0f images/s each)"
                      % (name, r, cpu1, sys1, img1[0] / wall1, cpu4, sys4, img4[0] / wall4), flush=True)
            results[name] = {"cpu_one": one, "cpu_four": four, "rate_one": rates,
                             "cpu_ratio": statistics.median(c4 / c1 for c1, c4 in zip(one, four))}
        print()
        for name, r in results.items():
            print("%s: workers' CPU, 4 trainers / 1 trainer: %.2f (median of %d rounds; %d images x %d epochs a "
                  "trainer; 1 trainer: %.2f s, 4: %.2f s)" % (name, r["cpu_ratio"], a.rounds, a.images, a.epochs,
                                                             statistics.median(r["cpu_one"]),
                                                             statistics.median(r["cpu_four"])))
        rate = statistics.median(results["imagenet-train"]["rate_one"]) if "imagenet-train" in results else 1000
        pauses = {}
        for window in a.pause_windows.split(","):
            d.close()
            d = Daemons(a.build, work, window)
            serve(ferry, d, tree, "imagenet-train:warm", 1, 1)
            p = pause_run(ferry, d, tree, rate, a.load, a.pause, 20, 30)
            p["made"] = d.metric("ferry_worker_shared_batches_made_total")
            pauses[window] = p
            p["served"] = d.metric("ferry_worker_shared_batches_served_total")
            print("pause, --share-window %s: the other trainers' images/s (each stepping at %.0f): before %.0f, "
                  "during the %d s pause %.0f, the 30 s after %.0f (after/before %.2f); the paused trainer after "
                  "it: %.0f; batches made %d, served from the window %d"
                  % (window, p["step_rate"], p["before"], a.pause, p["during"], p["after"], p["after"] / p["before"],
                     p["paused_after"], p["made"], p["served"]), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"cpu": results, "pause": pauses}, f)
    finally:
        if d:
            d.close()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
