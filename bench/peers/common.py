"""What every peer's script shares: the file list, the clock, the JSON it prints.

Each peer runs in a process of its own (bench/peers/peers.py starts it, pinned to its
cores with taskset), reads batches for a warm-up, then for --seconds, and prints one
JSON line: images, wall seconds, CPU seconds (this process and its children, user and
system), or {"error": why} when it cannot run here."""
import argparse
import json
import os
import resource
import sys
import time
import traceback

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]


def args():
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", required=True, help="a file of image paths, one a line")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=("float32", "uint8"), default="float32")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--warmup", type=int, default=4, help="batches not counted")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--build", default="build")
    a = ap.parse_args()
    with open(a.files) as f:
        a.paths = [line.strip() for line in f if line.strip()]
    return a


def _children(pid="self"):
    out = []
    try:
        tasks = os.listdir("/proc/%s/task" % pid)
    except OSError:
        return out
    for t in tasks:
        try:
            with open("/proc/%s/task/%s/children" % (pid, t)) as f:
                out += [int(x) for x in f.read().split()]
        except OSError:
            pass
    return out + [g for c in out for g in _children(c)]


def _proc_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def cpu():
    """This process's CPU, its reaped children's, and its live descendants' (a
    DataLoader's worker processes live through the measurement)."""
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime + sum(_proc_cpu(p) for p in _children())


def measure(batches, a, rows):
    """Counts the images of `batches` (an endless iterator) after a.warmup batches, for
    a.seconds; `rows(batch)` is a batch's image count. Prints the JSON line."""
    for _ in range(a.warmup):
        next(batches)
    c0, t0, n = cpu(), time.perf_counter(), 0
    while time.perf_counter() - t0 < a.seconds:
        n += rows(next(batches))
    wall, used = time.perf_counter() - t0, cpu() - c0
    print(json.dumps({"images": n, "wall_s": wall, "cpu_s": used}), flush=True)


def run(main):
    """Runs main(); any exception becomes {"error": ...} (the peer cannot run here)."""
    try:
        main()
    except BaseException as e:  # an import that needs a driver, a missing wheel, ...
        print(json.dumps({"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else ""),
                          "trace": traceback.format_exc()[-1500:]}), flush=True)
        sys.exit(0)


def forever(make_epoch):
    while True:
        yield from make_epoch()
