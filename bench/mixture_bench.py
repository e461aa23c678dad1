#!/usr/bin/python3
"""What a mixture costs: the same photographs read as one ImageFolder and as a
ferry.Mixture of three file lists that split them (weights in proportion to their
sizes, an epoch of all of them), in-process, the imagenet-train pipeline; images per
CPU-second of this process, alternated, the median of --rounds. Also prints the
mixture's realized shares against its weights.

    /usr/bin/python3 bench/mixture_bench.py --data data/sample [--rounds 3] [--threads 2]

Run from the repository root after building (build/python holds the module).
"""
import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "python"))
import ferry  # noqa: E402


def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(loader):
    t0, c0, n = time.perf_counter(), cpu(), 0
    for images, labels in loader:
        n += int(images.shape[0])
    return n, n / (cpu() - c0), n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    data = os.path.abspath(a.data)
    paths, labels, _ = ferry.list_dataset(data)
    tmp = tempfile.mkdtemp(prefix="ferry-mixture-bench-")
    thirds = [len(paths) // 2, len(paths) // 3]
    thirds.append(len(paths) - sum(thirds))
    sources, at = [], 0
    for k, n in enumerate(thirds):
        path = os.path.join(tmp, "source-%d.tsv" % k)
        with open(path, "w") as f:
            for p, l in zip(paths[at:at + n], labels[at:at + n]):
                f.write("%s\t%d\n" % (p, l))
        at += n
        sources.append((path, float(n)))
    mix = ferry.Mixture(sources, epoch=len(paths))
    common = dict(pipeline="imagenet-train", batch_size=64, threads=a.threads, drop_last=False, seed=1)
    one, mixed = [], []
    for r in range(a.rounds):
        one.append(run(ferry.Loader(data=data, **common)))
        m = ferry.Loader(data=mix, **common)
        mixed.append(run(m))
        print("round %d: folder %d images %.0f/CPU-s %.0f/s; mixture %d images %.0f/CPU-s %.0f/s"
              % (r + 1, one[-1][0], one[-1][1], one[-1][2], mixed[-1][0], mixed[-1][1], mixed[-1][2]))
    # The realized shares of one epoch.
    ld = ferry.Loader(data=mix, pipeline={"ops": [{"op": "resize", "size": 8}, {"op": "center_crop", "size": 8}],
                                          "output": {"dtype": "uint8", "layout": "NHWC"}},
                      batch_size=256, threads=a.threads, drop_last=False)
    counts = [0, 0, 0]
    bounds = [thirds[0], thirds[0] + thirds[1]]
    for _ in ld:
        for i in ld.last_batch_info()["indices"].tolist():
            counts[0 if i < bounds[0] else 1 if i < bounds[1] else 2] += 1
    total = sum(counts)
    print("shares: " + ", ".join("%.4f (weight %.4f)" % (c / total, n / len(paths)) for c, n in zip(counts, thirds)))
    ratio = statistics.median(m[1] for m in mixed) / statistics.median(o[1] for o in one)
    print("mixture images per CPU-second / one folder's: %.3f (median of %d)" % (ratio, a.rounds))


if __name__ == "__main__":
    main()
