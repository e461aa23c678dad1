#!/usr/bin/env python3
"""Fair shares: two saturating jobs of weights 3 and 1 on the same two workers, then a
third job of a higher priority.

A ferry-dispatcher and two ferry-workers (--threads 1, each pinned to its own CPU);
each job has one trainer that takes batches as fast as they come (it wants more than
the workers make). Real photographs of --data, imagenet-train to uint8 224x224,
batches of 32.

  weights   jobs A (weight 3) and B (weight 1) run together; their images/s over
            --seconds after a warm-up; ratio A / B (target 3, within 10%)
  priority  job C (priority 1, weight 1) starts while A and B run: the time until its
            rate over the last second reaches 90% of what it then keeps (target 2 s),
            and the rates of all three after it
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from sweep_bench import Daemons, subset  # noqa: E402  (the same daemons, the same photographs)

PIPELINE = {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 224}, {"op": "hflip", "p": 0.5}],
            "output": {"dtype": "uint8", "layout": "NHWC"}}


class Trainer(threading.Thread):
    """Takes a job's batches as fast as they come, recording when each arrived."""

    def __init__(self, ferry, d, tree, job, weight=1.0, priority=0):
        super().__init__(daemon=True)
        self.loader = ferry.Loader(data=tree, pipeline=PIPELINE, batch_size=32, epochs=None, seed=hash(job) % 1000,
                                   dispatcher=d.dispatcher, job_name=job, prefetch=4, weight=weight,
                                   priority=priority)
        self.stamps = []
        self.stop = threading.Event()
        self.started = time.perf_counter()

    def run(self):
        while not self.stop.is_set():
            for _ in self.loader:
                self.stamps.append(time.perf_counter())
                if self.stop.is_set():
                    return

    def rate(self, lo, hi):
        return 32 * sum(lo <= s < hi for s in self.stamps) / (hi - lo)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--images", type=int, default=1200)
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python"))
    import ferry  # noqa: E402
    work = tempfile.mkdtemp(prefix="ferry-fair-")
    try:
        tree = subset(a.data, a.images, work)
        ratios, reach = [], []
        for r in range(a.rounds):
            d = Daemons(a.build, work, "0")
            try:
                ta = Trainer(ferry, d, tree, "a-%d" % r, weight=3)
                tb = Trainer(ferry, d, tree, "b-%d" % r, weight=1)
                ta.start()
                tb.start()
                time.sleep(5)  # listings, leases, the streams' first batches
                t0 = time.perf_counter()
                time.sleep(a.seconds)
                t1 = time.perf_counter()
                ra, rb = ta.rate(t0, t1), tb.rate(t0, t1)
                ratios.append(ra / rb)
                # A job of a higher priority arrives.
                tc = Trainer(ferry, d, tree, "c-%d" % r, weight=1, priority=1)
                c0 = time.perf_counter()
                tc.start()
                time.sleep(12)
                c1 = time.perf_counter()
                steady = tc.rate(c1 - 5, c1)
                at = next((s for s in tc.stamps if tc.rate(s - 1, s) >= 0.9 * steady), None)
                reach.append((at - c0) if at is not None else float("inf"))
                print("round %d: A (weight 3) %.0f images/s, B (weight 1) %.0f: A/B %.2f; C (priority 1) reached "
                      "90%% of its %.0f images/s %.2f s after it started (A %.0f, B %.0f by then)"
                      % (r, ra, rb, ra / rb, steady, reach[-1], ta.rate(c1 - 5, c1), tb.rate(c1 - 5, c1)),
                      flush=True)
                for t in (ta, tb, tc):
                    t.stop.set()
            finally:
                d.close()
        print("\nweights 3:1, throughput A/B: %.2f (median of %d rounds: %s; target 3 within 10%%)"
              % (statistics.median(ratios), a.rounds, ", ".join("%.2f" % x for x in ratios)))
        print("a job of a higher priority at 90%% of its rate after %.2f s (median; target 2 s)"
              % statistics.median(reach))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
