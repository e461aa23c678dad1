"""Semantic segmentation from a VOC layout (issue 23): JPEGImages + SegmentationClass
(palette PNGs, VOC's colour map) + an ImageSets list; and the same samples as
WebDataset shards, `.jpg` + `.seg.png` (palette) or `.mask.png` (gray) members.

Real photographs get filled rectangles of saturated colours, and their masks the
rectangles' classes. After crops, flips and a letterbox, each class must cover its
colour's pixels (IoU >= 0.75), and where no source pixel lands the mask holds the
ignore index (255).
"""
import io
import os
import tarfile

import numpy as np
from PIL import Image

COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0)]


def voc_palette():
    pal = []
    for i in range(256):
        r = g = b = 0
        c = i
        for j in range(8):
            r |= ((c >> 0) & 1) << (7 - j)
            g |= ((c >> 1) & 1) << (7 - j)
            b |= ((c >> 2) & 1) << (7 - j)
            c >>= 3
        pal += [r, g, b]
    return pal


def make_voc(sample_data, root, n=6):
    for d in ("JPEGImages", "SegmentationClass", "ImageSets/Segmentation"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    classes = sorted(c for c in os.listdir(sample_data) if os.path.isdir(os.path.join(sample_data, c)))
    stems = []
    for i in range(n):
        d = os.path.join(sample_data, classes[i % len(classes)])
        photo = Image.open(os.path.join(d, sorted(os.listdir(d))[i // len(classes)])).convert("RGB")
        photo = Image.blend(photo, photo.convert("L").convert("RGB"), 0.5)
        px = np.array(photo)
        mask = np.zeros(px.shape[:2], np.uint8)
        h, w = mask.shape
        rng = np.random.RandomState(i)
        for k in range(4):  # one rectangle in each quadrant, 8 pixels from its edges
            qx, qy = (k % 2) * w // 2, (k // 2) * h // 2
            bw, bh = rng.randint(w // 8, w // 4), rng.randint(h // 8, h // 4)
            x, y = qx + 8 + rng.randint(0, w // 2 - bw - 16), qy + 8 + rng.randint(0, h // 2 - bh - 16)
            px[y:y + bh, x:x + bw] = COLOURS[k]
            mask[y:y + bh, x:x + bw] = k + 1
        stem = "2007_%06d" % i
        Image.fromarray(px).save(os.path.join(root, "JPEGImages", stem + ".jpg"), quality=98)
        m = Image.fromarray(mask, mode="P")
        m.putpalette(voc_palette())
        m.save(os.path.join(root, "SegmentationClass", stem + ".png"))
        stems.append(stem)
    with open(os.path.join(root, "ImageSets/Segmentation/train.txt"), "w") as f:
        f.write("\n".join(stems) + "\n")
    return {"format": "segmentation", "images": os.path.join(root, "JPEGImages"),
            "masks": os.path.join(root, "SegmentationClass"),
            "list": os.path.join(root, "ImageSets/Segmentation/train.txt")}


def check_masks_follow(loader, n, epochs):
    checked = 0
    seen = []
    batches = [b for _ in range(epochs) for b in loader]  # one epoch per iteration, as DataLoader
    for images, targets in batches:
        for img, t in zip(images, targets):
            sem = t["semantic"].numpy()
            assert sem.shape == img.shape[:2]
            assert set(np.unique(sem)) <= {0, 1, 2, 3, 4, 255}
            x = img.numpy().astype(np.int32)
            for k, c in enumerate(COLOURS):
                pix = np.all(np.abs(x - np.array(c)) <= 60, axis=2)
                if pix.sum() < 150:
                    continue
                ys, xs = np.nonzero(pix)
                if xs.max() - xs.min() < 8 or ys.max() - ys.min() < 8:
                    continue
                cls = sem == k + 1
                iou = (cls & pix).sum() / max(1, (cls | pix).sum())
                assert iou >= 0.75, "image %s class %d IoU %.3f" % (t.get("image_id", t.get("meta")), k + 1, iou)
                checked += 1
            seen.append(t.get("image_id", t.get("meta")))
    assert len(seen) == n * epochs
    assert checked >= epochs * n * 4 // 3
    return seen


PIPELINE = {"ops": [{"op": "random_resized_crop", "size": 160, "scale": [0.3, 1.0]}, {"op": "hflip"},
                    {"op": "random_rotation", "degrees": 10}]}


def test_voc_masks_follow_their_images(ferry, sample_data, tmp_path):
    data = make_voc(sample_data, str(tmp_path))
    loader = ferry.Loader(data=data, pipeline=PIPELINE, batch_size=3, epochs=2, threads=2,
                          drop_last=False, targets=("semantic", "image_id"))
    check_masks_follow(loader, 6, 2)


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_webdataset_masks_follow_their_images(ferry, sample_data, tmp_path):
    """.jpg + .seg.png (palette) in one shard, .jpg + .mask.png (gray) in the other, each
    with a .json naming the sample: every mask arrives with its own image, once per epoch."""
    voc = make_voc(sample_data, str(tmp_path / "voc"), n=8)
    stems = open(voc["list"]).read().split()
    for s in range(2):
        with tarfile.open(str(tmp_path / ("seg-%d.tar" % s)), "w") as tar:
            for stem in stems[s * 4:(s + 1) * 4]:
                _add(tar, stem + ".jpg", open(os.path.join(voc["images"], stem + ".jpg"), "rb").read())
                png = os.path.join(voc["masks"], stem + ".png")
                if s == 0:
                    _add(tar, stem + ".seg.png", open(png, "rb").read())
                else:  # the class indices as a gray PNG
                    buf = io.BytesIO()
                    Image.fromarray(np.array(Image.open(png))).save(buf, format="PNG")
                    _add(tar, stem + ".mask.png", buf.getvalue())
                _add(tar, stem + ".json", ('"%s"' % stem).encode())
    loader = ferry.Loader(data=str(tmp_path / "seg-{0..1}.tar"), pipeline=PIPELINE, batch_size=3, epochs=2,
                          threads=2, drop_last=False, targets=("semantic", "meta"))
    seen = check_masks_follow(loader, 8, 2)
    assert sorted(seen) == sorted(stems * 2)


def test_where_no_pixel_lands_the_mask_says_ignore(ferry, sample_data, tmp_path):
    data = make_voc(sample_data, str(tmp_path), n=3)
    loader = ferry.Loader(data=data, pipeline={"ops": [{"op": "letterbox", "size": 128, "fill": 114}]},
                          batch_size=3, epochs=1, targets=("semantic",))
    (images, targets), = list(loader)
    for img, t in zip(images, targets):
        sem = t["semantic"].numpy()
        fill = np.all(img.numpy() == 114, axis=2)
        # The letterbox: rows (landscape photos) or columns (portrait) wholly of fill.
        border = fill.all(axis=1)[:, None] | fill.all(axis=0)[None, :]
        assert border.any()  # the photos are not square
        assert (sem[border] == 255).all()
        assert (sem[~border] != 255).all()
