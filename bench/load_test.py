#!/usr/bin/python3
"""Load test: many concurrent clients on one ferry-worker, each reading a full epoch.

Checks what a worker owes a crowd: no crash, every client complete (every sample
exactly once for each), the worker's peak RSS within
clients x buffered batches x batch bytes + 150 MB, and fairness: the fastest
client's rate over the slowest's at most 1.5. Prints the figures and a verdict.

  /usr/bin/python3 bench/load_test.py --build build --data data/sample --clients 64
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

SPEC = '{"ops":[{"op":"random_resized_crop","size":%d}],"output":{"dtype":"uint8","layout":"NHWC"}}'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--data", default="data/sample")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--size", type=int, default=64, help="output image side")
    ap.add_argument("--threads", type=int, default=0, help="the worker's decode threads (0: all cores)")
    ap.add_argument("--buffered-batches", type=int, default=4)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    data = os.path.abspath(args.data)
    work = tempfile.mkdtemp(prefix="ferry-load-")
    images = (".jpg", ".jpeg", ".png")
    n = sum(1 for _, _, files in os.walk(data) for f in files if f.lower().endswith(images))

    out = open(os.path.join(work, "worker.out"), "w")
    err = open(os.path.join(work, "worker.err"), "w")
    worker = subprocess.Popen([os.path.join(build, "server", "ferry-worker"), "--listen", "127.0.0.1:0", "--threads",
                               str(args.threads), "--buffered-batches", str(args.buffered_batches)],
                              stdout=out, stderr=err)
    address = None
    for _ in range(400):
        with open(os.path.join(work, "worker.out")) as f:
            m = re.search(r"listening on (\S+)", f.read())
        if m:
            address = m.group(1)
            break
        time.sleep(0.05)
    if address is None:
        print("the worker did not start")
        return 1
    base_rss = rss_kb(worker.pid)
    spec = SPEC % args.size
    clients = []
    start = time.time()
    for i in range(args.clients):
        dump = os.path.join(work, "c%d.txt" % i)
        clients.append((subprocess.Popen(
            [os.path.join(build, "client", "ferry-consume"), "--workers", address, "--data", data, "--pipeline", spec,
             "--batch-size", str(args.batch_size), "--epochs", "1", "--seed", str(i), "--dump-indices", dump],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), dump, time.time()))
    peak = 0
    while any(c.poll() is None for c, _, _ in clients):
        peak = max(peak, rss_kb(worker.pid))
        time.sleep(0.05)
        if worker.poll() is not None:
            break
    elapsed = time.time() - start
    rates, failed = [], 0
    for c, dump, t0 in clients:
        stdout, stderr = c.communicate()
        with open(dump) as f:
            got = sorted(int(x) for x in f.read().split())
        complete = c.returncode == 0 and got == list(range(n))
        failed += 0 if complete else 1
        m = re.search(r"img/s=([0-9.]+)", stdout)
        if m:
            rates.append(float(m.group(1)))
        if not complete:
            print("client failed (rc %s, %d of %d samples): %s" % (c.returncode, len(got), n, stderr[-500:]))
    alive = worker.poll() is None
    peak = max(peak, vm_hwm_kb(worker.pid))
    worker.kill()
    batch_bytes = args.batch_size * (args.size * args.size * 3 + 16)
    bound_mb = args.clients * args.buffered_batches * batch_bytes / 2**20 + 150
    fairness = max(rates) / min(rates) if rates else float("inf")
    print("load test: %d clients x %d samples on one worker, %.1f s, %.0f img/s in all" %
          (args.clients, n, elapsed, args.clients * n / elapsed))
    print("  worker alive: %s; clients complete: %d of %d" % (alive, args.clients - failed, args.clients))
    print("  worker peak RSS: %.0f MB (at start %.0f MB); bound %d x %d x %.2f MB + 150 MB = %.0f MB" %
          (peak / 1024, base_rss / 1024, args.clients, args.buffered_batches, batch_bytes / 2**20, bound_mb))
    print("  per-client img/s: min %.1f, median %.1f, max %.1f; max/min %.2f (target <= 1.5)" %
          (min(rates), sorted(rates)[len(rates) // 2], max(rates), fairness))
    ok = alive and failed == 0 and peak / 1024 <= bound_mb and fairness <= 1.5
    print("verdict: %s" % ("pass" if ok else "FAILED"))
    if ok:
        subprocess.run(["rm", "-rf", work])
    else:
        print("logs in %s" % work)
    return 0 if ok else 1


def rss_kb(pid):
    return status_kb(pid, "VmRSS")


def vm_hwm_kb(pid):
    return status_kb(pid, "VmHWM")


def status_kb(pid, field):
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
