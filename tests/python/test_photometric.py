"""random_photometric_distort (issue 23, the "ssd" preset's RandomPhotometricDistort)
against torchvision's definition, on real photographs.

With p = 1 and each factor's range a single value, what is left to chance is whether
contrast comes before or after saturation and hue, and the order of the channels: 12
outcomes. torchvision's functional ops compute all 12 on the PIL image here (with the
reference's round trip through a float tensor for the permutation); every Ferry output
must be one of them (within about a level and a half: Ferry's blends round where
Pillow's truncate, half a level per adjustment), and across samples
both contrast placements and several channel orders must occur. With p = 0 the image
is unchanged. The translation of transforms.v2-style objects is checked too."""
import itertools
import os

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import functional as F

B, C, S, H = 1.1, 0.7, 1.3, 0.04


def candidates(img):
    out = []
    for before in (True, False):
        x = F.adjust_brightness(img, B)
        if before:
            x = F.adjust_contrast(x, C)
        x = F.adjust_hue(F.adjust_saturation(x, S), H)
        if not before:
            x = F.adjust_contrast(x, C)
        for perm in itertools.permutations(range(3)):
            t = F.convert_image_dtype(F.pil_to_tensor(x))[list(perm)]
            out.append(((before, perm), np.array(F.to_pil_image(t)).astype(np.int32)))
    return out


def test_each_output_is_one_of_torchvisions_twelve(ferry, sample_data, tmp_path):
    root = tmp_path / "tree" / "c0"
    root.mkdir(parents=True)
    photos = []
    for c in sorted(os.listdir(sample_data))[:6]:
        d = os.path.join(sample_data, c)
        if os.path.isdir(d):
            photos.append(os.path.join(d, sorted(os.listdir(d))[0]))
    for i, p in enumerate(photos):
        Image.open(p).convert("RGB").resize((64, 48), Image.BILINEAR).save(str(root / ("%02d.png" % i)))
    op = {"op": "random_photometric_distort", "p": 1.0, "brightness": [B, B], "contrast": [C, C],
          "saturation": [S, S], "hue": [H, H]}
    seen = set()
    for seed in range(4):
        loader = ferry.Loader(data=str(tmp_path / "tree"), pipeline={"ops": [op, {"op": "resize", "size": [48, 64]}]},
                              batch_size=len(photos), seed=seed, shuffle=False, epochs=1)
        (images, _), = list(loader)
        for i, got in enumerate(images):
            src = Image.open(str(root / ("%02d.png" % i)))
            got = got.numpy().astype(np.int32)
            ranked = sorted(candidates(src), key=lambda c: np.abs(c[1] - got).mean())
            best = ranked[0]
            assert np.abs(best[1] - got).mean() < 2.5 and np.abs(best[1] - got).max() <= 8, (i, best[0])
            # The channel order is unmistakable: every other order is far off.
            assert all(np.abs(c[1] - got).mean() > 5 for c in ranked if c[0][1] != best[0][1])
            seen.add(best[0])
    assert {b for b, _ in seen} == {True, False}
    assert len({p for _, p in seen}) >= 4
    off = dict(op, p=0.0)
    (images, _), = list(ferry.Loader(data=str(tmp_path / "tree"), batch_size=len(photos), shuffle=False, epochs=1,
                                     pipeline={"ops": [off, {"op": "resize", "size": [48, 64]}]}))
    for i, got in enumerate(images):
        assert np.array_equal(got.numpy(), np.array(Image.open(str(root / ("%02d.png" % i)))))


def test_translation_reads_the_reference_and_v2_forms(ferry):
    from ferry.transforms import _State, _photometric
    import torchvision

    class Reference:  # references/detection/transforms.py: ColorJitters in attributes
        p = 0.5
        _brightness = torchvision.transforms.ColorJitter(brightness=(0.875, 1.125))
        _contrast = torchvision.transforms.ColorJitter(contrast=(0.5, 1.5))
        _saturation = torchvision.transforms.ColorJitter(saturation=(0.5, 1.5))
        _hue = torchvision.transforms.ColorJitter(hue=(-0.05, 0.05))

    class V2:  # transforms.v2.RandomPhotometricDistort
        p, brightness, contrast, saturation, hue = 0.5, (0.875, 1.125), (0.5, 1.5), (0.5, 1.5), (-0.05, 0.05)

    for t in (Reference(), V2()):
        s = _State()
        _photometric(t, s)
        assert s.ops == [{"op": "random_photometric_distort", "p": 0.5, "brightness": [0.875, 1.125],
                          "contrast": [0.5, 1.5], "saturation": [0.5, 1.5], "hue": [-0.05, 0.05]}]
