#!/usr/bin/env python3
"""User code (issue 24): a PIL-based Dataset of the script's own, with torchvision's
transforms on PIL images, made by Ferry's Python processes against the same dataset
in torchvision's DataLoader with as many worker processes, in this run:

  images per CPU-second   all the CPU either spends (the trainer process and its
                          worker processes, user and system), per image
  images per second       wall clock
  trainer CPU per batch   the training process's own CPU (DataLoader: receiving and
                          unpickling batches; Ferry: its loader's threads, mapping
                          each batch, rebuilding it)

Ferry runs in-process here (ferry.Loader(dataset=...) starts its Python processes on
this machine, as a DataLoader starts its workers); remote workers run the same code.

    /usr/bin/python3 bench/user_code_bench.py --data data/sample --build build

Targets (the issue's): Ferry's images per CPU-second >= 0.9x DataLoader's, and the
trainer's CPU per batch <= 0.2x.
"""
import argparse
import os
import resource
import sys
import time


class PhotoDataset:
    """Photographs by path, opened with PIL, with a torchvision transform."""

    def __init__(self, files, transform):
        self.files = files
        self.transform = transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image
        with Image.open(self.files[i]) as im:
            img = im.convert("RGB")
        return self.transform(img), i % 8


def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime


def measure(make, passes):
    """(images, wall s, trainer CPU s, children CPU s, batches) of `passes` epochs; the
    loader is made and ended inside, so its processes are reaped (their CPU counted)."""
    self0, kids0 = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    loader = make()
    n = batches = 0
    for _ in range(passes):
        for x, _y in loader:
            n += x.shape[0]
            batches += 1
    if hasattr(loader, "close"):
        loader.close()
    del loader, x, _y
    import gc
    gc.collect()
    wall = time.perf_counter() - t0
    return n, wall, cpu(resource.RUSAGE_SELF) - self0, cpu(resource.RUSAGE_CHILDREN) - kids0, batches


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/sample")
    ap.add_argument("--build", default="build")
    ap.add_argument("--images", type=int, default=600)
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2, help="each loader runs this many times; the best counts")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import torch
    import torchvision.transforms as T
    import ferry
    torch.set_num_threads(1)
    files = []
    for c in sorted(os.listdir(args.data)):
        d = os.path.join(args.data, c)
        if os.path.isdir(d):
            files += [os.path.join(d, f) for f in sorted(os.listdir(d))]
    files = files[:: max(1, len(files) // args.images)][: args.images]
    transform = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    ds = PhotoDataset(files, transform)

    def torch_loader():
        return torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                           num_workers=args.processes, persistent_workers=False)

    def ferry_loader():
        return ferry.Loader(dataset=ds, batch_size=args.batch_size, shuffle=True, drop_last=False, epochs=None,
                            python_processes=args.processes, prefetch=2)

    results = {}
    for name, make in (("torchvision DataLoader", torch_loader), ("Ferry (Python processes)", ferry_loader)):
        best = None
        for _ in range(args.rounds):
            n, wall, own, kids, batches = measure(make, args.passes)
            r = {"images": n, "per_cpu_s": n / (own + kids), "per_s": n / wall, "trainer_ms_per_batch":
                 1000 * own / batches, "cpu_s": own + kids}
            if best is None or r["per_cpu_s"] > best["per_cpu_s"]:
                best = r
        results[name] = best
    print("user code: %d photographs (PIL + torchvision RandomResizedCrop 224, flip, ToTensor, Normalize), batch "
          "%d, %d processes each, best of %d" % (len(files), args.batch_size, args.processes, args.rounds))
    print("%-26s %14s %12s %20s" % ("", "images/CPU-s", "images/s", "trainer CPU ms/batch"))
    for name, r in results.items():
        print("%-26s %14.1f %12.1f %20.2f" % (name, r["per_cpu_s"], r["per_s"], r["trainer_ms_per_batch"]))
    t, f = results["torchvision DataLoader"], results["Ferry (Python processes)"]
    print("ratio Ferry / DataLoader: images per CPU-second %.2f (target >= 0.9), images per second %.2f, trainer CPU "
          "per batch %.2f (target <= 0.2)" % (f["per_cpu_s"] / t["per_cpu_s"], f["per_s"] / t["per_s"],
                                              f["trainer_ms_per_batch"] / t["trainer_ms_per_batch"]))


if __name__ == "__main__":
    main()
