"""Pixel parity on real photos: every deterministic op (each op with fixed parameters),
after a fixed non-square geometry, against torchvision 0.14's output for the same files
(PIL images, as torchvision's reference scripts run them).

Two geometries, both non-square:
  crop     CenterCrop((150, 200)): the same decoder on both sides (libjpeg-turbo), no
           resampling, so the geometry's own difference is 0 and the op's shows whole;
  resize   Resize((120, 168)) (bilinear) leading the pipeline: Ferry's fused decode (a
           DCT-scaled decode, then OpenCV's bilinear) against Pillow's full decode and
           antialiased bilinear, about 2.2 levels apart.
Tolerance, in uint8 levels of mean absolute difference (MAD) over the images:
  - the op adds at most 1.5 to the geometry's own: MAD(ferry(geometry + op),
    torchvision(geometry + op)) - MAD(ferry(geometry), torchvision(geometry)) <= 1.5,
    for every op after the crop geometry. After the fused resize, ops that stretch the
    histogram (autocontrast, equalize) amplify the geometry's own difference (they map a
    level to several): that figure is printed, not asserted;
  - isolated from the geometry, after both: torchvision's op applied to Ferry's own
    geometry output is within 1.5 levels of Ferry's op. All but ColorJitter's
    brightness/contrast/saturation are bit-exact (those keep the original pipeline's
    rounding, within half a level of Pillow's truncation); the test prints each figure.
"""
import json
import os

import numpy as np
import pytest
import torchvision.transforms as T
import torchvision.transforms.functional as F
from PIL import Image

TOLERANCE = 1.5
GEOMETRIES = {
    "crop": ({"op": "center_crop", "size": [150, 200]}, T.CenterCrop((150, 200))),
    "resize": ({"op": "resize", "size": [120, 168]}, T.Resize((120, 168))),
}
B = T.InterpolationMode.BILINEAR
N = T.InterpolationMode.NEAREST
C = T.InterpolationMode.BICUBIC
QUAD = [[0, 0], [199, 0], [199, 149], [0, 149]]
WARPED = [[12, 7], [185, 3], [190, 140], [4, 131]]

# name: (Ferry op, the torchvision transform with the same fixed parameters)
OPS = {
    "grayscale": ({"op": "grayscale", "num_output_channels": 3}, T.Grayscale(3)),
    "solarize": ({"op": "random_solarize", "threshold": 128, "p": 1}, T.RandomSolarize(128, p=1)),
    "posterize": ({"op": "random_posterize", "bits": 3, "p": 1}, T.RandomPosterize(3, p=1)),
    "equalize": ({"op": "random_equalize", "p": 1}, T.RandomEqualize(p=1)),
    "autocontrast": ({"op": "random_autocontrast", "p": 1}, T.RandomAutocontrast(p=1)),
    "invert": ({"op": "random_invert", "p": 1}, T.RandomInvert(p=1)),
    "sharpness": ({"op": "random_adjust_sharpness", "sharpness_factor": 2.0, "p": 1},
                  T.RandomAdjustSharpness(2.0, p=1)),
    "gaussian_blur": ({"op": "gaussian_blur", "kernel_size": 5, "sigma": 1.5}, T.GaussianBlur(5, sigma=(1.5, 1.5))),
    "hue": ({"op": "color_jitter", "hue": [0.2, 0.2]}, T.ColorJitter(hue=(0.2, 0.2))),
    "brightness": ({"op": "color_jitter", "brightness": [1.3, 1.3]}, T.ColorJitter(brightness=(1.3, 1.3))),
    "contrast": ({"op": "color_jitter", "contrast": [0.6, 0.6]}, T.ColorJitter(contrast=(0.6, 0.6))),
    "saturation": ({"op": "color_jitter", "saturation": [1.5, 1.5]}, T.ColorJitter(saturation=(1.5, 1.5))),
    "resize_bicubic": ({"op": "resize", "size": [100, 130], "interpolation": "bicubic"}, T.Resize((100, 130), C)),
    "resize_bilinear": ({"op": "resize", "size": [100, 130]}, T.Resize((100, 130), B)),
    "resize_nearest": ({"op": "resize", "size": [100, 130], "interpolation": "nearest"}, T.Resize((100, 130), N)),
    "resize_shorter_bicubic": ({"op": "resize", "size": 90, "interpolation": "bicubic"}, T.Resize(90, C)),
    "rotate_nearest": ({"op": "random_rotation", "degrees": [25, 25]}, T.RandomRotation((25, 25))),
    "rotate_bilinear_expand": ({"op": "random_rotation", "degrees": [-40, -40], "interpolation": "bilinear",
                                "expand": True}, T.RandomRotation((-40, -40), B, expand=True)),
    "affine_bicubic": ({"op": "affine", "angle": 10, "translate": [5, -3], "scale": 0.9, "shear": [8, 4],
                        "interpolation": "bicubic", "fill": [10, 20, 30]},
                       lambda im: F.affine(im, 10, [5, -3], 0.9, [8, 4], C, fill=[10, 20, 30])),
    "perspective": ({"op": "perspective", "startpoints": QUAD, "endpoints": WARPED},
                    lambda im: F.perspective(im, QUAD, WARPED, B)),
    "pad_reflect": ({"op": "pad", "padding": [3, 5, 7, 2], "padding_mode": "reflect"},
                    T.Pad([3, 5, 7, 2], padding_mode="reflect")),
    "pad_symmetric": ({"op": "pad", "padding": 6, "padding_mode": "symmetric"}, T.Pad(6, padding_mode="symmetric")),
    "pad_edge": ({"op": "pad", "padding": [4, 9], "padding_mode": "edge"}, T.Pad([4, 9], padding_mode="edge")),
    "pad_constant": ({"op": "pad", "padding": 5, "fill": [200, 10, 60]}, T.Pad(5, fill=(200, 10, 60))),
    "center_crop_padding": ({"op": "center_crop", "size": [170, 90]}, T.CenterCrop((170, 90))),
    "hflip": ({"op": "hflip", "p": 1}, T.RandomHorizontalFlip(1)),
    "vflip": ({"op": "vflip", "p": 1}, T.RandomVerticalFlip(1)),
}


@pytest.fixture(scope="module")
def photos(sample_data):
    """12 real photos of the sample set (different classes and sizes)."""
    out = []
    for c in sorted(d for d in os.listdir(sample_data) if os.path.isdir(os.path.join(sample_data, d))):
        files = sorted(os.listdir(os.path.join(sample_data, c)))
        for f in files[:2]:
            out.append(os.path.join(sample_data, c, f))
    return out[:12]


def ferry_pixels(ferry, ops, data):
    p = ferry._ferry.Pipeline(json.dumps({"ops": ops, "output": {"dtype": "uint8", "layout": "NHWC"}}))
    return p.process(data).astype(np.int16)


def tv_pixels(transform, image):
    return np.asarray(transform(image), dtype=np.int16)


def mad(a, b):
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.abs(a - b).mean())


@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
@pytest.mark.parametrize("name", sorted(OPS))
def test_op_matches_torchvision_on_real_photos(ferry, photos, geometry, name):
    g_ferry, g_tv = GEOMETRIES[geometry]
    op_ferry, op_tv = OPS[name]
    geom, total, isolated = [], [], []
    for path in photos:
        with open(path, "rb") as f:
            data = f.read()
        image = Image.open(path).convert("RGB")
        fg = ferry_pixels(ferry, [g_ferry], data)
        tg = tv_pixels(g_tv, image)
        fo = ferry_pixels(ferry, [g_ferry, op_ferry], data)
        to = tv_pixels(lambda im: op_tv(g_tv(im)), image)
        ti = tv_pixels(op_tv, Image.fromarray(fg.astype(np.uint8)))  # torchvision's op on Ferry's geometry
        geom.append(mad(fg, tg))
        total.append(mad(fo, to))
        isolated.append(mad(fo, ti))
    added = np.mean(total) - np.mean(geom)
    print("%-24s %-6s geometry %.3f  with op %.3f  added %+.3f  isolated %.3f (max %.3f)"
          % (name, geometry, np.mean(geom), np.mean(total), added, np.mean(isolated), np.max(isolated)))
    if geometry == "crop":
        assert added <= TOLERANCE, "%s adds %.3f levels to the %s geometry's %.3f" % (name, added, geometry,
                                                                                       np.mean(geom))
    assert np.mean(isolated) <= TOLERANCE, "%s on the same input differs by %.3f levels" % (name,
                                                                                            np.mean(isolated))


def test_bicubic_random_resized_crop_matches_torchvision_on_its_box(ferry, photos):
    """The fused decode (a DCT-scaled window, then bicubic) against torchvision's
    resized_crop of the same box: the fused path's own difference, stated: <= 3 levels."""
    diffs = []
    for k, path in enumerate(photos):
        with open(path, "rb") as f:
            data = f.read()
        spec = {"ops": [{"op": "random_resized_crop", "size": [96, 128], "interpolation": "bicubic"}],
                "output": {"dtype": "uint8", "layout": "NHWC"}}
        p = ferry._ferry.Pipeline(json.dumps(spec))
        draws, err = p.draws(data, 3, 0, k)
        assert err == ""
        box = dict(draws)
        out = p.process(data, 3, 0, k).astype(np.int16)
        want = F.resized_crop(Image.open(path).convert("RGB"), int(box["i"]), int(box["j"]), int(box["h"]),
                              int(box["w"]), [96, 128], C)
        diffs.append(mad(out, np.asarray(want, dtype=np.int16)))
    print("fused bicubic random_resized_crop: MAD %.3f (max %.3f)" % (np.mean(diffs), np.max(diffs)))
    assert np.mean(diffs) <= 3.0

