#!/usr/bin/env python3
"""Decode speed by image format: the same photographs as JPEG, PNG and WebP (and the
JPEG at its full size vs a 224 output, where Ferry decodes at a DCT scale), each read,
decoded and resized to 224 x 224 by Ferry and by torchvision (PIL) in this run, in
images per CPU-second of this process (one decode thread each, so that the figures are
per core). Ferry decodes JPEG with libjpeg-turbo and every other format with OpenCV's
codecs (libpng, libwebp); torchvision with PIL.

    /usr/bin/python3 bench/format_bench.py --data data/sample --build build

Prints one row per format and the ratio Ferry / torchvision.
"""
import argparse
import os
import resource
import shutil
import sys
import tempfile
import time


def own_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def make_trees(sample, root, n):
    """n photos, longer side 640 (COCO-like), as three ImageFolder trees of one class each."""
    from PIL import Image
    photos = []
    for c in sorted(os.listdir(sample)):
        d = os.path.join(sample, c)
        if os.path.isdir(d):
            photos += [os.path.join(d, f) for f in sorted(os.listdir(d))]
    photos = photos[:n]
    for fmt, ext, kw in (("JPEG", "jpg", {"quality": 90}), ("PNG", "png", {"compress_level": 6}),
                         ("WEBP", "webp", {"quality": 90})):
        d = os.path.join(root, ext, "c0")
        os.makedirs(d)
        for i, p in enumerate(photos):
            img = Image.open(p).convert("RGB")
            s = 640 / max(img.size)
            img = img.resize((max(1, round(img.width * s)), max(1, round(img.height * s))), Image.BILINEAR)
            img.save(os.path.join(d, "%05d.%s" % (i, ext)), fmt, **kw)
    return len(photos)


def run(loader, passes):
    cpu0, t0, n = own_cpu(), time.perf_counter(), 0
    for _ in range(passes):
        for images, _ in loader:
            n += images.shape[0]
    return n, own_cpu() - cpu0, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="data/sample")
    ap.add_argument("--build", default="build")
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--passes", type=int, default=3)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import ferry
    import torch
    import torchvision
    from torchvision import transforms as T
    torch.set_num_threads(1)
    root = tempfile.mkdtemp(prefix="ferry-formats-")
    try:
        n = make_trees(args.data, root, args.images)
        sizes = {ext: sum(os.path.getsize(os.path.join(root, ext, "c0", f))
                          for f in os.listdir(os.path.join(root, ext, "c0"))) for ext in ("jpg", "png", "webp")}
        print("%d photos, longer side 640; %d passes each; one decode thread" % (n, args.passes))
        print("%-6s %9s %14s %16s %7s" % ("format", "MB", "ferry img/cpu-s", "torchvision img/cpu-s", "ratio"))
        pipeline = {"ops": [{"op": "resize", "size": [224, 224]}]}
        tv_t = T.Compose([T.Resize((224, 224)), T.PILToTensor()])
        for ext in ("jpg", "png", "webp"):
            tree = os.path.join(root, ext)
            fl = ferry.Loader(data=tree, pipeline=pipeline, batch_size=32, threads=1, shuffle=False,
                              drop_last=False, epochs=None)
            run(fl, 1)  # warm-up (page cache, arenas)
            fn, fc, _ = run(fl, args.passes)
            tv = torch.utils.data.DataLoader(torchvision.datasets.ImageFolder(tree, transform=tv_t), batch_size=32,
                                             num_workers=0)
            run(tv, 1)
            tn, tc, _ = run(tv, args.passes)
            print("%-6s %9.1f %14.0f %16.0f %7.2f" % (ext, sizes[ext] / 1e6, fn / fc, tn / tc, (fn / fc) / (tn / tc)))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
