"""Ferry's random parameters against torchvision 0.14's (and timm's) distributions, op by op.

For every random op Ferry runs, Ferry's draws over 10,000 samples (Pipeline.draws: each sample index is its own
Philox stream; Pipeline.finish for the batch op) are compared, parameter by parameter, with 10,000 draws of the
transform they reproduce: torchvision's forward on a small tensor image, with the kernel it ends in
(torchvision.transforms.functional.*, autoaugment._apply_op) patched to record its arguments and return the image,
so the draws are get_params' as forward wires them (the p test, [width, height] order, padding, the size); the
reference scripts' RandomMixup/RandomCutmix under RandomChoice; timm's draw rules (timm is not installed here) copied
from timm.data.auto_augment, mixup and random_erasing, with Python's random and numpy as timm calls them.

Two-sample tests, implemented here (no scipy):
  * many-valued parameters (angles, factors, crop boxes, lam): the two-sample Kolmogorov-Smirnov statistic
    D = sup |F_ferry - F_ref| with its asymptotic p-value, Q_KS((sqrt(Ne) + 0.12 + 0.11 / sqrt(Ne)) D), Ne = nm/(n+m)
    (Stephens' correction, as Numerical Recipes' kstwo); conservative for ties (integers).
  * categorical and Bernoulli parameters (flips, op choices, permutations, few-valued integers): Pearson's chi-square
    test of homogeneity on the 2 x K table of counts (categories expected below 5 pooled), p from the chi-square
    survival function (regularised upper incomplete gamma).
Threshold: a comparison passes when p >= 1e-3 (ALPHA), 136 comparisons in all. Seeds are fixed on both sides
(Ferry's job seed and sample indices 0..9999, torch.manual_seed, random.seed, numpy's seed), so every p is a fixed
number and the file passes or fails the same way on every run. Why 1e-3: a correct op falls below it at a given
seed once in a thousand comparisons (every comparison here passed when the seeds were fixed: the smallest p was
about 0.005, as expected of the smallest of ~140 null p-values), while at 10,000 draws a side it still catches the
bugs that matter: KS rejects at D > 0.028 (a CDF off by 0.05 anywhere gives p ~ 1e-10), chi-square a Bernoulli
off by 0.03 around 0.5, and a wrong range, a transposed image size, a skipped sign or a biased choice give
p < 1e-10. Checked by hand against references made slightly wrong (RandAugment on a transposed image, hue 0.11 for
0.1, sigma up to 2.1 for 2.0, p 0.23 for 0.2, 0.33 for 0.3, 0.67 for 0.7, severity 4 for 3, alpha 0.25 for 0.2,
timm mstd 0.6 for 0.5, ...): each fails. test_the_tests_reject_wrong_distributions keeps such a check.
"""
import collections
import functools
import importlib.util
import io
import json
import math
import os
import random

import numpy as np
import pytest
import torch
import torchvision.transforms as T
import torchvision.transforms.autoaugment as autoaugment
import torchvision.transforms.functional as TF
from PIL import Image

N = 10_000  # draws a side
ALPHA = 1e-3  # a comparison passes when its p-value is at least this
SEED = 20240611  # Ferry's job seed, torch's, random's and numpy's
UINT8 = {"dtype": "uint8", "layout": "NHWC"}
FLOAT = {"dtype": "float32", "layout": "NCHW"}
HERE = os.path.dirname(os.path.abspath(__file__))


# ------------------------------------------------------------------------------------------ two-sample statistics

def _kolmogorov_q(lam):
    """P(K > lam) for the Kolmogorov distribution: 2 sum_k (-1)^(k-1) exp(-2 k^2 lam^2)."""
    if lam < 0.2:
        return 1.0
    total = 0.0
    for k in range(1, 101):
        term = 2.0 * (-1) ** (k - 1) * math.exp(-2.0 * k * k * lam * lam)
        total += term
        if abs(term) < 1e-16:
            break
    return min(1.0, max(0.0, total))


def ks_2samp(a, b):
    """Two-sample Kolmogorov-Smirnov: (D, asymptotic p-value). Values are compared as float32, so that one value
    recorded in float32 on one side (torch's tensors) and in double on the other is one value, not two."""
    a = np.sort(np.asarray(a, dtype=np.float64).astype(np.float32))
    b = np.sort(np.asarray(b, dtype=np.float64).astype(np.float32))
    n, m = len(a), len(b)
    points = np.concatenate([a, b])
    d = float(np.max(np.abs(np.searchsorted(a, points, side="right") / n -
                            np.searchsorted(b, points, side="right") / m)))
    en = math.sqrt(n * m / (n + m))
    return d, _kolmogorov_q((en + 0.12 + 0.11 / en) * d)


def _gamma_q(a, x):
    """The regularised upper incomplete gamma function Q(a, x) (Numerical Recipes' gammq)."""
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series for P(a, x)
        term = total = 1.0 / a
        ap = a
        for _ in range(10000):
            ap += 1
            term *= x / ap
            total += term
            if abs(term) < abs(total) * 1e-15:
                break
        return max(0.0, 1.0 - total * math.exp(log_front))
    b = x + 1 - a  # Lentz's continued fraction for Q(a, x)
    c, d = 1e300, 1 / b
    h = d
    for i in range(1, 10000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = 1e-300 if abs(d) < 1e-300 else d
        c = b + an / c
        c = 1e-300 if abs(c) < 1e-300 else c
        d = 1 / d
        delta = d * c
        h *= delta
        if abs(delta - 1) < 1e-15:
            break
    return min(1.0, math.exp(log_front) * h)


def chi2_2samp(a, b):
    """Pearson's chi-square test of homogeneity of two samples of hashable categories: (statistic, df, p).

    Categories whose expected count is below 5 in either sample are pooled into one (and that pool into the
    smallest category when it is still below 5), so the chi-square approximation holds.
    """
    ca, cb = collections.Counter(a), collections.Counter(b)
    n, m = sum(ca.values()), sum(cb.values())
    keys = sorted(set(ca) | set(cb), key=lambda k: (ca[k] + cb[k], repr(k)))
    small = min(n, m) / (n + m)
    columns, pool = [], [0, 0]
    for k in keys:
        if (ca[k] + cb[k]) * small < 5:
            pool[0] += ca[k]
            pool[1] += cb[k]
        else:
            columns.append([ca[k], cb[k]])
    if pool != [0, 0]:
        if (pool[0] + pool[1]) * small >= 5 or not columns:
            columns.append(pool)
        else:
            columns[0] = [columns[0][0] + pool[0], columns[0][1] + pool[1]]
    if len(columns) < 2:
        return 0.0, 0, 1.0
    stat = 0.0
    for x, y in columns:
        total = x + y
        for observed, size in ((x, n), (y, m)):
            expected = total * size / (n + m)
            stat += (observed - expected) ** 2 / expected
    df = len(columns) - 1
    return stat, df, _gamma_q(df / 2.0, stat / 2.0)


def same_distribution(name, ferry_values, reference_values, test):
    """Asserts that the two samples pass `test` ("ks" or "chi2") at ALPHA."""
    assert len(ferry_values) > 0 and len(reference_values) > 0, "%s: no draws (%d, %d)" % (
        name, len(ferry_values), len(reference_values))
    if test == "ks":
        d, p = ks_2samp(ferry_values, reference_values)
        detail = "KS D = %.4f" % d
    else:
        stat, df, p = chi2_2samp(ferry_values, reference_values)
        detail = "chi2 = %.1f, df = %d" % (stat, df)
    assert p >= ALPHA, "%s: Ferry's draws (n = %d) and the reference's (n = %d) differ: %s, p = %.3g < %g" % (
        name, len(ferry_values), len(reference_values), detail, p, ALPHA)
    return p


# ----------------------------------------------------------------------------------------------- Ferry's draws

@pytest.fixture(scope="module")
def photos(sample_data):
    """JPEG bytes of one real photo at a few sizes (W x H): "80x60" (4:3) and "96x16" (6:1) for the crop plans,
    "32x24" and "16x12" for the ops after a resize (small, so decoding costs little)."""
    cls = sorted(c for c in os.listdir(sample_data) if c.startswith("class_"))[0]
    name = sorted(os.listdir(os.path.join(sample_data, cls)))[0]
    with Image.open(os.path.join(sample_data, cls, name)) as im:
        rgb = im.convert("RGB")
    out = {}
    for w, h in ((80, 60), (96, 16), (32, 24), (16, 12)):
        buf = io.BytesIO()
        rgb.resize((w, h), Image.BILINEAR).save(buf, "JPEG", quality=90)
        out["%dx%d" % (w, h)] = buf.getvalue()
    return out


@pytest.fixture(scope="module")
def sampler(ferry, photos):
    """sampler(ops, photo="16x12", output=UINT8) -> N samples (sample indices 0..N-1 under SEED), each Ferry's
    [(name, value)] in draw order. The same spec twice is drawn once."""
    cache = {}

    def run(ops, photo="16x12", output=UINT8, n=N):
        spec = json.dumps({"ops": ops, "output": output})
        if (spec, photo, n) not in cache:
            pipeline = ferry._ferry.Pipeline(spec)
            data = photos[photo]
            samples = []
            for index in range(n):
                draws, err = pipeline.draws(data, SEED, 0, index)
                assert err == "", err
                samples.append(draws)
            cache[spec, photo, n] = samples
        return cache[spec, photo, n]
    return run


def column(samples, name):
    """Every value named `name`, over all samples, in order."""
    return [v for s in samples for k, v in s if k == name]


def per_sample(samples, name):
    """Each sample's values named `name`, as a tuple."""
    return [tuple(v for k, v in s if k == name) for s in samples]


# ------------------------------------------------------------------------------------------ torchvision's draws

@pytest.fixture
def kernels(monkeypatch):
    """kernels(*names): torchvision.transforms.functional's `names` record (name, args, kwargs) in the returned list
    and return the image unchanged, so a transform's forward shows the parameters it drew."""
    log = []

    def record(name, img, *args, **kwargs):
        log.append((name, args, kwargs))
        return img

    def patch(*names):
        for name in names:
            monkeypatch.setattr(TF, name, functools.partial(record, name))
        return log
    return patch


def forward_calls(transform, log, img, n=N):
    """n forwards of `transform` on `img` after torch.manual_seed(SEED): each forward's recorded kernel calls."""
    forward = transform.forward  # nn.Module.__call__ without its hook checks
    torch.manual_seed(SEED)
    random.seed(SEED)
    out = []
    with torch.inference_mode():
        for _ in range(n):
            del log[:]
            forward(img)
            out.append(list(log))
    return out


def image(height, width):
    return torch.zeros((3, height, width), dtype=torch.uint8)


# ------------------------------------------------------------------------------------------------------ geometry

@pytest.mark.parametrize("photo,scale,ratio,interpolation", [
    ("80x60", None, None, None),                      # defaults, 4:3 photo
    ("80x60", [0.25, 0.6], [0.5, 2.0], "random"),     # non-default ranges; timm's random interpolation
    ("96x16", None, None, None),                      # 6:1: many samples take the central fallback
], ids=["default", "scale-ratio-random-interp", "fallback"])
def test_random_resized_crop(sampler, kernels, photo, scale, ratio, interpolation):
    """random_resized_crop's box (i, j, h, w: get_params' return) against RandomResizedCrop's, on the same W x H."""
    op = {"op": "random_resized_crop", "size": [8, 8]}
    kw = {}
    if scale:
        op["scale"], kw["scale"] = scale, scale
    if ratio:
        op["ratio"], kw["ratio"] = ratio, ratio
    if interpolation:
        op["interpolation"] = interpolation
    samples = sampler([op], photo=photo)
    w, h = (int(x) for x in photo.split("x"))
    calls = forward_calls(T.RandomResizedCrop(8, **kw), kernels("resized_crop"), image(h, w))
    boxes = [c[0][1][:4] for c in calls]
    for k, name in enumerate("ijhw"):
        same_distribution(name, column(samples, name), [b[k] for b in boxes], "ks")
    same_distribution("area", [a * b for a, b in zip(column(samples, "h"), column(samples, "w"))],
                      [b[2] * b[3] for b in boxes], "ks")
    if photo == "96x16":  # the central fallback box (all 10 tries missed) as often as torchvision's
        fallback = (0, 37, 16, 21)  # h = 16, w = round(16 * 4 / 3), centred
        mine = [b == fallback for b in zip(*(column(samples, x) for x in "ijhw"))]
        assert sum(mine) > N // 5
        same_distribution("fallback", mine, [tuple(b) == fallback for b in boxes], "chi2")
    if interpolation == "random":  # timm's RandomResizedCropAndInterpolation: random.choice((bilinear, bicubic))
        random.seed(SEED)
        same_distribution("bicubic", column(samples, "bicubic"), [random.choice((0, 1)) for _ in range(N)], "chi2")


@pytest.mark.parametrize("case", ["crop-plan", "padded", "pad-if-needed"])
def test_random_crop(sampler, kernels, case):
    """random_crop's (i, j) against RandomCrop's forward: leading (a crop plan on the 80x60 photo), after a resize
    with padding 4 (CIFAR's), and larger than the image with pad_if_needed (both sides padded by the shortfall)."""
    if case == "crop-plan":
        ops = [{"op": "random_crop", "size": [40, 50]}]
        t, img = T.RandomCrop((40, 50)), image(60, 80)
    elif case == "padded":
        ops = [{"op": "resize", "size": [24, 32]}, {"op": "random_crop", "size": [24, 32], "padding": 4}]
        t, img = T.RandomCrop((24, 32), padding=4), image(24, 32)
    else:
        ops = [{"op": "resize", "size": [24, 32]}, {"op": "random_crop", "size": [27, 35], "pad_if_needed": True}]
        t, img = T.RandomCrop((27, 35), pad_if_needed=True), image(24, 32)
    samples = sampler(ops, photo="80x60" if case == "crop-plan" else "32x24")
    calls = forward_calls(t, kernels("crop"), img)
    same_distribution("i", column(samples, "i"), [c[0][1][0] for c in calls], "chi2")
    same_distribution("j", column(samples, "j"), [c[0][1][1] for c in calls], "chi2")


def test_random_rotation(sampler, kernels):
    """random_rotation's angle against RandomRotation's, over an asymmetric range."""
    samples = sampler([{"op": "resize", "size": [8, 8]}, {"op": "random_rotation", "degrees": [-30, 45]}])
    calls = forward_calls(T.RandomRotation((-30, 45)), kernels("rotate"), image(8, 8))
    same_distribution("angle", column(samples, "angle"), [c[0][1][0] for c in calls], "ks")


@pytest.mark.parametrize("params", [
    {"degrees": 15, "translate": [0.1, 0.2], "scale": [0.8, 1.2], "shear": [-10, 10, -5, 5]},
    {"degrees": [-5, 20], "shear": 8},
], ids=["translate-scale-shear4", "shear-number"])
def test_random_affine(sampler, kernels, params):
    """random_affine's angle, translation (pixels, rounded), scale and shears against RandomAffine's on 32x24."""
    samples = sampler([{"op": "resize", "size": [24, 32]}, dict(params, op="random_affine")], photo="32x24")
    kw = {k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items()}
    calls = forward_calls(T.RandomAffine(**kw), kernels("affine"), image(24, 32))
    ref = [c[0][1] for c in calls]  # (angle, [tx, ty], scale, [shear_x, shear_y])
    same_distribution("angle", column(samples, "angle"), [r[0] for r in ref], "ks")
    same_distribution("tx", column(samples, "tx"), [r[1][0] for r in ref], "chi2")
    same_distribution("ty", column(samples, "ty"), [r[1][1] for r in ref], "chi2")
    same_distribution("scale", column(samples, "scale"), [r[2] for r in ref], "ks" if "scale" in params else "chi2")
    same_distribution("shear_x", column(samples, "shear_x"), [r[3][0] for r in ref], "ks")
    shear_y_drawn = isinstance(params["shear"], list) and len(params["shear"]) == 4  # else 0 on both sides
    same_distribution("shear_y", column(samples, "shear_y"), [r[3][1] for r in ref], "ks" if shear_y_drawn else "chi2")


def test_random_perspective(sampler, kernels):
    """random_perspective's applied (p = 0.7) and the 8 endpoint coordinates against RandomPerspective's on 32x24."""
    samples = sampler([{"op": "resize", "size": [24, 32]},
                       {"op": "random_perspective", "distortion_scale": 0.6, "p": 0.7}], photo="32x24")
    calls = forward_calls(T.RandomPerspective(0.6, p=0.7), kernels("perspective"), image(24, 32))
    same_distribution("applied", column(samples, "applied"), [len(c) == 1 for c in calls], "chi2")
    ends = [c[0][1][1] for c in calls if c]  # endpoints: tl, tr, br, bl
    for k, corner in enumerate(("tl", "tr", "br", "bl")):
        for axis, xy in enumerate("xy"):
            name = "%s_%s" % (corner, xy)
            same_distribution(name, column(samples, name), [e[k][axis] for e in ends], "chi2")


# ------------------------------------------------------------------------------------------------------- colour

JITTER = ("brightness", "contrast", "saturation", "hue")


@pytest.mark.parametrize("params", [
    {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1},
    {"brightness": 0.4, "contrast": 0.4, "saturation": 0.4},
    {"contrast": [0.2, 1.8], "hue": 0.3},
], ids=["bcsh", "bcs", "contrast-hue"])
def test_color_jitter(sampler, params):
    """color_jitter's order of the adjustments that are on (a categorical over their permutations: 24 with all
    four) and each factor, against ColorJitter.get_params' (randperm(4), then a uniform factor for each that is on;
    forward applies fn_idx's entries whose factor is not None, in order)."""
    samples = sampler([{"op": "resize", "size": [4, 4]}, dict(params, op="color_jitter")])
    t = T.ColorJitter(**{k: (tuple(v) if isinstance(v, list) else v) for k, v in params.items()})
    torch.manual_seed(SEED)
    ref = [T.ColorJitter.get_params(t.brightness, t.contrast, t.saturation, t.hue) for _ in range(N)]
    on = [i for i, name in enumerate(JITTER) if name in params]
    orders = [tuple(int(v) for k, v in s if k.startswith("order") and int(v) in on) for s in samples]
    ref_orders = [tuple(i for i in r[0].tolist() if r[1 + i] is not None) for r in ref]
    assert len(set(ref_orders)) == math.factorial(len(on))
    same_distribution("order", orders, ref_orders, "chi2")
    for i in on:
        same_distribution(JITTER[i], column(samples, JITTER[i]), [r[1 + i] for r in ref], "ks")


def test_gaussian_blur(sampler, kernels):
    """gaussian_blur's sigma against GaussianBlur's (uniform in [0.1, 2.0])."""
    samples = sampler([{"op": "resize", "size": [4, 4]}, {"op": "gaussian_blur", "kernel_size": 3,
                                                          "sigma": [0.1, 2.0]}])
    calls = forward_calls(T.GaussianBlur(3, sigma=(0.1, 2.0)), kernels("gaussian_blur"), image(4, 4))
    same_distribution("sigma", column(samples, "sigma"), [c[0][1][1][0] for c in calls], "ks")


# name: (Ferry op, torchvision transform, the kernel its forward calls when it applies). hflip first: a pipeline
# draws its hflips before the other ops.
BERNOULLI = {
    "hflip": ({"op": "hflip", "p": 0.5}, T.RandomHorizontalFlip(0.5), "hflip"),
    "vflip": ({"op": "random_vertical_flip", "p": 0.3}, T.RandomVerticalFlip(0.3), "vflip"),
    "grayscale": ({"op": "random_grayscale", "p": 0.2}, T.RandomGrayscale(0.2), "rgb_to_grayscale"),
    "solarize": ({"op": "random_solarize", "threshold": 128, "p": 0.4}, T.RandomSolarize(128, p=0.4), "solarize"),
    "posterize": ({"op": "random_posterize", "bits": 3, "p": 0.6}, T.RandomPosterize(3, p=0.6), "posterize"),
    "equalize": ({"op": "random_equalize", "p": 0.25}, T.RandomEqualize(p=0.25), "equalize"),
    "autocontrast": ({"op": "random_autocontrast", "p": 0.5}, T.RandomAutocontrast(p=0.5), "autocontrast"),
    "sharpness": ({"op": "random_adjust_sharpness", "sharpness_factor": 2, "p": 0.35},
                  T.RandomAdjustSharpness(2, p=0.35), "adjust_sharpness"),
    "invert": ({"op": "random_invert", "p": 0.45}, T.RandomInvert(p=0.45), "invert"),
}


BERNOULLI_OPS = [{"op": "resize", "size": [2, 2]}] + [op for op, _, _ in BERNOULLI.values()]


@pytest.mark.parametrize("name", list(BERNOULLI))
def test_bernoulli_ops(sampler, kernels, name):
    """A flip or random pixel op: how often Ferry applies it against how often the torchvision transform does.
    Ferry's draws come from one pipeline of all of them (each op its own stream, one record each, in op order)."""
    _, transform, kernel = BERNOULLI[name]
    samples = sampler(BERNOULLI_OPS)
    assert all([k for k, _ in s] == ["flipped"] * 2 + ["applied"] * (len(BERNOULLI) - 2) for s in samples)
    k = list(BERNOULLI).index(name)
    calls = forward_calls(transform, kernels(kernel), image(2, 2))
    same_distribution(name, [s[k][1] for s in samples], [len(c) == 1 for c in calls], "chi2")


# ------------------------------------------------------------------------------------------------- compositions

def recorders(log, n):
    """n transforms that record their index in `log` and return the image."""
    def make(k):
        def t(img):
            log.append(k)
            return img
        return t
    return [make(k) for k in range(n)]


NESTED = [{"op": "grayscale", "num_output_channels": 3},
          {"op": "affine", "angle": 10},
          {"op": "center_crop", "size": [4, 4]}]


def test_random_apply(sampler):
    """random_apply's applied against RandomApply's (p = 0.3: applied when rand <= p)."""
    samples = sampler([{"op": "resize", "size": [4, 4]}, {"op": "random_apply", "p": 0.3, "ops": NESTED[:2]}])
    log = []
    t = T.RandomApply(recorders(log, 2), p=0.3)
    torch.manual_seed(SEED)
    ref = []
    for _ in range(N):
        del log[:]
        t(None)
        ref.append(log == [0, 1])
    same_distribution("applied", column(samples, "applied"), ref, "chi2")


def test_random_choice(sampler):
    """random_choice's choice against RandomChoice's (random.choices with weights 0.2, 0.5, 0.3)."""
    samples = sampler([{"op": "resize", "size": [4, 4]},
                       {"op": "random_choice", "ops": NESTED, "p": [0.2, 0.5, 0.3]}])
    log = []
    t = T.RandomChoice(recorders(log, 3), p=[0.2, 0.5, 0.3])
    random.seed(SEED)
    for _ in range(N):
        t(None)
    same_distribution("choice", column(samples, "choice"), log, "chi2")


def test_random_order(sampler):
    """random_order's order of 3 ops (a categorical over the 6 permutations) against RandomOrder's random.shuffle."""
    samples = sampler([{"op": "resize", "size": [4, 4]}, {"op": "random_order", "ops": NESTED}])
    log = []
    t = T.RandomOrder(recorders(log, 3))
    random.seed(SEED)
    ref = []
    for _ in range(N):
        del log[:]
        t(None)
        ref.append(tuple(log))
    orders = per_sample(samples, "order")
    assert len(set(ref)) == 6
    same_distribution("order", orders, ref, "chi2")


# ------------------------------------------------------------------------------------------ torchvision policies

@pytest.fixture
def apply_op(monkeypatch):
    """autoaugment._apply_op records (op name, magnitude) in the returned list and returns the image."""
    log = []

    def record(img, op_name, magnitude, interpolation, fill):
        log.append((op_name, round(float(magnitude), 3)))
        return img
    monkeypatch.setattr(autoaugment, "_apply_op", record)
    return log


def policy_calls(transform, log, img, n=N):
    """n forwards of an autoaugment transform after torch.manual_seed(SEED): each one's [(op name, magnitude)].
    Its _augmentation_space (tensors that depend only on the bins and the image size) is computed once."""
    transform._augmentation_space = functools.lru_cache()(transform._augmentation_space)
    return forward_calls(transform, log, img, n)


def ferry_ops(samples, names):
    """Each sample's [(op name, magnitude rounded to 3 places)] from Ferry's op and magnitude records."""
    out = []
    for s in samples:
        ops = [names[int(v)] for k, v in s if k == "op"]
        mags = [round(v, 3) for k, v in s if k == "magnitude"]
        out.append(list(zip(ops, mags)))
    return out


def test_rand_augment(sampler, apply_op):
    """rand_augment (2 ops, magnitude 9 of 31) on 32x24: each slot's (op, signed magnitude) and the op alone,
    against RandAugment's."""
    samples = sampler([{"op": "resize", "size": [24, 32]}, {"op": "rand_augment"}], photo="32x24")
    names = list(T.RandAugment()._augmentation_space(31, (24, 32)).keys())
    mine = ferry_ops(samples, names)
    ref = policy_calls(T.RandAugment(), apply_op, image(24, 32))
    assert all(len(x) == 2 for x in mine) and all(len(x) == 2 for x in ref)
    for slot in range(2):
        same_distribution("slot %d (op, magnitude)" % slot, [x[slot] for x in mine], [x[slot] for x in ref], "chi2")
        same_distribution("slot %d op" % slot, [x[slot][0] for x in mine], [x[slot][0] for x in ref], "chi2")


def test_trivial_augment_wide(sampler, apply_op):
    """trivial_augment_wide: (op, signed magnitude) jointly, the op, and the sign of signed ops, against
    TrivialAugmentWide's (31 bins)."""
    samples = sampler([{"op": "resize", "size": [24, 32]}, {"op": "trivial_augment_wide"}], photo="32x24")
    names = list(T.TrivialAugmentWide()._augmentation_space(31).keys())
    mine = [x[0] for x in ferry_ops(samples, names)]
    ref = [x[0] for x in policy_calls(T.TrivialAugmentWide(), apply_op, image(24, 32))]
    same_distribution("(op, magnitude)", mine, ref, "chi2")
    same_distribution("op", [x[0] for x in mine], [x[0] for x in ref], "chi2")
    same_distribution("negative", [x[1] < 0 for x in mine if x[1] != 0], [x[1] < 0 for x in ref if x[1] != 0], "chi2")
    same_distribution("|magnitude| of Rotate", [abs(x[1]) for x in mine if x[0] == "Rotate"],
                      [abs(x[1]) for x in ref if x[0] == "Rotate"], "ks")


POLICY_OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color",
              "Contrast", "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize", "Invert"]  # PolicyOp


@pytest.mark.parametrize("policy", ["imagenet", "cifar10", "svhn"])
def test_auto_augment(sampler, apply_op, monkeypatch, policy):
    """auto_augment: the sub-policy, the number of its ops applied, and (sub-policy, applied ops with signed
    magnitudes) jointly, against AutoAugment's with the same policy (so its 25 sub-policies' tables too)."""
    samples = sampler([{"op": "resize", "size": [24, 32]}, {"op": "auto_augment", "policy": policy}],
                      photo="32x24")
    policies = []
    get_params = T.AutoAugment.get_params

    def recording_get_params(transform_num):
        out = get_params(transform_num)
        policies.append(out[0])
        return out
    monkeypatch.setattr(T.AutoAugment, "get_params", staticmethod(recording_get_params))
    ref_ops = policy_calls(T.AutoAugment(T.AutoAugmentPolicy(policy)), apply_op, image(24, 32))
    mine_ops = ferry_ops(samples, POLICY_OPS)
    mine_policy = [int(v) for v in column(samples, "policy")]
    same_distribution("policy", mine_policy, policies, "chi2")
    same_distribution("applied count", [len(x) for x in mine_ops], [len(x) for x in ref_ops], "chi2")
    same_distribution("(policy, ops)", [(p, tuple(x)) for p, x in zip(mine_policy, mine_ops)],
                      [(p, tuple(x)) for p, x in zip(policies, ref_ops)], "chi2")


# Ferry's augmix op list (torchvision_policies.cc, AugMix::ops_), which its "op" records index.
FERRY_AUGMIX_OPS = ["AutoContrast", "Equalize", "Posterize", "Rotate", "Solarize", "ShearX", "ShearY", "TranslateX",
                    "TranslateY", "Brightness", "Color", "Contrast", "Sharpness"]


class _DepthRecordingTorch:
    """torch, as autoaugment sees it, with AugMix's chain-depth draw (randint(low=1, high=4)) recorded."""

    def __init__(self, log):
        self._log = log

    def __getattr__(self, name):  # only for names not set yet: look each up once
        value = getattr(torch, name)
        setattr(self, name, value)
        return value

    def randint(self, *args, **kwargs):
        out = torch.randint(*args, **kwargs)
        if kwargs.get("low") == 1 and kwargs.get("high") == 4:
            self._log.append(("depth", int(out)))
        return out


def test_augmix(sampler, apply_op, monkeypatch):
    """augmix (severity 3, width 3, random depth): m0 and the chains' weights (Dirichlet, scaled by m1), each
    chain's depth, the ops and (op, signed magnitude), against AugMix's on 16x12."""
    samples = sampler([{"op": "resize", "size": [12, 16]}, {"op": "augmix"}])
    monkeypatch.setattr(autoaugment, "torch", _DepthRecordingTorch(apply_op))
    t = T.AugMix()
    dirichlet = []
    sample_dirichlet = t._sample_dirichlet

    def recording_dirichlet(params):
        out = sample_dirichlet(params)
        dirichlet.append(out[0].tolist())
        return out
    t._sample_dirichlet = recording_dirichlet
    calls = policy_calls(t, apply_op, image(12, 16))
    m = dirichlet[0::2]
    weights = [float(np.float32(w) * np.float32(mm[1])) for mm, ws in zip(m, dirichlet[1::2]) for w in ws]
    same_distribution("m0", column(samples, "m0"), [mm[0] for mm in m], "ks")
    same_distribution("weight", column(samples, "weight"), weights, "ks")
    same_distribution("depth", column(samples, "depth"), [v for c in calls for k, v in c if k == "depth"], "chi2")
    mine = [x for s in ferry_ops(samples, FERRY_AUGMIX_OPS) for x in s]
    ref = [x for c in calls for x in c if x[0] != "depth"]
    same_distribution("op", [x[0] for x in mine], [x[0] for x in ref], "chi2")
    same_distribution("(op, magnitude)", mine, ref, "chi2")


# --------------------------------------------------------------------------------------------------- tensor ops

@pytest.mark.parametrize("scale", [[0.02, 0.33], [0.1, 0.8]], ids=["default", "large"])
def test_random_erasing(sampler, kernels, scale):
    """random_erasing on 32x24: applied, whether a box fits within 10 tries, and the box (i, j, h, w), against
    RandomErasing's forward (get_params returns the whole image when no box fits)."""
    samples = sampler([{"op": "resize", "size": [24, 32]}, {"op": "normalize"},
                       {"op": "random_erasing", "p": 0.6, "scale": scale}], photo="32x24", output=FLOAT)
    img = torch.zeros((3, 24, 32))
    calls = forward_calls(T.RandomErasing(p=0.6, scale=tuple(scale)), kernels("erase"), img)
    same_distribution("applied", column(samples, "applied"), [len(c) == 1 for c in calls], "chi2")
    boxes = [c[0][1][:4] for c in calls if c and c[0][1][4] is not img]
    same_distribution("box found", [len(x) for x in per_sample(samples, "i")],
                      [int(bool(c) and c[0][1][4] is not img) for c in calls], "chi2")
    for k, name in enumerate("ijhw"):
        same_distribution(name, column(samples, name), [b[k] for b in boxes], "ks")


def test_random_erasing_timm_count(sampler):
    """random_erasing with max_count 3 and timm's ratio range: the number of boxes and the boxes, against timm's
    RandomErasing._erase rules (random.randint count, area / count a box, 10 tries each)."""
    ratio = [0.3, 1 / 0.3]
    samples = sampler([{"op": "resize", "size": [24, 32]}, {"op": "normalize"},
                       {"op": "random_erasing", "p": 0.5, "scale": [0.02, 1 / 3], "ratio": ratio,
                        "value": "random", "max_count": 3}], photo="32x24", output=FLOAT)
    random.seed(SEED)
    img_h, img_w, area = 24, 32, 24 * 32
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    applied, counts, boxes = [], [], []
    for _ in range(N):
        applied.append(not random.random() > 0.5)
        if not applied[-1]:
            counts.append(0)
            continue
        count = random.randint(1, 3)
        found = 0
        for _ in range(count):
            for _ in range(10):
                target_area = random.uniform(0.02, 1 / 3) * area / count
                aspect_ratio = math.exp(random.uniform(*log_ratio))
                h = int(round(math.sqrt(target_area * aspect_ratio)))
                w = int(round(math.sqrt(target_area / aspect_ratio)))
                if w < img_w and h < img_h:
                    boxes.append((random.randint(0, img_h - h), random.randint(0, img_w - w), h, w))
                    found += 1
                    break
        counts.append(found)
    same_distribution("applied", column(samples, "applied"), applied, "chi2")
    same_distribution("boxes", [len(x) for x in per_sample(samples, "i")], counts, "chi2")
    for k, name in enumerate("ijhw"):
        same_distribution(name, column(samples, name), [b[k] for b in boxes], "ks")


# ---------------------------------------------------------------------------------------------------- batch ops

def ferry_batches(ferry, op, height, width, n=N):
    """n batches of 2 rows through mixup_cutmix (Pipeline.finish): each batch's {name: value} draws."""
    pipeline = ferry._ferry.Pipeline(json.dumps({
        "ops": [{"op": "resize", "size": [height, width]}, {"op": "normalize"}, op], "output": FLOAT}))
    images = np.zeros((2, height, width, 3), dtype=np.uint8)
    labels = np.array([0, 1], dtype=np.int64)
    out = []
    for b in range(n):
        indices = np.array([2 * b, 2 * b + 1], dtype=np.int64)
        _, _, draws = pipeline.finish(images, indices, labels, 2, SEED, 0, b, record=True)
        out.append(dict(draws))
    return out


def _kind(d):
    return "none" if not d["mixed"] else ("cutmix" if d["cutmix"] else "mixup")


def test_mixup_cutmix_torchvision(ferry):
    """mixup_cutmix as the reference scripts run it, RandomChoice([RandomMixup(p=1, alpha=0.2),
    RandomCutmix(p=1, alpha=1.0)]) on 16x12 batches: which one (switch 0.5), MixUp's lam, CutMix's corrected lam."""
    op = {"op": "mixup_cutmix", "num_classes": 2, "mixup_alpha": 0.2, "cutmix_alpha": 1.0, "switch_prob": 0.5,
          "prob": 1.0, "partner": "roll", "cutmix_box": "torchvision"}
    mine = ferry_batches(ferry, op, 12, 16)
    spec = importlib.util.spec_from_file_location("reference_transforms", os.path.join(HERE, "reference",
                                                                                       "transforms.py"))
    ref_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref_module)
    kinds = []

    def tagged(kind, t):
        def run(*args):
            kinds.append(kind)
            return t(*args)
        return run
    choice = T.RandomChoice([tagged("mixup", ref_module.RandomMixup(2, p=1.0, alpha=0.2)),
                             tagged("cutmix", ref_module.RandomCutmix(2, p=1.0, alpha=1.0))])
    batch, target = torch.zeros((2, 3, 12, 16)), torch.tensor([0, 1])
    random.seed(SEED)
    torch.manual_seed(SEED)
    with torch.inference_mode():
        lams = [float(choice(batch, target)[1][0, 0]) for _ in range(N)]  # row 0: lam * [1, 0] + (1 - lam) * [0, 1]
    same_distribution("kind", [_kind(d) for d in mine], kinds, "chi2")
    for kind in ("mixup", "cutmix"):
        same_distribution("%s lam" % kind, [d["lam"] for d in mine if _kind(d) == kind],
                          [lam for k, lam in zip(kinds, lams) if k == kind], "ks")


def test_mixup_cutmix_timm(ferry):
    """mixup_cutmix as timm's Mixup (mode "batch", mixup 0.8, cutmix 1.0, prob 0.8, switch 0.5, correct_lam) on
    16x12 batches: none / mixup / cutmix, and each one's lam (CutMix's from timm's rand_bbox)."""
    op = {"op": "mixup_cutmix", "num_classes": 2, "mixup_alpha": 0.8, "cutmix_alpha": 1.0, "switch_prob": 0.5,
          "prob": 0.8, "label_smoothing": 0.1, "partner": "flip", "cutmix_box": "timm"}
    mine = ferry_batches(ferry, op, 12, 16)
    np.random.seed(SEED % 2**32)
    img_h, img_w = 12, 16
    kinds, lams = [], []
    for _ in range(N):  # Mixup._params_per_batch, then cutmix_bbox_and_lam(correct_lam=True)
        lam, use_cutmix, mixed = 1.0, False, False
        if np.random.rand() < 0.8:
            mixed = True
            use_cutmix = np.random.rand() < 0.5
            lam = float(np.random.beta(1.0, 1.0) if use_cutmix else np.random.beta(0.8, 0.8))
        if use_cutmix:
            ratio = np.sqrt(1 - lam)
            cut_h, cut_w = int(img_h * ratio), int(img_w * ratio)
            cy, cx = np.random.randint(0, img_h), np.random.randint(0, img_w)
            yl, yh = np.clip(cy - cut_h // 2, 0, img_h), np.clip(cy + cut_h // 2, 0, img_h)
            xl, xh = np.clip(cx - cut_w // 2, 0, img_w), np.clip(cx + cut_w // 2, 0, img_w)
            lam = 1.0 - (yh - yl) * (xh - xl) / float(img_h * img_w)
        kinds.append("none" if not mixed else ("cutmix" if use_cutmix else "mixup"))
        lams.append(lam)
    same_distribution("kind", [_kind(d) for d in mine], kinds, "chi2")
    for kind in ("mixup", "cutmix"):
        same_distribution("%s lam" % kind, [d["lam"] for d in mine if _kind(d) == kind],
                          [lam for k, lam in zip(kinds, lams) if k == kind], "ks")


# ------------------------------------------------------------------------------------------------ timm policies

TIMM_RAND_INCREASING = ["AutoContrast", "Equalize", "Invert", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing",
                        "SolarizeAdd", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing",
                        "SharpnessIncreasing", "ShearX", "ShearY", "TranslateXRel", "TranslateYRel"]
TIMM_AUGMIX = ["AutoContrast", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing",
               "Equalize", "Rotate", "PosterizeIncreasing", "SolarizeIncreasing", "ShearX", "ShearY", "TranslateXRel",
               "TranslateYRel"]
# The ops whose level function calls _randomly_negate (random.random() > 0.5).
TIMM_NEGATED = {"Rotate", "ColorIncreasing", "ContrastIncreasing", "BrightnessIncreasing", "SharpnessIncreasing",
                "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel"}


def timm_augment_op(name, prob, magnitude, magnitude_std, record):
    """timm's AugmentOp.__call__ draws (and its level function's sign), recorded as Ferry names them."""
    if prob < 1.0 and random.random() > prob:
        record.append(("applied", 0))
        return
    record.append(("applied", 1))
    if magnitude_std == float("inf"):
        magnitude = random.uniform(0, magnitude)
    elif magnitude_std > 0:
        magnitude = random.gauss(magnitude, magnitude_std)
    record.append(("magnitude", max(0.0, min(magnitude, 10.0))))
    if name in TIMM_NEGATED:
        record.append(("negated", int(random.random() > 0.5)))


# timm's _RAND_WEIGHTED_0 ("rand-...-tweights"): op -> weight, normalised into choice probabilities.
TIMM_WEIGHTED_0 = {"Rotate": 3, "ShearX": 2, "ShearY": 2, "TranslateXRel": 1, "TranslateYRel": 1,
                   "ColorIncreasing": .25, "SharpnessIncreasing": 0.25, "AutoContrast": 0.25, "SolarizeIncreasing": .05,
                   "SolarizeAdd": .05, "ContrastIncreasing": .05, "BrightnessIncreasing": .05, "Equalize": .05,
                   "PosterizeIncreasing": 0.05, "Invert": 0.05}


@pytest.mark.parametrize("config", ["rand-m9-mstd0.5-inc1", "rand-m7-n3-mstd0.5-tweights"])
def test_timm_rand_augment(sampler, config):
    """timm_rand_augment: each layer's op, the ops together, applied (p 0.5), the noised magnitude, the sign, and
    (ops, applied, negated) jointly, against timm's RandAugment (np.random.choice of the layers' ops: with
    replacement, or without it and weighted for "tweights", which Ferry takes as explicit ops and weights; then
    each AugmentOp)."""
    op = {"op": "timm_rand_augment", "config": config}
    if "tweights" in config:
        names = list(TIMM_WEIGHTED_0)
        weights = np.array([TIMM_WEIGHTED_0[k] for k in names])
        op.update(config="rand-m7-n3-mstd0.5", ops=names, weights=weights.tolist())
        weights = weights / np.sum(weights)  # timm's _get_weighted_transforms
        layers, magnitude = 3, 7
    else:
        names, weights, layers, magnitude = TIMM_RAND_INCREASING, None, 2, 9
    samples = sampler([{"op": "resize", "size": [12, 16]}, op])
    random.seed(SEED)
    np.random.seed(SEED % 2**32)
    ref = []
    for _ in range(N):
        record = []
        picks = np.random.choice(len(names), layers, replace=weights is None, p=weights)
        record += [("op", int(k)) for k in picks]
        for k in picks:
            timm_augment_op(names[k], 0.5, magnitude, 0.5, record)
        ref.append(record)
    mine_ops, ref_ops = per_sample(samples, "op"), per_sample(ref, "op")
    for layer in range(layers):
        same_distribution("op %d" % layer, [x[layer] for x in mine_ops], [x[layer] for x in ref_ops], "chi2")
    same_distribution("ops", mine_ops, ref_ops, "chi2")
    for name, test in (("applied", "chi2"), ("magnitude", "ks"), ("negated", "chi2")):
        same_distribution(name, column(samples, name), column(ref, name), test)

    def joint(s):
        ops = [int(v) for k, v in s if k == "op"]
        rest = [(k, int(v)) for k, v in s if k in ("applied", "negated")]
        return (tuple(ops), tuple(rest))
    same_distribution("(ops, applied, negated)", [joint(s) for s in samples], [joint(s) for s in ref], "chi2")


def test_timm_augmix(sampler):
    """timm_augmix "augmix-m5-w4-d2": the 4 mixing weights (float32 Dirichlet), m (Beta), each op's magnitude
    (uniform in [0, 5]: mstd inf), its sign, and how many of a sample's 8 ops negate (the op choice), against timm's
    AugMixAugment."""
    samples = sampler([{"op": "resize", "size": [4, 4]}, {"op": "timm_augmix", "config": "augmix-m5-w4-d2"}])
    random.seed(SEED)
    np.random.seed(SEED % 2**32)
    ref = []
    for _ in range(N):
        record = [("weight", float(w)) for w in np.float32(np.random.dirichlet([1.0] * 4))]
        record.append(("m", float(np.float32(np.random.beta(1.0, 1.0)))))
        for _ in range(4):
            for k in np.random.choice(len(TIMM_AUGMIX), 2, replace=True):
                timm_augment_op(TIMM_AUGMIX[k], 1.0, 5, float("inf"), record)
        ref.append(record)
    for name, test in (("weight", "ks"), ("m", "ks"), ("magnitude", "ks"), ("negated", "chi2")):
        same_distribution(name, column(samples, name), column(ref, name), test)
    same_distribution("ops a sample that negate", [len(x) for x in per_sample(samples, "negated")],
                      [len(x) for x in per_sample(ref, "negated")], "chi2")
    assert set(column(samples, "applied")) == {1.0} and len(column(samples, "applied")) == 8 * N


# ------------------------------------------------------------------------------------------- the tests' own power

def test_the_tests_reject_wrong_distributions(sampler):
    """The statistics reject a reference slightly off Ferry's draws, and accept one drawn from the right
    distribution: random_rotation's angles against a uniform shifted by 3 degrees (4% of its range), hflip against
    Bernoulli(0.55), color_jitter's 24 orders against a permutation that moves 30% of two orders' mass to a third."""
    rng = np.random.RandomState(SEED % 2**32)
    angles = column(sampler([{"op": "resize", "size": [8, 8]}, {"op": "random_rotation", "degrees": [-30, 45]}]),
                    "angle")
    assert ks_2samp(angles, rng.uniform(-27, 48, N))[1] < ALPHA
    assert ks_2samp(angles, rng.uniform(-30, 45, N))[1] >= ALPHA
    flips = [s[0][1] for s in sampler(BERNOULLI_OPS)]  # hflip, p = 0.5
    assert chi2_2samp(flips, rng.uniform(size=N) < 0.55)[2] < ALPHA
    assert chi2_2samp(flips, rng.uniform(size=N) < 0.5)[2] >= ALPHA
    orders = [tuple(int(v) for k, v in s if k.startswith("order")) for s in sampler(
        [{"op": "resize", "size": [4, 4]},
         {"op": "color_jitter", "brightness": 0.4, "contrast": 0.4, "saturation": 0.4, "hue": 0.1}])]
    perms = [tuple(rng.permutation(4).tolist()) for _ in range(N)]
    biased = [(1, 0, 3, 2) if p in ((0, 1, 2, 3), (3, 2, 1, 0)) and rng.uniform() < 0.3 else p for p in perms]
    assert chi2_2samp(orders, biased)[2] < ALPHA
    assert chi2_2samp(orders, perms)[2] >= ALPHA
