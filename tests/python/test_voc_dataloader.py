"""ferry.DataLoader as the drop-in for the segmentation reference's VOC loading (issue 23).

torchvision.datasets.VOCSegmentation over a VOC layout of real photographs with
painted rectangles (test_segmentation's), with joint transforms written here after
the reference's presets (class names and attributes as in references/segmentation:
RandomResize, RandomHorizontalFlip(flip_prob), RandomCrop(size) padding right and
below with 255 in the target, PILToTensor giving an int64 target, ConvertImageDtype,
Normalize) and the reference's collate (cat_list). A deterministic setting must give
what torchvision's DataLoader gives, sample for sample; the random preset is checked
from the pixels (each class covers its colour, IoU >= 0.75), each sample once per
epoch.
"""
import os
import random

import numpy as np
import pytest
import torch
import torchvision
from torchvision.transforms import functional as F

from test_segmentation import COLOURS, make_voc

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class Compose:
    def __init__(self, transforms):
        self.transforms = transforms

    def __call__(self, image, target):
        for t in self.transforms:
            image, target = t(image, target)
        return image, target


class RandomResize:
    def __init__(self, min_size, max_size=None):
        self.min_size, self.max_size = min_size, max_size if max_size is not None else min_size

    def __call__(self, image, target):
        size = random.randint(self.min_size, self.max_size)
        return F.resize(image, size), F.resize(target, size, interpolation=F.InterpolationMode.NEAREST)


class RandomHorizontalFlip:
    def __init__(self, flip_prob):
        self.flip_prob = flip_prob

    def __call__(self, image, target):
        if random.random() < self.flip_prob:
            image, target = F.hflip(image), F.hflip(target)
        return image, target


def _pad_if_smaller(img, size, fill=0):
    w, h = img.size
    if min(w, h) < size:
        img = F.pad(img, (0, 0, size - w if w < size else 0, size - h if h < size else 0), fill=fill)
    return img


class RandomCrop:
    def __init__(self, size):
        self.size = size

    def __call__(self, image, target):
        image, target = _pad_if_smaller(image, self.size), _pad_if_smaller(target, self.size, fill=255)
        i, j, h, w = torchvision.transforms.RandomCrop.get_params(image, (self.size, self.size))
        return F.crop(image, i, j, h, w), F.crop(target, i, j, h, w)


class PILToTensor:
    def __call__(self, image, target):
        return F.pil_to_tensor(image), torch.as_tensor(np.array(target), dtype=torch.int64)


class ConvertImageDtype:
    def __init__(self, dtype):
        self.dtype = dtype

    def __call__(self, image, target):
        return F.convert_image_dtype(image, self.dtype), target


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, image, target):
        return F.normalize(image, mean=self.mean, std=self.std), target


class SegmentationPresetTrain:
    def __init__(self, base_size, crop_size, hflip_prob=0.5):
        self.transforms = Compose([RandomResize(int(0.5 * base_size), int(2.0 * base_size)),
                                   RandomHorizontalFlip(hflip_prob), RandomCrop(crop_size), PILToTensor(),
                                   ConvertImageDtype(torch.float), Normalize(MEAN, STD)])

    def __call__(self, img, target):
        return self.transforms(img, target)


def cat_list(images, fill_value=0):
    max_size = tuple(max(s) for s in zip(*[img.shape for img in images]))
    out = images[0].new(*((len(images),) + max_size)).fill_(fill_value)
    for img, pad in zip(images, out):
        pad[..., :img.shape[-2], :img.shape[-1]].copy_(img)
    return out


def collate_fn(batch):
    images, targets = list(zip(*batch))
    return cat_list(images, fill_value=0), cat_list(targets, fill_value=255)


def voc(sample_data, tmp_path, transforms, n=6):
    make_voc(sample_data, str(tmp_path / "VOCdevkit" / "VOC2012"), n=n)
    return torchvision.datasets.VOCSegmentation(str(tmp_path), year="2012", image_set="train", transforms=transforms)


def test_a_fixed_setting_gives_what_torchvision_gives(ferry, sample_data, tmp_path):
    # Resized to 100 on the shorter side, flipped, padded to 160 x 160 (the crop is then
    # the whole image): no draw is left to chance.
    t = Compose([RandomResize(100, 100), RandomHorizontalFlip(1.0), RandomCrop(160), PILToTensor(),
                 ConvertImageDtype(torch.float), Normalize(MEAN, STD)])
    dataset = voc(sample_data, tmp_path, t)
    theirs = list(torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=False, collate_fn=collate_fn))
    ours = list(ferry.DataLoader(dataset, batch_size=4, shuffle=False, collate_fn=collate_fn, num_workers=2))
    assert len(ours) == len(theirs) == 2
    for (ia, ta), (ib, tb) in zip(theirs, ours):
        assert ib.shape == ia.shape and ib.dtype == torch.float32
        assert tb.shape == ta.shape and tb.dtype == torch.int64
        assert (ib - ia).abs().mean() < 0.05  # normalized units: about 3 / 255 of a pixel
        assert torch.equal(tb == 255, ta == 255), "padding: 255 in the same places"
        assert (tb == ta).float().mean() >= 0.97, (tb == ta).float().mean()


def test_the_training_preset_moves_masks_with_the_pixels(ferry, sample_data, tmp_path):
    dataset = voc(sample_data, tmp_path, SegmentationPresetTrain(base_size=160, crop_size=128))
    loader = ferry.DataLoader(dataset, batch_size=3, shuffle=True, collate_fn=collate_fn, epochs=2)
    mean, std = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    checked = 0
    for epoch in range(2):
        rows = 0
        for images, targets in loader:
            assert images.shape[1:] == (3, 128, 128) and targets.shape[1:] == (128, 128)
            for image, sem in zip(images, targets):
                rows += 1
                x = ((image * std + mean) * 255).round().permute(1, 2, 0).numpy().astype(np.int32)
                sem = sem.numpy()
                assert set(np.unique(sem)) <= {0, 1, 2, 3, 4, 255}
                for k, c in enumerate(COLOURS):
                    pix = np.all(np.abs(x - np.array(c)) <= 60, axis=2)
                    if pix.sum() < 150:
                        continue
                    cls = sem == k + 1
                    iou = (cls & pix).sum() / max(1, (cls | pix).sum())
                    assert iou >= 0.75, "class %d IoU %.3f" % (k + 1, iou)
                    checked += 1
        assert rows == 6
    assert checked >= 6


def test_what_ferry_cannot_batch_is_refused(ferry, sample_data, tmp_path):
    t = Compose([RandomResize(100, 200), PILToTensor(), ConvertImageDtype(torch.float)])  # the eval preset's
    with pytest.raises(ValueError, match="one size"):
        ferry.DataLoader(voc(sample_data, tmp_path, t), batch_size=2)
