#!/usr/bin/env python3
"""The GPU host's benchmark (issue 38): a training loop of the kind users run, fed by each
loader in turn, against the ceiling measured in the same run.

Models: torchvision ResNet-50 and ResNet-18, bf16 autocast, channels_last, SGD, batch 256
(--batch), the imagenet-train recipe (RandomResizedCrop 224, flip, normalize) on the real
photographs under --data. Loaders, each with --cores threads or workers:

  ceiling        one batch made on the device and reused: the step alone
  torchvision    torchvision's DataLoader, num_workers, pin_memory, .to(device, non_blocking)
  ferry.DL       ferry.DataLoader, the one-line switch of the same script (pin_memory)
  Loader         ferry.Loader(device=...) in this process (threads)
  Loader remote  ferry.Loader(device=...) through a dispatcher: ferry-local with 2 workers
                 of cores/2 threads on this host

Prints one table: images/s, share of the ceiling, the input wait per step (time blocked
in next()), and this process's CPU per image (ms; a DataLoader's worker processes and
Ferry's daemons are not counted: it is what the trainer pays).

  python3 bench/gpu/train_bench.py --data DIR [--models resnet50,resnet18] [--seconds 20]
  bench/gpu/run.sh is the device machine's whole check (the wheel, the corpus, this).
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import time

import torch
import torchvision
import torchvision.transforms as T

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def recipe_transform():
    return T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), T.Normalize(MEAN, STD)])


def ferry_pipeline():
    return {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 224}, {"op": "hflip", "p": 0.5},
                                     {"op": "normalize", "mean": MEAN, "std": STD}],
            "output": {"dtype": "float32", "layout": "NCHW"}}


class Trainer:
    """The step: forward in bf16 autocast, loss, backward, SGD; channels_last."""

    def __init__(self, name, classes, device):
        self.device = device
        self.model = getattr(torchvision.models, name)(num_classes=classes).to(device)
        self.model = self.model.to(memory_format=torch.channels_last)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self.loss = torch.nn.CrossEntropyLoss()

    def step(self, x, y):
        x = x.to(self.device, non_blocking=True).contiguous(memory_format=torch.channels_last)
        y = y.to(self.device, non_blocking=True)
        with torch.autocast(self.device.type, dtype=torch.bfloat16):
            loss = self.loss(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(trainer, batches, batch, seconds, warmup):
    """Runs steps from the iterator `batches` for `seconds` after `warmup` steps: images/s,
    input wait per step (s), this process's CPU per image (ms)."""
    for _ in range(warmup):
        x, y = next(batches)
        trainer.step(x, y)
    sync(trainer.device)
    steps, wait = 0, 0.0
    cpu0, t0 = time.process_time(), time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        w0 = time.perf_counter()
        x, y = next(batches)
        wait += time.perf_counter() - w0
        trainer.step(x, y)
        steps += 1
    sync(trainer.device)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return steps * batch / elapsed, wait / steps, 1000.0 * cpu / (steps * batch)


def forever(loader):
    while True:
        for b in loader:
            yield b[0], b[1]


class LocalCluster:
    """ferry-local: a dispatcher and workers on loopback (the wheel's, on PATH, or --ferry-local)."""

    def __init__(self, binary, workers, threads):
        self.proc = subprocess.Popen([binary, "--workers", str(workers), "--threads-per-worker", str(threads)],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("dispatcher on "):
            raise SystemExit("ferry-local did not start: %r" % line)
        self.dispatcher = line.split()[-1]

    def close(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="an ImageFolder of real photographs")
    ap.add_argument("--models", default="resnet50,resnet18")
    ap.add_argument("--loaders", default="ceiling,torchvision,ferry.DL,Loader,Loader remote")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--cores", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                    help="threads or workers every loader gets (default: all cores but one)")
    ap.add_argument("--seconds", type=float, default=20.0, help="timed window per loader and model")
    ap.add_argument("--warmup", type=int, default=10, help="steps before the window")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--ferry-local", default=shutil.which("ferry-local") or "build/server/ferry-local")
    a = ap.parse_args()
    import ferry
    device = torch.device(a.device)
    torch.backends.cudnn.benchmark = True
    data = os.path.abspath(a.data)
    dataset = torchvision.datasets.ImageFolder(data, transform=recipe_transform())
    classes = len(dataset.classes)
    loaders = [s.strip() for s in a.loaders.split(",") if s.strip()]
    cuda = device.type == "cuda"
    print("device %s%s; torch %s; %d images in %d classes; batch %d; %d cores for every loader; %.0f s a run" %
          (device, " (" + torch.cuda.get_device_name(device) + ")" if cuda else "", torch.__version__,
           len(dataset), classes, a.batch, a.cores, a.seconds), flush=True)
    cluster = LocalCluster(a.ferry_local, 2, max(1, a.cores // 2)) if "Loader remote" in loaders else None
    rows = []
    try:
        for model in [m.strip() for m in a.models.split(",") if m.strip()]:
            trainer = Trainer(model, classes, device)
            ceiling = None
            for name in loaders:
                if name == "ceiling":
                    x = torch.randn(a.batch, 3, 224, 224, device=device)
                    y = torch.randint(0, classes, (a.batch,), device=device)
                    batches = iter(lambda: (x, y), None)
                elif name == "torchvision":
                    batches = forever(torch.utils.data.DataLoader(
                        dataset, batch_size=a.batch, shuffle=True, num_workers=a.cores, pin_memory=cuda,
                        drop_last=True, persistent_workers=True, prefetch_factor=4))
                elif name == "ferry.DL":
                    batches = forever(ferry.DataLoader(dataset, batch_size=a.batch, shuffle=True,
                                                       num_workers=a.cores, pin_memory=cuda, drop_last=True))
                elif name == "Loader":
                    batches = forever(ferry.Loader(data=data, pipeline=ferry_pipeline(), batch_size=a.batch,
                                                   threads=a.cores, epochs=None, drop_last=True,
                                                   device=a.device if cuda else None))
                elif name == "Loader remote":
                    batches = forever(ferry.Loader(data=data, pipeline=ferry_pipeline(), batch_size=a.batch,
                                                   dispatcher=cluster.dispatcher, job_name="gpu-%s" % model,
                                                   epochs=None, drop_last=True, device=a.device if cuda else None))
                else:
                    raise SystemExit("unknown loader %r" % name)
                rate, wait, cpu = measure(trainer, batches, a.batch, a.seconds, a.warmup)
                if name == "ceiling":
                    ceiling = rate
                share = rate / ceiling if ceiling else float("nan")
                rows.append((model, name, rate, share, wait, cpu))
                print("%-9s %-14s %9.0f images/s  %5.1f%% of the ceiling  wait %6.1f ms/step  trainer CPU %.3f "
                      "ms/image" % (model, name, rate, 100 * share, 1000 * wait, cpu), flush=True)
                del batches
    finally:
        if cluster is not None:
            cluster.close()
    print("\n| model | loader | images/s | share of ceiling | input wait, ms/step | trainer CPU, ms/image |")
    print("|---|---|---:|---:|---:|---:|")
    for model, name, rate, share, wait, cpu in rows:
        print("| %s | %s | %.0f | %.1f%% | %.1f | %.3f |" % (model, name, rate, 100 * share, 1000 * wait, cpu))


if __name__ == "__main__":
    sys.exit(main())
