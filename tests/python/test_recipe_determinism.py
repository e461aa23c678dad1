"""Every random op at once, through 1, 2 and 3 workers: the batches (pixels and MixUp/CutMix
soft targets) are identical whatever the worker count, and identical to the in-process
loader's, whether the float32 is made on the workers or on the trainer (uint8 on the
wire). And MixUp/CutMix's own properties: every soft target row sums to 1, lambda
follows Beta(alpha, alpha), CutMix's lambda is the pasted area's share, MixUp's images
are lambda x_i + (1 - lambda) x_partner."""
import json
import math

import numpy as np
import pytest
import torch

from test_binding import LocalCluster

EVERY_RANDOM_OP = {"ops": [
    {"op": "random_resized_crop", "size": [40, 56], "interpolation": "bicubic"},
    {"op": "hflip"},
    {"op": "random_rotation", "degrees": 15, "interpolation": "bilinear"},
    {"op": "random_affine", "degrees": 5, "translate": [0.1, 0.1], "scale": [0.9, 1.1], "shear": [-5, 5, -3, 3]},
    {"op": "random_perspective", "distortion_scale": 0.3, "p": 0.5},
    {"op": "color_jitter", "brightness": 0.3, "contrast": 0.3, "saturation": 0.3, "hue": 0.1},
    {"op": "random_grayscale", "p": 0.2},
    {"op": "gaussian_blur", "kernel_size": 3},
    {"op": "random_apply", "p": 0.5, "ops": [{"op": "random_solarize", "threshold": 128}, {"op": "random_posterize",
                                                                                           "bits": 4}]},
    {"op": "random_choice", "ops": [{"op": "random_equalize"}, {"op": "random_autocontrast"},
                                    {"op": "random_invert"}]},
    {"op": "random_order", "ops": [{"op": "vflip"}, {"op": "random_adjust_sharpness", "sharpness_factor": 2}]},
    {"op": "rand_augment"},
    {"op": "trivial_augment_wide"},
    {"op": "auto_augment"},
    {"op": "augmix"},
    {"op": "timm_rand_augment", "config": "rand-m9-mstd0.5-inc1"},
    {"op": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    {"op": "random_erasing", "p": 0.5, "value": "random"},
    {"op": "mixup_cutmix", "num_classes": 3, "mixup_alpha": 0.2, "cutmix_alpha": 1.0},
]}


def epoch(loader):
    out = []
    for x, t in loader:
        out.append((x.clone(), t.clone()))
    return out


def same(a, b):
    return len(a) == len(b) and all(torch.equal(p[0], q[0]) and torch.equal(p[1], q[1]) for p, q in zip(a, b))


def test_every_random_op_gives_the_same_batches_on_1_2_and_3_workers(ferry, ferry_local, small_tree):
    kw = dict(data=small_tree, pipeline=EVERY_RANDOM_OP, batch_size=10, seed=11, epochs=1, drop_last=False)
    want = epoch(ferry.Loader(threads=2, **kw))
    assert len(want) == 12 and want[0][0].shape == (10, 3, 40, 56) and want[0][1].shape == (10, 3)
    for x, t in want:
        assert torch.allclose(t.sum(1), torch.ones(t.shape[0]), atol=1e-6), "soft target rows sum to 1"
    for workers in (1, 2, 3):
        cluster = LocalCluster(ferry_local, workers=workers)
        try:
            # uint8 on the wire, the float32, erasing and MixUp/CutMix made on the trainer
            got = epoch(ferry.Loader(dispatcher=cluster.dispatcher, job_name="every-op-%d" % workers,
                                     deterministic=True, **kw))
            assert same(got, want), "%d worker(s), trainer-made float32: not the in-process batches" % workers
            if workers == 2:  # float32 (and its targets) made on the workers, through the wire
                got = epoch(ferry.Loader(dispatcher=cluster.dispatcher, job_name="every-op-f32", deterministic=True,
                                         trainer_normalize=False, **kw))
                assert same(got, want), "worker-made float32: not the in-process batches"
        finally:
            cluster.close()


def finish(ferry, spec, images, labels, batch_in_epoch, seed=5):
    p = ferry._ferry.Pipeline(json.dumps(spec))
    n = images.shape[0]
    out, targets, draws = p.finish(images, np.arange(n, dtype=np.int64) + 1000 * batch_in_epoch, labels, n, seed, 0,
                                   batch_in_epoch, record=True)
    return out, targets, dict(draws)


def mix_spec(mixup, cutmix, k):
    return {"ops": [{"op": "resize", "size": [20, 30]}, {"op": "normalize"},
                    {"op": "mixup_cutmix", "num_classes": k, "mixup_alpha": mixup, "cutmix_alpha": cutmix}],
            "output": {"dtype": "float32", "layout": "NCHW"}}


def constant_batch(n):
    """Row i: the constant image 10 * (i + 1) (so each pixel tells its row), label i."""
    images = np.stack([np.full((20, 30, 3), 10 * (i + 1), np.uint8) for i in range(n)])
    return images, np.arange(n, dtype=np.int64)


def test_cutmix_lambda_is_the_pasted_area_share(ferry):
    n = 6
    images, labels = constant_batch(n)
    for b in range(40):
        out, targets, d = finish(ferry, mix_spec(0.0, 1.0, n), images, labels, b)
        assert d["cutmix"] == 1 and d["mixed"] == 1
        for i in range(n):
            partner = (i - 1) % n  # torchvision's batch.roll(1, 0)
            own = np.isclose(out[i], (10 * (i + 1)) / 255.0).all(axis=0).mean()
            pasted = np.isclose(out[i], (10 * (partner + 1)) / 255.0).all(axis=0).mean()
            assert abs(own + pasted - 1) < 1e-9
            assert abs(targets[i, i] - own) < 1e-5, "lambda = the row's own area"
            assert abs(targets[i, partner] - pasted) < 1e-5, "1 - lambda = the pasted box's share"
            assert abs(targets[i].sum() - 1) < 1e-5


def test_mixup_images_and_targets_mix_by_lambda(ferry):
    n = 5
    images, labels = constant_batch(n)
    for b in range(20):
        out, targets, d = finish(ferry, mix_spec(0.4, 0.0, n), images, labels, b)
        lam = d["lam"]
        assert d["cutmix"] == 0 and 0 <= lam <= 1
        for i in range(n):
            partner = (i - 1) % n
            want = (lam * 10 * (i + 1) + (1 - lam) * 10 * (partner + 1)) / 255.0
            assert np.allclose(out[i], want, atol=1e-5)
            assert abs(targets[i, i] - lam) < 1e-5 and abs(targets[i, partner] - (1 - lam)) < 1e-5


def ks_two_sample(a, b):
    """The two-sample Kolmogorov-Smirnov statistic and its asymptotic p-value."""
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    d = np.max(np.abs(np.searchsorted(a, grid, side="right") / len(a) - np.searchsorted(b, grid, side="right")
                      / len(b)))
    ne = len(a) * len(b) / (len(a) + len(b))
    lam = (math.sqrt(ne) + 0.12 + 0.11 / math.sqrt(ne)) * d
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * (k * lam) ** 2) for k in range(1, 101))
    return d, max(0.0, min(1.0, p))


@pytest.mark.parametrize("alpha", [0.2, 1.0])
def test_mixup_lambda_follows_beta(ferry, alpha):
    """10,000 batches' lambda against 10,000 draws of numpy's Beta(alpha, alpha): the
    two-sample Kolmogorov-Smirnov test, p >= 0.001 (fixed seeds: deterministic)."""
    images, labels = constant_batch(2)
    spec = mix_spec(alpha, 0.0, 2)
    p = ferry._ferry.Pipeline(json.dumps(spec))
    lams = []
    for b in range(10000):
        _, _, draws = p.finish(images, np.array([b, b + 1], np.int64), labels, 2, 9, 0, b, record=True)
        lams.append(dict(draws)["lam"])
    ref = np.random.default_rng(0).beta(alpha, alpha, 10000)
    d, pvalue = ks_two_sample(np.array(lams), ref)
    assert pvalue >= 1e-3, "lambda is not Beta(%g, %g): KS D=%.4f p=%.2g" % (alpha, alpha, d, pvalue)
