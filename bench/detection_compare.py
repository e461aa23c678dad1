#!/usr/bin/python3
"""A detection input pipeline, images per CPU-second, Ferry against torchvision, in one run.

The corpus: COCO-like photographs of about 640 pixels (the sample ImageFolder's photos
scaled so that their longer side is 640, JPEG quality 90), 3 to 12 boxes each, written
as a COCO instances file. The steps are torchvision's large-scale-jitter preset
(references/detection/presets.py "lsj") at 640: ScaleJitter(target (640, 640), scale
0.1 to 2.0), FixedSizeCrop(640, fill 0), RandomHorizontalFlip, uint8 tensors, with the
boxes moved by each step.

  torchvision  a CocoDetection-style Dataset (PIL decode, the instances' boxes as XYXY
               tensors) with the reference's ScaleJitter, FixedSizeCrop and
               RandomHorizontalFlip written out below step by step (they are not in the
               torchvision package), PILToTensor; DataLoader(num_workers=0), one torch
               thread, collate_fn as the reference's (images stacked: they are one size);
  ferry local  ferry.Loader(data={"format": "coco", ...}, targets=("boxes", "labels"),
               threads=1) with scale_jitter, fixed_size_crop and hflip.

CPU time is user + system of this process. Prints a Markdown table and the ratio.

  /usr/bin/python3 bench/detection_compare.py --data data/sample --build build [--batches 20]
"""
import argparse
import json
import os
import random
import resource
import sys
import tempfile
import time


def own_cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def measure(iterable, batches, warmup):
    it = iter(iterable)
    for _ in range(warmup):
        next(it)
    cpu0 = own_cpu()
    t0 = time.perf_counter()
    images = boxes = 0
    for _ in range(batches):
        x, targets = next(it)
        images += x.shape[0]
        boxes += sum(len(t["boxes"]) for t in targets)
    return images, boxes, own_cpu() - cpu0, time.perf_counter() - t0


def make_corpus(sample, root, n, seed=0):
    """n photos scaled to a longer side of 640 and random boxes, as a COCO instances file."""
    from PIL import Image
    rng = random.Random(seed)
    photos = []
    for c in sorted(os.listdir(sample)):
        d = os.path.join(sample, c)
        if os.path.isdir(d):
            photos += [os.path.join(d, f) for f in sorted(os.listdir(d))]
    rng.shuffle(photos)
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    images, anns = [], []
    for i, path in enumerate(photos[:n]):
        im = Image.open(path).convert("RGB")
        s = 640.0 / max(im.size)
        im = im.resize((max(1, round(im.width * s)), max(1, round(im.height * s))), Image.BILINEAR)
        name = "%06d.jpg" % i
        im.save(os.path.join(root, "images", name), quality=90)
        images.append({"id": i + 1, "file_name": name, "width": im.width, "height": im.height})
        for _ in range(rng.randint(3, 12)):
            w = rng.uniform(16, im.width / 2)
            h = rng.uniform(16, im.height / 2)
            x = rng.uniform(0, im.width - w)
            y = rng.uniform(0, im.height - h)
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": rng.randint(1, 80),
                         "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0})
    cats = [{"id": k, "name": str(k)} for k in range(1, 81)]
    with open(os.path.join(root, "instances.json"), "w") as f:
        json.dump({"images": images, "annotations": anns, "categories": cats}, f)
    return {"format": "coco", "annotations": os.path.join(root, "instances.json"),
            "images": os.path.join(root, "images")}


def torchvision_loader(data, batch_size, size):
    """The reference's LSJ steps on PIL images (references/detection/transforms.py)."""
    import torch
    import torchvision.transforms.functional as F
    from PIL import Image

    with open(data["annotations"]) as f:
        coco = json.load(f)
    by_image = {}
    for a in coco["annotations"]:
        by_image.setdefault(a["image_id"], []).append(a)
    images = sorted(coco["images"], key=lambda im: im["id"])

    class CocoLike(torch.utils.data.Dataset):
        def __len__(self):
            return len(images)

        def __getitem__(self, i):
            im = images[i]
            img = Image.open(os.path.join(data["images"], im["file_name"])).convert("RGB")
            anns = by_image.get(im["id"], [])
            boxes = torch.tensor([a["bbox"] for a in anns], dtype=torch.float32).reshape(-1, 4)
            boxes[:, 2:] += boxes[:, :2]
            target = {"boxes": boxes, "labels": torch.tensor([a["category_id"] for a in anns], dtype=torch.int64)}
            # ScaleJitter(target_size=(size, size), scale_range=(0.1, 2.0))
            w, h = img.size
            scale = 0.1 + torch.rand(1).item() * (2.0 - 0.1)
            r = min(size / h, size / w) * scale
            nw, nh = int(w * r), int(h * r)
            img = F.resize(img, [nh, nw])
            target["boxes"][:, 0::2] *= nw / w
            target["boxes"][:, 1::2] *= nh / h
            # FixedSizeCrop(size=(size, size), fill=0)
            ch, cw = min(nh, size), min(nw, size)
            top = left = 0
            if ch != nh or cw != nw:
                rr = torch.rand(1).item()
                top, left = int(max(nh - size, 0) * rr), int(max(nw - size, 0) * rr)
            img = F.crop(img, top, left, ch, cw)
            b = target["boxes"]
            b[:, 0::2] -= left
            b[:, 1::2] -= top
            b[:, 0::2].clamp_(min=0, max=cw)
            b[:, 1::2].clamp_(min=0, max=ch)
            keep = (b[:, 0] < b[:, 2]) & (b[:, 1] < b[:, 3])
            target = {"boxes": b[keep], "labels": target["labels"][keep]}
            if ch < size or cw < size:
                img = F.pad(img, [0, 0, size - cw, size - ch], fill=0)
            # RandomHorizontalFlip(0.5)
            if torch.rand(1) < 0.5:
                img = F.hflip(img)
                b = target["boxes"]
                b[:, [0, 2]] = size - b[:, [2, 0]]
            return F.pil_to_tensor(img), target

    def collate(batch):
        imgs, targets = zip(*batch)
        return torch.stack(imgs), list(targets)

    return torch.utils.data.DataLoader(CocoLike(), batch_size=batch_size, shuffle=True, num_workers=0,
                                       drop_last=True, collate_fn=collate)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="the sample ImageFolder (bench/setup.sh builds it)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--images", type=int, default=160)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--size", type=int, default=640)
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import torch
    import ferry

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as work:
        data = make_corpus(args.data, work, args.images)
        rows = []
        tv = torchvision_loader(data, args.batch_size, args.size)

        def forever(loader):
            while True:
                yield from loader

        rows.append(("torchvision (reference LSJ steps, num_workers=0)",) + measure(forever(tv), args.batches, 2))
        pipeline = {"ops": [{"op": "scale_jitter", "target_size": [args.size, args.size], "scale_range": [0.1, 2.0]},
                            {"op": "fixed_size_crop", "size": args.size, "fill": 0}, {"op": "hflip"}]}
        local = ferry.Loader(data=data, pipeline=pipeline, batch_size=args.batch_size, threads=1, epochs=None,
                             targets=("boxes", "labels"))
        rows.append(("ferry.Loader, local (threads=1)",) + measure(forever(local), args.batches, 2))
        local.close()

    print("| loader | images | boxes | CPU s | wall s | img per CPU-s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, images, boxes, cpu, wall in rows:
        print("| %s | %d | %d | %.2f | %.2f | %.1f |" % (name, images, boxes, cpu, wall, images / cpu))
    base = rows[0][1] / rows[0][3]
    print()
    print("detection_compare local_vs_torchvision=%.2f" % (rows[1][1] / rows[1][3] / base))


if __name__ == "__main__":
    main()
