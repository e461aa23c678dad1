#!/usr/bin/python3
"""Chaos soak: a dispatcher and 4 workers on loopback, two consumers sharing one job
for many epochs, while a driver kills -9 or SIGSTOPs a random worker every few seconds
(and restarts or continues it), kills -9 and restarts the dispatcher twice, and kills
one consumer once (a new process resumes from its saved state).

Every epoch must be delivered exactly once: the samples the killed consumer had
delivered up to its saved state, plus what its successor and the other consumer
delivered, are each sample once per epoch. Prints a table per epoch and a verdict;
exits non-zero if anything was lost or repeated, or a process failed.

  /usr/bin/python3 bench/chaos_soak.py --build build --data data/sample --epochs 10
"""
import argparse
import collections
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

SPEC = '{"ops":[{"op":"random_resized_crop","size":32}],"output":{"dtype":"uint8","layout":"NHWC"}}'


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Proc:
    """A daemon or consumer with its output in files."""

    def __init__(self, name, argv, workdir):
        self.name, self.argv, self.workdir = name, argv, workdir
        self.starts = 0
        self.p = None
        self.stopped = False

    def start(self):
        self.starts += 1
        out = open(os.path.join(self.workdir, "%s.%d.out" % (self.name, self.starts)), "w")
        err = open(os.path.join(self.workdir, "%s.%d.err" % (self.name, self.starts)), "w")
        self.p = subprocess.Popen(self.argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        self.stopped = False
        return self

    def err(self):
        with open(os.path.join(self.workdir, "%s.%d.err" % (self.name, self.starts))) as f:
            return f.read()

    def wait_listening(self, timeout=20):
        path = os.path.join(self.workdir, "%s.%d.out" % (self.name, self.starts))
        deadline = time.time() + timeout
        while time.time() < deadline:
            with open(path) as f:
                if "listening on" in f.read():
                    return
            if self.p.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError("%s did not start: %s" % (self.name, self.err()))

    def kill(self):
        if self.p and self.p.poll() is None:
            self.p.send_signal(signal.SIGKILL)
            if self.stopped:
                self.p.send_signal(signal.SIGCONT)
            self.p.wait()

    def alive(self):
        return self.p is not None and self.p.poll() is None


def read_dump(path, limit=None):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    rows.append((int(parts[0]), int(parts[1])))
    return rows if limit is None else rows[:limit]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build", help="the build directory (ferry-dispatcher, ferry-worker, ferry-consume)")
    ap.add_argument("--data", default="data/sample", help="an ImageFolder")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1, help="the driver's random choices")
    ap.add_argument("--step-ms", type=float, default=15, help="each consumer's simulated training step")
    ap.add_argument("--time-limit", type=float, default=600, help="seconds before the soak counts as hung")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    build = os.path.abspath(args.build)
    dispatcher_bin = os.path.join(build, "server", "ferry-dispatcher")
    worker_bin = os.path.join(build, "server", "ferry-worker")
    consume_bin = os.path.join(build, "client", "ferry-consume")
    data = os.path.abspath(args.data)
    images = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
    n = sum(1 for _, _, files in os.walk(data) for f in files if f.lower().endswith(images))
    work = tempfile.mkdtemp(prefix="ferry-soak-")
    events = collections.Counter()
    procs = []

    dport = free_port()
    dispatcher_addr = "127.0.0.1:%d" % dport
    dispatcher = Proc("dispatcher", [dispatcher_bin, "--listen", dispatcher_addr, "--work-dir",
                                     os.path.join(work, "journal"), "--heartbeat-interval-ms", "100",
                                     "--heartbeat-timeout-ms", "1000"], work)
    procs.append(dispatcher)
    dispatcher.start().wait_listening()
    workers = []
    for i in range(args.workers):
        w = Proc("worker%d" % i, [worker_bin, "--listen", "127.0.0.1:%d" % free_port(), "--threads", "1",
                                  "--dispatcher", dispatcher_addr, "--drain-timeout", "5"], work)
        procs.append(w)
        workers.append(w.start())
    for w in workers:
        w.wait_listening()

    def consumer(name, cid, extra):
        argv = [consume_bin, "--dispatcher", dispatcher_addr, "--job", "soak", "--data", data, "--pipeline", SPEC,
                "--batch-size", str(args.batch_size), "--batches-per-split", "2", "--epochs", str(args.epochs),
                "--dump-indices", os.path.join(work, name + ".txt"), "--dump-epochs", "--step-ms", str(args.step_ms)]
        if cid:
            argv += ["--consumer-id", cid]
        p = Proc(name, argv + extra, work)
        procs.append(p)
        return p.start()

    # Consumer a checkpoints in the middle of epoch 1 (each consumer reads about half).
    per_consumer_epoch = n // args.batch_size // 2
    save_after = per_consumer_epoch + per_consumer_epoch // 2
    state = os.path.join(work, "a.state")
    a = consumer("a", "a", ["--save-after", str(save_after), "--save-state", state])
    b = consumer("b", "b", [])
    a2 = None
    a_kept = None  # samples a delivered up to its saved state
    start = time.time()
    next_chaos = start + rng.uniform(1.5, 3)
    dispatcher_kills = [start + 4, start + 10]
    ok = True
    try:
        while True:
            now = time.time()
            if now - start > args.time_limit:
                print("HUNG: the consumers did not finish within %.0f s" % args.time_limit)
                ok = False
                break
            # The consumer kill: right after a's checkpoint, a new process resumes from it.
            if a2 is None and os.path.exists(state):
                m = re.search(r"state after \d+ batches \((\d+) samples\)", a.err())
                if m:
                    time.sleep(0.2)
                    a.kill()
                    a_kept = int(m.group(1))
                    events["consumer killed -9 and resumed"] += 1
                    a2 = consumer("a2", None, ["--resume", state])
            if dispatcher_kills and now >= dispatcher_kills[0]:
                dispatcher_kills.pop(0)
                dispatcher.kill()
                time.sleep(0.3)
                dispatcher.start().wait_listening()
                events["dispatcher killed -9 and restarted"] += 1
            if now >= next_chaos:
                next_chaos = now + rng.uniform(1.5, 3)
                w = rng.choice(workers)
                if rng.random() < 0.5:
                    w.kill()
                    time.sleep(rng.uniform(0.2, 1.0))
                    w.start().wait_listening()
                    events["worker killed -9 and restarted"] += 1
                else:
                    w.p.send_signal(signal.SIGSTOP)
                    w.stopped = True
                    time.sleep(rng.uniform(1.0, 2.5))
                    w.p.send_signal(signal.SIGCONT)
                    w.stopped = False
                    events["worker stopped (SIGSTOP) and continued"] += 1
            live = [c for c in (b, a2 if a2 else a) if c.alive()]
            if not live:
                break
            time.sleep(0.05)
        for c in [b, a2]:
            if c is None or c.p.poll() != 0:
                ok = False
                print("FAILED: consumer %s exited %s: %s" % (c.name if c else "a2", c.p.poll() if c else "never started",
                                                          c.err()[-2000:] if c else ""))
        elapsed = time.time() - start
        rows = read_dump(os.path.join(work, "a.txt"), a_kept) + read_dump(os.path.join(work, "a2.txt")) + \
            read_dump(os.path.join(work, "b.txt"))
        per_epoch = collections.defaultdict(collections.Counter)
        for e, i in rows:
            per_epoch[e][i] += 1
        print("chaos soak: %d samples x %d epochs, %d workers, 2 consumers, %.0f s" % (n, args.epochs, args.workers,
                                                                                     elapsed))
        for what, count in sorted(events.items()):
            print("  %-42s %d" % (what, count))
        print("%6s %10s %8s %9s" % ("epoch", "delivered", "missing", "repeated"))
        for e in range(args.epochs):
            c = per_epoch.get(e, collections.Counter())
            missing = sum(1 for i in range(n) if c[i] == 0)
            repeated = sum(v - 1 for v in c.values() if v > 1)
            stray = sum(1 for i in c if i < 0 or i >= n)
            print("%6d %10d %8d %9d" % (e, sum(c.values()), missing, repeated))
            if missing or repeated or stray:
                ok = False
        if set(per_epoch) - set(range(args.epochs)):
            ok = False
            print("FAILED: samples from epochs outside the job")
        if a_kept is None:
            ok = False
            print("FAILED: consumer a never saved its state")
        if events["dispatcher killed -9 and restarted"] < 2:
            ok = False
            print("FAILED: the run ended before both dispatcher kills")
        print("verdict: %s" % ("every epoch exactly once" if ok else "FAILED"))
    finally:
        for p in procs:
            p.kill()
        if ok and not args.keep:
            subprocess.run(["rm", "-rf", work])
        else:
            print("logs in %s" % work)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
