#!/usr/bin/env python3
"""User code (issue 24): a PIL-based Dataset of the script's own, with torchvision's
transforms on PIL images, made by Ferry's Python processes against the same dataset
in torchvision's DataLoader with as many worker processes, in this run:

  images per CPU-second   all the CPU either spends (the trainer process and its
                          worker processes, user and system), per image, after a
                          first epoch (the processes' start is paid once a run)
  images per second       wall clock
  trainer CPU per batch   the training process's own CPU (DataLoader: receiving and
                          unpickling batches; Ferry: its loader's threads, mapping
                          each batch, rebuilding it)

Ferry runs in-process (ferry.Loader(dataset=...) starts its Python processes on this
machine, as a DataLoader starts its workers), and from a ferry-worker process on
loopback (--allow-user-code, as many Python processes): the trainer then only
receives (its CPU per batch is the remote figure; the worker's is counted in images
per CPU-second).

    /usr/bin/python3 bench/user_code_bench.py --data data/sample --build build

Targets (the issue's): Ferry's images per CPU-second >= 0.9x DataLoader's, and the
trainer's CPU per batch <= 0.2x DataLoader's, both with as many processes on the
trainer's machine. From a worker the trainer's CPU per batch is printed too: it
receives the batch's bytes over TCP, a copy neither loader on the trainer's machine
makes.
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


def children(pid="self", deep=False):
    """The child processes of `pid` (DataLoader's workers, Ferry's Python processes, a
    ferry-worker); deep: their children too."""
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
    if deep:
        out += [g for c in out for g in children(c, True)]
    return out


def proc_cpu(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def measure(make, passes):
    """(images, wall s, trainer CPU s, children CPU s, batches) of `passes` epochs after
    a first one (the processes' start and imports, paid once a run, are not counted)."""
    loader = make()
    for x, _y in loader:  # warm-up epoch
        pass
    kids = children(deep=True)
    self0, kids0 = cpu(resource.RUSAGE_SELF), sum(proc_cpu(p) for p in kids)
    t0 = time.perf_counter()
    n = batches = nbytes = 0
    for _ in range(passes):
        for x, _y in loader:
            n += x.shape[0]
            batches += 1
            nbytes += x.numel() * x.element_size()
    wall = time.perf_counter() - t0
    own, other = cpu(resource.RUSAGE_SELF) - self0, sum(proc_cpu(p) for p in kids) - kids0
    if hasattr(loader, "close"):
        loader.close()
    return n, wall, own, other, batches, nbytes


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
                                           num_workers=args.processes, persistent_workers=True)

    def ferry_loader():
        return ferry.Loader(dataset=ds, batch_size=args.batch_size, shuffle=True, drop_last=False, epochs=None,
                            python_processes=args.processes, prefetch=2)

    import subprocess
    worker = subprocess.Popen([os.path.join(args.build, "server", "ferry-worker"), "--listen", "127.0.0.1:0",
                               "--allow-user-code", "--python-processes", str(args.processes), "--threads", "1"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    address = worker.stdout.readline().split()[-1]

    def remote_loader():
        return ferry.Loader(dataset=ds, batch_size=args.batch_size, shuffle=True, drop_last=False, epochs=None,
                            workers=[address], prefetch=2)

    results = {}
    for name, make in (("torchvision DataLoader", torch_loader), ("Ferry (Python processes)", ferry_loader),
                       ("Ferry, a worker process", remote_loader)):
        best = None
        for _ in range(args.rounds):
            n, wall, own, kids, batches, nbytes = measure(make, args.passes)
            r = {"images": n, "per_cpu_s": n / (own + kids), "per_s": n / wall, "trainer_ms_per_batch":
                 1000 * own / batches, "cpu_s": own + kids, "mb_per_batch": nbytes / batches / 1e6}
            if best is None or r["per_cpu_s"] > best["per_cpu_s"]:
                best = r
        results[name] = best
    print("user code: %d photographs (PIL + torchvision RandomResizedCrop 224, flip, ToTensor, Normalize), batch "
          "%d, %d processes each, best of %d" % (len(files), args.batch_size, args.processes, args.rounds))
    print("%-26s %14s %12s %20s" % ("", "images/CPU-s", "images/s", "trainer CPU ms/batch"))
    for name, r in results.items():
        print("%-26s %14.1f %12.1f %20.2f" % (name, r["per_cpu_s"], r["per_s"], r["trainer_ms_per_batch"]))
    worker.terminate()
    worker.wait()
    t, f, r = (results["torchvision DataLoader"], results["Ferry (Python processes)"],
               results["Ferry, a worker process"])
    print("ratio Ferry / DataLoader, in-process: images per CPU-second %.2f (target >= 0.9), images per second %.2f, "
          "trainer CPU per batch %.3f (target <= 0.2)" % (f["per_cpu_s"] / t["per_cpu_s"], f["per_s"] / t["per_s"],
                                                          f["trainer_ms_per_batch"] / t["trainer_ms_per_batch"]))
    # From a worker the trainer receives each batch's bytes over TCP (the kernel copies
    # them into its memory); DataLoader's and the in-process loader's come through
    # shared memory, never copied.
    print("ratio Ferry / DataLoader, a worker process on loopback: images per CPU-second %.2f, trainer CPU per batch "
          "%.2f (it receives %.1f MB a batch over TCP)" % (r["per_cpu_s"] / t["per_cpu_s"], r["trainer_ms_per_batch"] /
                                                          t["trainer_ms_per_batch"], r["mb_per_batch"]))


if __name__ == "__main__":
    main()
