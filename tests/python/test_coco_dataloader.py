"""ferry.DataLoader as the drop-in for the detection reference's COCO loading (issue 23).

The dataset is torchvision.datasets.CocoDetection (through the reference's subclass
pattern: the target handed to the joint transforms is {"image_id", "annotations"}),
with transforms written here after the reference's presets (class names and
attributes as in references/detection: ConvertCocoPolysToMask first), and the
reference's collate_fn=lambda batch: tuple(zip(*batch)). The "hflip" preset (sizes
kept) must give what torchvision's own DataLoader gives, image for image: the same
sizes, pixels within JPEG decoder noise, the same boxes, labels, ids, areas and crowd
flags, and masks that agree (IoU >= 0.9). The "lsj" preset is checked from the pixels
(painted shapes, test_detection's rule), and transforms Ferry cannot batch are refused
by name. pycocotools (which CocoDetection needs; Debian has none) is installed from
PyPI into a folder for the test when missing; the tests skip when that cannot be done.
"""
import fcntl
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image

from test_detection import check_targets, make_coco


def _pycocotools():
    try:
        import pycocotools  # noqa: F401
        return True
    except ImportError:
        pass
    target = os.environ.get("FERRY_PYDEPS", "/tmp/ferry-pydeps")
    os.makedirs(target, exist_ok=True)
    # Every pytest-xdist process imports this module: one installs, the others wait.
    with open(os.path.join(target, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        installed = _pip_install(target)
    if not installed:
        return False
    sys.path.insert(0, target)
    try:
        import pycocotools  # noqa: F401
        return True
    except ImportError:
        return False


def _pip_install(target):
    if not os.path.isdir(os.path.join(target, "pycocotools")):
        try:
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--only-binary=:all:",
                            "--target", target, "pycocotools"], check=True, timeout=180,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except Exception:
            return False
    return True


if not _pycocotools():
    pytest.skip("pycocotools is not installed and could not be installed from PyPI", allow_module_level=True)

from pycocotools import mask as coco_mask  # noqa: E402


# -- the reference's pieces, as a detection script carries them ---------------------------

class CocoDetection(torchvision.datasets.CocoDetection):
    """The reference's coco_utils.CocoDetection pattern: joint transforms over
    (image, {"image_id", "annotations"})."""

    def __init__(self, img_folder, ann_file, transforms):
        super().__init__(img_folder, ann_file)
        self._transforms = transforms

    def __getitem__(self, idx):
        img, target = super().__getitem__(idx)
        target = dict(image_id=self.ids[idx], annotations=target)
        if self._transforms is not None:
            img, target = self._transforms(img, target)
        return img, target


class ConvertCocoPolysToMask:
    def __call__(self, image, target):
        w, h = image.size
        anno = [obj for obj in target["annotations"] if obj.get("iscrowd", 0) == 0]
        boxes = torch.as_tensor([obj["bbox"] for obj in anno], dtype=torch.float32).reshape(-1, 4)
        boxes[:, 2:] += boxes[:, :2]
        boxes[:, 0::2].clamp_(min=0, max=w)
        boxes[:, 1::2].clamp_(min=0, max=h)
        masks = []
        for obj in anno:
            rles = coco_mask.frPyObjects(obj["segmentation"], h, w)
            m = coco_mask.decode(rles)
            masks.append(torch.as_tensor(m.any(axis=2) if m.ndim == 3 else m, dtype=torch.uint8))
        masks = torch.stack(masks) if masks else torch.zeros((0, h, w), dtype=torch.uint8)
        keep = (boxes[:, 3] > boxes[:, 1]) & (boxes[:, 2] > boxes[:, 0])
        out = {"boxes": boxes[keep], "labels": torch.tensor([o["category_id"] for o in anno], dtype=torch.int64)[keep],
               "masks": masks[keep], "image_id": torch.tensor([target["image_id"]]),
               "area": torch.tensor([o["area"] for o in anno], dtype=torch.float32)[keep],
               "iscrowd": torch.tensor([o.get("iscrowd", 0) for o in anno], dtype=torch.int64)[keep]}
        return image, out


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, image, target):
        for t in self.transforms:
            image, target = t(image, target)
        return image, target


class RandomHorizontalFlip(torchvision.transforms.RandomHorizontalFlip):
    def forward(self, image, target):
        if torch.rand(1) < self.p:
            image = torchvision.transforms.functional.hflip(image)
            w = image.shape[-1] if isinstance(image, torch.Tensor) else image.size[0]
            target["boxes"][:, [0, 2]] = w - target["boxes"][:, [2, 0]]
            target["masks"] = target["masks"].flip(-1)
        return image, target


class PILToTensor(torch.nn.Module):
    def forward(self, image, target):
        return torchvision.transforms.functional.pil_to_tensor(image), target


class ConvertImageDtype(torch.nn.Module):
    def __init__(self, dtype):
        super().__init__()
        self.dtype = dtype

    def forward(self, image, target):
        return torchvision.transforms.functional.convert_image_dtype(image, self.dtype), target


class _Named(torch.nn.Module):
    """The reference's ScaleJitter / FixedSizeCrop / RandomShortestSize / RandomIoUCrop,
    by their attributes: Ferry runs its own ops for them."""

    def forward(self, image, target):
        raise NotImplementedError("run by Ferry only in these tests")


class ScaleJitter(_Named):
    def __init__(self, target_size, scale_range=(0.1, 2.0), interpolation=2):
        super().__init__()
        self.target_size, self.scale_range, self.interpolation = target_size, scale_range, interpolation


class FixedSizeCrop(_Named):
    def __init__(self, size, fill=0, padding_mode="constant"):
        super().__init__()
        self.crop_height, self.crop_width = size
        self.fill, self.padding_mode = fill, padding_mode


class RandomShortestSize(_Named):
    def __init__(self, min_size, max_size):
        super().__init__()
        self.min_size, self.max_size, self.interpolation = list(min_size), max_size, 2


class RandomIoUCrop(_Named):
    def __init__(self):
        super().__init__()
        self.min_scale, self.max_scale, self.min_aspect_ratio, self.max_aspect_ratio = 0.3, 1.0, 0.5, 2.0
        self.options, self.trials = [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0], 40


class DetectionPresetTrain:
    """The reference's presets.DetectionPresetTrain: a `.transforms` Compose."""

    def __init__(self, ops):
        self.transforms = Compose(ops)

    def __call__(self, img, target):
        return self.transforms(img, target)


def collate_fn(batch):
    return tuple(zip(*batch))


def remove_images_without_annotations(dataset):
    """The reference's _coco_remove_images_without_annotations rule."""
    keep = []
    for i, image_id in enumerate(dataset.ids):
        anno = dataset.coco.loadAnns(dataset.coco.getAnnIds(imgIds=image_id, iscrowd=None))
        if anno and not all(any(o <= 1 for o in obj["bbox"][2:]) for obj in anno):
            keep.append(i)
    return torch.utils.data.Subset(dataset, keep)


# -- the tests ------------------------------------------------------------------------

def _hflip_dataset(data):
    preset = DetectionPresetTrain([RandomHorizontalFlip(p=1.0), PILToTensor(), ConvertImageDtype(torch.float)])
    return CocoDetection(data["images"], data["annotations"], transforms=Compose([ConvertCocoPolysToMask(), preset]))


def test_hflip_preset_gives_what_torchvision_gives(ferry, sample_data, tmp_path):
    data, ids = make_coco(sample_data, str(tmp_path), n=6)
    dataset = _hflip_dataset(data)
    theirs = list(torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=False, collate_fn=collate_fn))
    ours = list(ferry.DataLoader(dataset, batch_size=4, shuffle=False, collate_fn=collate_fn, num_workers=2))
    assert [len(b[0]) for b in ours] == [len(b[0]) for b in theirs] == [4, 2]
    for (their_images, their_targets), (our_images, our_targets) in zip(theirs, ours):
        for a, b, ta, tb in zip(their_images, our_images, their_targets, our_targets):
            assert b.dtype == torch.float32 and b.shape == a.shape, (b.shape, a.shape)
            assert (b - a).abs().mean() < 2.0 / 255, "image %d" % int(ta["image_id"])
            assert set(tb) == set(ta)
            assert tb["image_id"].tolist() == ta["image_id"].tolist()
            assert torch.equal(tb["labels"], ta["labels"])
            assert torch.allclose(tb["boxes"], ta["boxes"], atol=1e-3), (tb["boxes"], ta["boxes"])
            assert torch.equal(tb["area"], ta["area"]) and torch.equal(tb["iscrowd"], ta["iscrowd"])
            assert tb["iscrowd"].dtype == torch.int64 and tb["masks"].shape == ta["masks"].shape
            for m, n in zip(tb["masks"].bool(), ta["masks"].bool()):
                assert (m & n).sum() / (m | n).sum() >= 0.9


def test_the_reference_subset_and_a_training_step(ferry, sample_data, tmp_path):
    data, ids = make_coco(sample_data, str(tmp_path), n=5)
    import json
    with open(data["annotations"]) as f:
        coco = json.load(f)
    # The second image gets only a crowd box and the fourth only a sliver: the
    # reference's rule keeps the first (crowd counts) and drops the second.
    coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] not in (ids[1], ids[3])]
    h, w = next((im["height"], im["width"]) for im in coco["images"] if im["id"] == ids[1])
    coco["annotations"].append({"id": 900, "image_id": ids[1], "category_id": 10, "bbox": [5, 5, 30, 30],
                                "area": 900, "iscrowd": 1, "segmentation": {"counts": [h * w], "size": [h, w]}})
    coco["annotations"].append({"id": 901, "image_id": ids[3], "category_id": 10, "bbox": [5, 5, 0.5, 30],
                                "area": 15, "iscrowd": 0, "segmentation": [[5, 5, 5.5, 5, 5.5, 35, 5, 35]]})
    with open(data["annotations"], "w") as f:
        json.dump(coco, f)
    subset = remove_images_without_annotations(_hflip_dataset(data))
    assert len(subset) == 4
    loader = ferry.DataLoader(subset, batch_size=2, shuffle=True, collate_fn=collate_fn, drop_last=False,
                              targets=("boxes", "labels"))
    seen = []
    model = torchvision.models.detection.fasterrcnn_mobilenet_v3_large_320_fpn(
        weights=None, weights_backbone=None, num_classes=91, min_size=160, max_size=240)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.005)
    sizes = {im["id"]: (im["height"], im["width"]) for im in coco["images"]}
    for images, targets in loader:
        assert all(set(t) == {"boxes", "labels"} for t in targets)
        seen += [tuple(im.shape[1:]) for im in images]  # each image at its own size, cut from the batch
        losses = model(list(images), list(targets))
        loss = sum(losses.values())
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert torch.isfinite(loss)
    assert sorted(seen) == sorted(sizes[i] for i in (ids[0], ids[1], ids[2], ids[4]))
    crowd_only = [t for _, t in [subset[i] for i in range(len(subset))] if int(t["image_id"]) == ids[1]]
    assert len(crowd_only) == 1 and len(crowd_only[0]["boxes"]) == 0  # kept, with no box


def test_lsj_preset_moves_boxes_and_masks_with_the_pixels(ferry, sample_data, tmp_path):
    data, ids = make_coco(sample_data, str(tmp_path), n=6)
    preset = DetectionPresetTrain([ScaleJitter(target_size=(256, 256), scale_range=(0.5, 1.5)),
                                   FixedSizeCrop(size=(256, 256), fill=(123.0, 117.0, 104.0)),
                                   RandomHorizontalFlip(p=0.5), PILToTensor(), ConvertImageDtype(torch.float)])
    dataset = CocoDetection(data["images"], data["annotations"], transforms=Compose([ConvertCocoPolysToMask(),
                                                                                    preset]))
    loader = ferry.DataLoader(dataset, batch_size=3, shuffle=True, collate_fn=collate_fn, epochs=2)
    checked = 0
    for epoch in range(2):
        seen = []
        for images, targets in loader:
            for image, t in zip(images, targets):
                assert image.shape == (3, 256, 256)
                seen.append(int(t["image_id"]))
                checked += check_targets((image.permute(1, 2, 0) * 255).round().to(torch.uint8), t,
                                         "image %d" % int(t["image_id"]))
        assert sorted(seen) == sorted(ids)
    assert checked >= 6


def test_what_ferry_cannot_batch_is_refused_by_name(ferry, sample_data, tmp_path):
    data, _ = make_coco(sample_data, str(tmp_path), n=2)

    def dataset(ops, convert=True):
        t = Compose(([ConvertCocoPolysToMask()] if convert else []) + [DetectionPresetTrain(ops)])
        return CocoDetection(data["images"], data["annotations"], transforms=t)

    tail = [PILToTensor(), ConvertImageDtype(torch.float)]
    with pytest.raises(ValueError, match="RandomShortestSize"):
        ferry.DataLoader(dataset([RandomShortestSize((480, 512), 1333)] + tail), batch_size=2)
    with pytest.raises(ValueError, match="RandomIoUCrop"):  # the "ssdlite" preset: sizes that vary
        ferry.DataLoader(dataset([RandomIoUCrop(), RandomHorizontalFlip(0.5)] + tail), batch_size=2)
    with pytest.raises(ValueError, match="ConvertCocoPolysToMask"):
        ferry.DataLoader(dataset([RandomHorizontalFlip(0.5)] + tail, convert=False), batch_size=2)
    odd = torch.utils.data.Subset(dataset(tail), [1])
    with pytest.raises(ValueError, match="Subset"):
        ferry.DataLoader(odd, batch_size=2)
