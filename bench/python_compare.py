#!/usr/bin/python3
"""Images per CPU-second from Python, on one corpus, in one run:

  torchvision  torch.utils.data.DataLoader over torchvision.datasets.ImageFolder with
               the same imagenet-train transform (RandomResizedCrop 224, flip,
               ToTensor, Normalize), num_workers=0, one torch thread;
  ferry local  ferry.Loader(threads=1), in this process;
  ferry remote ferry.Loader through a ferry-dispatcher job served by one ferry-worker
               (--threads 1): the CPU of all three processes counts.

CPU time is user + system of every process involved (this one, and the daemons' from
/proc). Prints a Markdown table and the ratios.

  /usr/bin/python3 bench/python_compare.py --data data/sample --build build [--batches 30]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time


def own_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def proc_cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime, stime


def measure(iterable, batches, warmup, pids=()):
    """Images and CPU seconds (this process + pids) over `batches` batches after `warmup`."""
    it = iter(iterable)
    for _ in range(warmup):
        next(it)
    cpu0 = own_cpu() + sum(proc_cpu(p) for p in pids)
    t0 = time.perf_counter()
    images = 0
    for _ in range(batches):
        x, _ = next(it)
        images += x.shape[0]
    wall = time.perf_counter() - t0
    cpu = own_cpu() + sum(proc_cpu(p) for p in pids) - cpu0
    return images, cpu, wall


def start(argv):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = p.stdout.readline()
    if not line.startswith("listening on "):
        raise SystemExit("%s did not start" % argv[0])
    return p, line.split()[-1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--batches", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=64)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import torch
    import torchvision.transforms as T
    from torchvision.datasets import ImageFolder
    import ferry

    torch.set_num_threads(1)
    warmup = 3
    rows = []

    tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                    T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    dl = torch.utils.data.DataLoader(ImageFolder(args.data, transform=tf), batch_size=args.batch_size, shuffle=True,
                                     num_workers=0, drop_last=True)
    rows.append(("torchvision DataLoader (num_workers=0)",) + measure(dl, args.batches, warmup))

    local = ferry.Loader(data=args.data, pipeline="imagenet-train", batch_size=args.batch_size, threads=1, epochs=None)
    rows.append(("ferry.Loader, local (threads=1)",) + measure(local, args.batches, warmup))
    local.close()

    with tempfile.TemporaryDirectory() as work:
        d, daddr = start([os.path.join(args.build, "server", "ferry-dispatcher"), "--listen", "127.0.0.1:0",
                          "--work-dir", os.path.join(work, "journal")])
        w, _ = start([os.path.join(args.build, "server", "ferry-worker"), "--listen", "127.0.0.1:0", "--threads", "1",
                      "--dispatcher", daddr])
        try:
            remote = ferry.Loader(data=os.path.abspath(args.data), pipeline="imagenet-train",
                                  batch_size=args.batch_size, epochs=None, dispatcher=daddr, job_name="compare")
            rows.append(("ferry.Loader, remote (1 worker, --threads 1)",) +
                        measure(remote, args.batches, warmup, pids=(d.pid, w.pid)))
            remote.close()
        finally:
            for p in (w, d):
                p.terminate()
            for p in (w, d):
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()

    print("| loader | images | CPU s | wall s | img/s | img per CPU-s |")
    print("|---|---:|---:|---:|---:|---:|")
    per_cpu = {}
    for name, images, cpu, wall in rows:
        per_cpu[name] = images / cpu
        print("| %s | %d | %.2f | %.2f | %.1f | %.1f |" % (name, images, cpu, wall, images / wall, images / cpu))
    base = per_cpu[rows[0][0]]
    print()
    print("python_compare local_vs_torchvision=%.2f remote_vs_torchvision=%.2f" %
          (per_cpu[rows[1][0]] / base, per_cpu[rows[2][0]] / base))
    # The remote path's whole CPU (trainer, worker, dispatcher) per image against the
    # in-process loader's (issue 26's target: <= 1.15).
    print("python_compare remote_cpu_per_image_vs_local=%.3f (target <= 1.15)" %
          (per_cpu[rows[1][0]] / per_cpu[rows[2][0]]))


if __name__ == "__main__":
    main()
