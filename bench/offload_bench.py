#!/usr/bin/python3
"""A CPU-bound trainer pinned to one core: what its input costs it, loaded in-process
against offloaded to a Ferry worker on another core, against no loading at all.

The trainer (this process, pinned to CPU A, one torch thread) takes one batch per step
and does a fixed amount of CPU work per step (float32 matrix products). Batches are
uint8 NHWC, RandomResizedCrop 224 + flip, as a GPU trainer receives them (the
normalize would run on its GPU). Four ways to feed it, interleaved over --rounds:

  no loading   one batch, loaded once, given again every step: the step's own cost;
  offloaded    ferry.Loader(workers=[...], io_cpus=[B]) from one ferry-worker
               (--threads 1) pinned to CPU B, the client's receiving thread on CPU B
               too: what remains on the trainer's core is taking the received batch;
  offloaded, receiving on A   the same without io_cpus: the receiving thread inherits
               the trainer's affinity, so the kernel's copy out of the socket (4.8 MB a
               step) and its cache traffic land on the trainer's core;
  in-process   ferry.Loader(threads=1) in this process, so on CPU A: decode and
               augmentation share the trainer's core.

The step's work is set to --work-ratio (1.05) times the time one core takes to load a
batch, measured first: a trainer whose input costs about as much as its step, the case
offloading is for (far less, and there is nothing to gain; far more, and one worker
core cannot keep up). Prints the median step time of each way, the ratios
offloaded / no loading (the trainer's whole cost of remote input) and in-process /
offloaded (each the median of the rounds' own ratios), and the bytes on the wire per
sample.

  /usr/bin/python3 bench/offload_bench.py --data data/sample --build build
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PIPELINE = {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 224}, {"op": "hflip", "p": 0.5}],
            "output": {"dtype": "uint8", "layout": "NHWC"}}


def cpus():
    got = sorted(os.sched_getaffinity(0))
    if len(got) < 2:
        raise SystemExit("needs two CPUs (one for the trainer, one for the worker)")
    return got[0], got[1]


class Work:
    """A fixed amount of CPU work: `units` products of 128x128 float32 matrices."""

    def __init__(self, torch):
        self.torch = torch
        self.a = torch.rand(128, 128)
        self.b = torch.rand(128, 128)
        self.units = 1

    def unit_seconds(self):
        n = 50
        t0 = time.perf_counter()
        for _ in range(n):
            self.torch.mm(self.a, self.b)
        return (time.perf_counter() - t0) / n

    def __call__(self, images, labels):
        acc = self.a
        for _ in range(self.units):
            acc = self.torch.mm(self.a, self.b)
        # The step uses its batch (as a trainer's copy to its GPU would read it).
        return float(acc[0, 0]) + int(labels.sum()) + int(images[:, 0, 0, 0].sum())


def steps(loader_iter, work, n):
    """Median seconds per step over n steps (one batch each)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        x, y = next(loader_iter)
        work(x, y)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def forever(loader):
    while True:
        for b in loader:
            yield b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--build", default="build", help="the CMake build holding python/ and server/ferry-worker")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10, help="timed steps per way per round")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--work-ratio", type=float, default=1.05, help="step work / one core's time to load a batch")
    ap.add_argument("--json", default="", help="also write the figures here")
    a = ap.parse_args()

    trainer_cpu, worker_cpu = cpus()
    os.sched_setaffinity(0, {trainer_cpu})  # before any thread starts: they inherit it
    sys.path.insert(0, os.path.join(a.build, "python"))
    import torch
    torch.set_num_threads(1)
    import ferry

    def local():
        return ferry.Loader(data=a.data, pipeline=PIPELINE, batch_size=a.batch_size, epochs=None, threads=1,
                            prefetch=2)

    work = Work(torch)
    unit_s = statistics.median(work.unit_seconds() for _ in range(5))  # before any loader runs

    # One core's time to load a batch (the loader alone, pinned with this process).
    calib = local()
    it = forever(calib)
    for _ in range(3):
        next(it)
    windows = []
    for _ in range(5):  # the median of five windows: a shared machine's speed drifts
        t0 = time.perf_counter()
        for _ in range(6):
            next(it)
        windows.append((time.perf_counter() - t0) / 6)
    load_s = statistics.median(windows)
    it.close()
    calib.close()
    work.units = max(1, round(a.work_ratio * load_s / unit_s))

    worker = subprocess.Popen(["taskset", "-c", str(worker_cpu), os.path.join(a.build, "server", "ferry-worker"),
                               "--listen", "127.0.0.1:0", "--threads", "1"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True)
    line = worker.stdout.readline()
    if "on " not in line:
        raise SystemExit("ferry-worker did not start: %r" % line)
    address = line.split()[-1]
    remote_loader = ferry.Loader(data=a.data, pipeline=PIPELINE, batch_size=a.batch_size, epochs=None,
                                 workers=[address], prefetch=4, io_cpus=[worker_cpu])
    remote = forever(remote_loader)
    # A second stream from the same worker, received on the trainer's core.
    remote_a_loader = ferry.Loader(data=a.data, pipeline=PIPELINE, batch_size=a.batch_size, epochs=None,
                                   workers=[address], prefetch=4, seed=1)
    remote_a = forever(remote_a_loader)
    inproc = forever(local())
    cached = next(inproc)

    def repeat():
        while True:
            yield cached

    no_load = repeat()
    for it in (remote, remote_a, inproc, no_load):  # warm up: streams started, prefetch full
        for _ in range(5):
            x, y = next(it)
            work(x, y)
    got = {"no_loading": [], "offloaded": [], "offloaded_recv_on_a": [], "in_process": []}
    for _ in range(a.rounds):
        got["no_loading"].append(steps(no_load, work, a.steps))
        got["offloaded"].append(steps(remote, work, a.steps))
        got["offloaded_recv_on_a"].append(steps(remote_a, work, a.steps))
        got["in_process"].append(steps(inproc, work, a.steps))
    info = remote_loader.last_batch_info()
    wire_bytes = info["buffer"][1] / a.batch_size
    remote_loader.close()
    remote_a_loader.close()
    worker.terminate()
    worker.wait()

    med = {k: statistics.median(v) for k, v in got.items()}
    # Ratios within each round (its ways run back to back), then their median:
    # the machine's speed drifts between rounds more than within one.
    offloaded_ratio = statistics.median(o / n for o, n in zip(got["offloaded"], got["no_loading"]))
    recv_a_ratio = statistics.median(o / n for o, n in zip(got["offloaded_recv_on_a"], got["no_loading"]))
    inproc_ratio = statistics.median(i / o for i, o in zip(got["in_process"], got["offloaded"]))
    print("| way to feed the trainer (CPU %d) | step ms (median of %d rounds x %d steps) |" % (trainer_cpu, a.rounds,
                                                                                            a.steps))
    print("|---|---:|")
    print("| no loading (a cached batch) | %.1f |" % (med["no_loading"] * 1e3))
    print("| offloaded (1 ferry-worker, --threads 1, on CPU %d; io_cpus=[%d]) | %.1f |"
          % (worker_cpu, worker_cpu, med["offloaded"] * 1e3))
    print("| offloaded, received on the trainer's CPU %d (no io_cpus) | %.1f |"
          % (trainer_cpu, med["offloaded_recv_on_a"] * 1e3))
    print("| in-process (ferry.Loader threads=1, same core) | %.1f |" % (med["in_process"] * 1e3))
    print()
    print("batch %d x 224x224x3 uint8; one core loads a batch in %.1f ms; step work %.1f ms (%d units, ratio %.2f)"
          % (a.batch_size, load_s * 1e3, work.units * unit_s * 1e3, work.units, a.work_ratio))
    print("per round (ms): " + "  ".join("%s %s" % (k, " ".join("%.1f" % (t * 1e3) for t in v))
                                         for k, v in got.items()))
    print("offload offloaded/no_loading=%.3f received_on_trainer_cpu/no_loading=%.3f in_process/offloaded=%.3f "
          "wire_bytes_per_sample=%.0f (targets: <= 1.03, >= 1.8)" % (offloaded_ratio, recv_a_ratio, inproc_ratio,
                                                                     wire_bytes))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"step_s": med, "rounds": got, "load_s": load_s, "offloaded_over_no_loading": offloaded_ratio,
                       "received_on_trainer_cpu_over_no_loading": recv_a_ratio,
                       "in_process_over_offloaded": inproc_ratio, "wire_bytes_per_sample": wire_bytes}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
