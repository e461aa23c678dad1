"""Detection targets through the Python loader (issue 23).

A COCO dataset is made of real photographs (the sample ImageFolder), desaturated, with
filled rectangles of distinct saturated colours painted in and written as COCO
annotations (bbox and polygon). After the pipeline's crops and flips, each image's
boxes must bound their colour's pixels (IoU >= 0.8) and each mask cover them (IoU >=
0.75), every colour still visible must have its box, and every image must come once
per epoch: in process, and through a dispatcher with two workers. A torchvision
detection model then trains a few steps on Ferry's batches through a dispatcher.
"""
import json
import os

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

COLOURS = [(255, 0, 0), (0, 255, 0), (0, 0, 255), (255, 255, 0), (255, 0, 255), (0, 255, 255)]
PIPELINE = {"ops": [{"op": "random_resized_crop", "size": 192, "scale": [0.3, 1.0]}, {"op": "hflip"}]}
TARGETS = ("boxes", "labels", "masks", "image_id")


def _photos(sample_data, n):
    classes = sorted(d for d in os.listdir(sample_data) if os.path.isdir(os.path.join(sample_data, d)))
    out = []
    for c in classes:
        files = sorted(os.listdir(os.path.join(sample_data, c)))
        if files:
            out.append(os.path.join(sample_data, c, files[0]))
    assert len(out) >= n
    return out[:n]


def make_coco(sample_data, root, n=8):
    """n painted photos and their instances.json; image i has id 100 + 3 i, shape k the
    category 10 (k + 1). Returns the data dict and the ids in listing order."""
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    images, anns = [], []
    for i, path in enumerate(_photos(sample_data, n)):
        photo = Image.open(path).convert("RGB")
        gray = photo.convert("L").convert("RGB")
        photo = Image.blend(photo, gray, 0.5)  # no photo pixel near a painted colour
        w, h = photo.size
        draw = ImageDraw.Draw(photo)
        rng = np.random.RandomState(i)
        taken = []
        for k in range(4):
            for _ in range(500):
                bw, bh = int(rng.randint(w // 8, w // 4)), int(rng.randint(h // 8, h // 4))
                x, y = int(rng.randint(0, w - bw)), int(rng.randint(0, h - bh))
                if all(x + bw + 8 <= tx or tx + tw + 8 <= x or y + bh + 8 <= ty or ty + th + 8 <= y
                       for tx, ty, tw, th in taken):
                    break
            else:
                raise AssertionError("no room for shape %d" % k)
            taken.append((x, y, bw, bh))
            draw.rectangle([x, y, x + bw - 1, y + bh - 1], fill=COLOURS[k])  # pixels [x, x + bw)
            anns.append({"id": len(anns) + 1, "image_id": 100 + 3 * i, "category_id": 10 * (k + 1),
                         "bbox": [x, y, bw, bh], "area": bw * bh, "iscrowd": 0,
                         "segmentation": [[x, y, x + bw, y, x + bw, y + bh, x, y + bh]]})
        name = "img_%02d.jpg" % i
        photo.save(os.path.join(root, "images", name), quality=98)
        images.append({"id": 100 + 3 * i, "file_name": name, "width": w, "height": h})
    cats = [{"id": 10 * (k + 1), "name": "colour%d" % k} for k in range(len(COLOURS))]
    with open(os.path.join(root, "instances.json"), "w") as f:
        json.dump({"images": images, "annotations": anns, "categories": cats}, f)
    data = {"format": "coco", "annotations": os.path.join(root, "instances.json"),
            "images": os.path.join(root, "images")}
    return data, [im["id"] for im in images]


def _iou_box(a, b):
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def check_targets(image, t, what):
    """image: uint8 [H, W, 3]; t: one row's targets. Returns the colours checked."""
    img = image.numpy().astype(np.int32)
    labels = t["labels"].tolist()
    checked = 0
    for k in range(4):
        pix = np.all(np.abs(img - np.array(COLOURS[k])) <= 60, axis=2)
        ys, xs = np.nonzero(pix)
        if len(xs) < 150:
            continue
        bound = (xs.min(), ys.min(), xs.max() + 1, ys.max() + 1)
        if bound[2] - bound[0] < 8 or bound[3] - bound[1] < 8:
            continue  # a sliver at a crop's edge: one blended row is a third of it
        checked += 1
        assert 10 * (k + 1) in labels, "%s: colour %d shows %d pixels but has no box" % (what, k, len(xs))
        i = labels.index(10 * (k + 1))
        box = t["boxes"][i].tolist()
        assert _iou_box(box, bound) >= 0.8, "%s: colour %d box %s vs pixels %s" % (what, k, box, bound)
        mask = t["masks"][i].numpy() != 0
        iou = (mask & pix).sum() / max(1, (mask | pix).sum())
        assert iou >= 0.75, "%s: colour %d mask IoU %.3f" % (what, k, iou)
    return checked


def _run_epochs(loader, ids, epochs):
    seen = {}
    checked = 0
    for epoch in range(epochs):
        seen[epoch] = []
        for images, targets in loader:
            assert isinstance(targets, list) and len(targets) == images.shape[0]
            for r, t in enumerate(targets):
                if t["image_id"] < 0:
                    continue  # a padding row
                seen[epoch].append(t["image_id"])
                assert t["boxes"].dtype == torch.float32 and t["boxes"].shape[1:] == (4,)
                assert t["labels"].dtype == torch.int64 and t["labels"].shape == t["boxes"].shape[:1]
                assert t["masks"].dtype == torch.uint8 and t["masks"].shape[1:] == images.shape[1:3]
                checked += check_targets(images[r], t, "epoch %d image %d" % (epoch, t["image_id"]))
    for epoch, got in seen.items():
        assert sorted(got) == sorted(ids), "epoch %d: %s" % (epoch, sorted(got))  # each image once
    return checked


def test_coco_targets_follow_crops_and_flips_in_process(ferry, sample_data, tmp_path):
    data, ids = make_coco(sample_data, str(tmp_path))
    loader = ferry.Loader(data=data, pipeline=PIPELINE, batch_size=3, epochs=2, threads=2, drop_last=False,
                          targets=TARGETS)
    checked = _run_epochs(loader, ids, 2)
    assert checked >= 2 * len(ids) * 4 // 3
    assert loader.skipped() == []


def test_padded_targets_have_static_shapes(ferry, sample_data, tmp_path):
    data, ids = make_coco(sample_data, str(tmp_path), n=5)
    as_list = ferry.Loader(data=data, pipeline=PIPELINE, batch_size=5, epochs=1, threads=1, targets=TARGETS)
    padded = ferry.Loader(data=data, pipeline=PIPELINE, batch_size=5, epochs=1, threads=1, targets=TARGETS,
                          targets_format="padded")
    (images, rows), = list(as_list)
    (images2, t), = list(padded)
    assert torch.equal(images, images2)
    n = max(len(r["boxes"]) for r in rows)
    assert t["boxes"].shape == (5, n, 4) and t["labels"].shape == (5, n)
    assert t["masks"].shape == (5, n) + tuple(images.shape[1:3])
    assert t["counts"].tolist() == [len(r["boxes"]) for r in rows]
    for i, r in enumerate(rows):
        c = len(r["boxes"])
        assert torch.equal(t["boxes"][i, :c], r["boxes"]) and bool((t["boxes"][i, c:] == 0).all())
        assert torch.equal(t["labels"][i, :c], r["labels"]) and bool((t["labels"][i, c:] == -1).all())
        assert int(t["image_id"][i]) == r["image_id"]


def test_coco_targets_through_a_dispatcher_with_two_workers(ferry, sample_data, tmp_path, daemons):
    data, ids = make_coco(sample_data, str(tmp_path / "coco"))
    loader = ferry.Loader(data=data, pipeline=PIPELINE, batch_size=2, epochs=2, dispatcher=daemons.dispatcher,
                          job_name="coco-targets", drop_last=False, targets=TARGETS, batches_per_split=1)
    checked = _run_epochs(loader, ids, 2)
    assert checked >= 2 * len(ids) * 4 // 3


def test_targets_need_annotations_and_known_names(ferry, small_tree):
    with pytest.raises(ValueError, match="unknown field"):
        ferry.Loader(data=small_tree, targets=("boxes", "captions"))
    loader = ferry.Loader(data=small_tree, pipeline=PIPELINE, batch_size=2, targets=("boxes",))
    with pytest.raises(Exception, match="has no annotations"):
        next(iter(loader))


def test_a_detection_model_trains_on_ferry_batches_through_a_dispatcher(ferry, sample_data, tmp_path, daemons):
    """torchvision's Faster R-CNN (its RPN, RoI heads and losses) on a small backbone, so
    that a step takes a second on a CI core (the mobilenet_v3 FPN model takes 40 s a
    step with Debian's CPU torch), fed (images, targets) by Ferry through a dispatcher
    exactly as the detection reference script feeds it."""
    pytest.importorskip("torchvision")
    from torch import nn
    from torchvision.models.detection import FasterRCNN
    from torchvision.models.detection.anchor_utils import AnchorGenerator

    data, _ = make_coco(sample_data, str(tmp_path / "coco"), n=6)
    pipeline = {"ops": [{"op": "random_resized_crop", "size": 256, "scale": [0.5, 1.0]}, {"op": "hflip"},
                        {"op": "sanitize_boxes", "min_size": 2}]}
    loader = ferry.Loader(data=data, pipeline=pipeline, batch_size=2, epochs=1, dispatcher=daemons.dispatcher,
                          job_name="coco-train", targets=("boxes", "labels"))
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                             nn.Conv2d(32, 32, 3, 2, 1), nn.ReLU())
    backbone.out_channels = 32
    model = FasterRCNN(backbone, num_classes=61, min_size=256, max_size=256,
                       rpn_anchor_generator=AnchorGenerator(((16, 32, 64, 128),), ((0.5, 1.0, 2.0),)),
                       rpn_pre_nms_top_n_train=200, rpn_post_nms_top_n_train=100, box_batch_size_per_image=64,
                       representation_size=128)
    model.train()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    steps = 0
    for images, targets in loader:
        inputs = [img.permute(2, 0, 1).float() / 255 for img in images]
        losses = model(inputs, [{"boxes": t["boxes"], "labels": t["labels"]} for t in targets])
        assert set(losses) == {"loss_classifier", "loss_box_reg", "loss_objectness", "loss_rpn_box_reg"}
        loss = sum(losses.values())
        assert torch.isfinite(loss), losses
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    assert steps == 3
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters()))
