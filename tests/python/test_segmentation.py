"""Semantic segmentation from a VOC layout (issue 23): JPEGImages + SegmentationClass
(palette PNGs, VOC's colour map) + an ImageSets list.

Real photographs get filled rectangles of saturated colours, and their masks the
rectangles' classes. After crops, flips and a letterbox, each class must cover its
colour's pixels (IoU >= 0.75), and where no source pixel lands the mask holds the
ignore index (255).
"""
import os

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


def test_voc_masks_follow_their_images(ferry, sample_data, tmp_path):
    data = make_voc(sample_data, str(tmp_path))
    pipeline = {"ops": [{"op": "random_resized_crop", "size": 160, "scale": [0.3, 1.0]}, {"op": "hflip"},
                        {"op": "random_rotation", "degrees": 10}]}
    loader = ferry.Loader(data=data, pipeline=pipeline, batch_size=3, epochs=2, threads=2,
                          targets=("semantic", "image_id"))
    checked = 0
    for images, targets in loader:
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
                assert iou >= 0.75, "image %d class %d IoU %.3f" % (t["image_id"], k + 1, iou)
                checked += 1
    assert checked >= 2 * 6 * 4 // 3


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
