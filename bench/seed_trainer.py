"""The seed experiment's trainer (bench/seed_experiment.py): a CPU-bound training loop
pinned to one core. Each step does a fixed amount of CPU work (--work-ms of this
thread's CPU time, a stand-in for the host's share of a training step: the data-loader
process, the optimizer, the CUDA launch thread) on a batch from ferry.Loader, in-process
(--threads decode threads, on the same core) or from a dispatcher. Prints one JSON line:
step time, input wait (time blocked in the loader), batches and samples per second, over
--seconds after --warmup.

--python-transforms: the seed experiment as PyTorch users ran it, preprocessing-heavy
in Python: a Dataset of this script's own that opens each photograph with PIL and runs
torchvision's transforms on it (and a step of its own), read in-process by torch's
DataLoader with --threads worker processes (on the trainer's core), or shipped to the
dispatcher's workers (started with --allow-user-code) with ferry.Loader(dataset=...)."""
import argparse
import json
import os
import sys
import time

ap = argparse.ArgumentParser()
ap.add_argument("--python-dir", required=True)
ap.add_argument("--data", required=True)
ap.add_argument("--dispatcher")
ap.add_argument("--job", default="seed")
ap.add_argument("--threads", type=int, default=1, help="in-process decode threads")
ap.add_argument("--batch-size", type=int, default=32)
ap.add_argument("--work-ms", type=float, default=60)
ap.add_argument("--cpu", type=int, default=0)
ap.add_argument("--warmup", type=float, default=5)
ap.add_argument("--seconds", type=float, default=15)
ap.add_argument("--python-transforms", action="store_true")
a = ap.parse_args()
os.sched_setaffinity(0, {a.cpu})  # before the loader starts its threads: they inherit it
sys.path.insert(0, a.python_dir)
import ferry  # noqa: E402



class PhotoDataset:
    """The script's own Dataset: photographs by path, opened with PIL."""

    def __init__(self, files, transform):
        self.files, self.transform = files, transform

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image
        with Image.open(self.files[i]) as im:
            img = im.convert("RGB")
        return self.transform(img), int(os.path.basename(os.path.dirname(self.files[i]))[-2:])


def dim_edges(x):
    """A step of the script's own, in Python: darkens a 16-pixel border."""
    x = x.clone()
    x[:, :16, :] *= 0.8
    x[:, -16:, :] *= 0.8
    return x


if a.python_transforms:
    import torch
    import torchvision.transforms as T
    files = sorted(os.path.join(r, f) for r, _, fs in os.walk(a.data) for f in fs if f.endswith(".jpg"))
    ds = PhotoDataset(files, T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(), dim_edges,
                                        T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])]))
    torch.set_num_threads(1)
    if a.dispatcher:
        loader = ferry.Loader(dataset=ds, batch_size=a.batch_size, epochs=None, dispatcher=a.dispatcher,
                              job_name=a.job)
    else:
        loader = torch.utils.data.DataLoader(ds, batch_size=a.batch_size, shuffle=True, num_workers=a.threads,
                                             persistent_workers=True, prefetch_factor=2)
else:
    kw = dict(data=a.data, pipeline="imagenet-train", batch_size=a.batch_size, epochs=None)
    if a.dispatcher:
        kw.update(dispatcher=a.dispatcher, job_name=a.job)
    else:
        kw.update(threads=a.threads)
    loader = ferry.Loader(**kw)


def work(ms):
    end = time.thread_time() + ms / 1000
    x = 0
    while time.thread_time() < end:
        for i in range(200):
            x += i * i
    return x


start = time.monotonic()
t0 = None
wait = steps = samples = 0
done = False
while not done:
    it = iter(loader)
    while True:
        w0 = time.monotonic()
        try:
            x, y = next(it)
        except StopIteration:
            break
        waited = time.monotonic() - w0
        now = time.monotonic()
        if t0 is None and now - start >= a.warmup:
            t0 = now
        elif t0 is not None:
            wait += waited
            steps += 1
            samples += y.shape[0]
            if now - t0 >= a.seconds:
                done = True
                break
        work(a.work_ms)
elapsed = time.monotonic() - t0
if hasattr(loader, "close"):
    loader.close()
print(json.dumps({"step_ms": 1000 * elapsed / steps, "input_wait": wait / elapsed, "steps_per_s": steps / elapsed,
                  "samples_per_s": samples / elapsed, "steps": steps}), flush=True)
