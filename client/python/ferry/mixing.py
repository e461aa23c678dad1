"""Batch-level mixing as training scripts write it, for ferry.DataLoader's collate_fn:
a collate_fn Ferry recognises as MixUp/CutMix runs natively (the pipeline's
`mixup_cutmix` op, on the workers or where the float32 batch is made); any other runs on
the trainer, on the batch's samples, as a fallback whose cost is measured.

Recognised (the mixing object itself, or a function or lambda that calls
default_collate and holds one in its closure or globals, as the reference scripts'
`collate_fn(batch): return mixup_cutmix(*default_collate(batch))`):
  - torchvision.transforms.v2's MixUp and CutMix, and a RandomChoice of them;
  - the torchvision reference scripts' RandomMixup and RandomCutmix (with their p), and a
    RandomChoice of them;
  - timm's Mixup (mode "batch", no cutmix_minmax); its mixup_enabled (False: no
    mixing, the targets still smoothed) is read again at each epoch's start.
"""
import time


__all__ = ["mix_op", "TrainerCollate"]


def _cls(o):
    return type(o).__name__


def _one(m):
    """(kind, alpha, p) of one mixing transform, or None."""
    name = _cls(m)
    if name in ("MixUp", "RandomMixup") and hasattr(m, "alpha") and hasattr(m, "num_classes"):
        return "mixup", float(m.alpha), float(getattr(m, "p", 1.0)), int(m.num_classes)
    if name in ("CutMix", "RandomCutmix") and hasattr(m, "alpha") and hasattr(m, "num_classes"):
        return "cutmix", float(m.alpha), float(getattr(m, "p", 1.0)), int(m.num_classes)
    return None


def _from_object(m):
    """(op, why not): the mixup_cutmix op of a mixing object."""
    name = _cls(m)
    if name == "Mixup" and type(m).__module__.startswith("timm."):
        if getattr(m, "mode", "batch") != "batch":
            return None, "timm's Mixup with mode=%r (Ferry runs mode='batch')" % m.mode
        if getattr(m, "cutmix_minmax", None) is not None:
            return None, "timm's Mixup with cutmix_minmax"
        if not getattr(m, "correct_lam", True):
            return None, "timm's Mixup with correct_lam=False"
        return {"op": "mixup_cutmix", "mixup_alpha": float(m.mixup_alpha), "cutmix_alpha": float(m.cutmix_alpha),
                # mixup_enabled=False (timm's train.py at --mixup-off-epoch): no mixing,
                # the targets still smoothed, as timm's Mixup then gives them.
                "prob": float(m.mix_prob) if getattr(m, "mixup_enabled", True) else 0.0,
                "switch_prob": float(m.switch_prob),
                "label_smoothing": float(m.label_smoothing), "num_classes": int(m.num_classes), "partner": "flip",
                "cutmix_box": "timm"}, None
    one = _one(m)
    if one is not None:
        kind, alpha, p, k = one
        return {"op": "mixup_cutmix", "mixup_alpha": alpha if kind == "mixup" else 0.0,
                "cutmix_alpha": alpha if kind == "cutmix" else 0.0, "prob": p, "num_classes": k, "partner": "roll",
                "cutmix_box": "torchvision"}, None
    if name == "RandomChoice":
        parts = [_one(t) for t in m.transforms]
        if not parts or any(x is None for x in parts):
            return None, "a RandomChoice of transforms other than MixUp/CutMix"
        kinds = [x[0] for x in parts]
        if sorted(kinds) != ["cutmix", "mixup"] and len(parts) != 1:
            return None, "a RandomChoice of %s (Ferry runs one MixUp and one CutMix)" % kinds
        weights = list(getattr(m, "p", None) or [1.0] * len(parts))
        if len({x[2] for x in parts}) != 1:
            return None, "a RandomChoice of MixUp and CutMix with different p"
        if len({x[3] for x in parts}) != 1:
            return None, "MixUp and CutMix with different num_classes"
        mix = {x[0]: x for x in parts}
        w = dict(zip(kinds, weights))
        total = sum(weights)
        return {"op": "mixup_cutmix", "mixup_alpha": mix["mixup"][1] if "mixup" in mix else 0.0,
                "cutmix_alpha": mix["cutmix"][1] if "cutmix" in mix else 0.0,
                "switch_prob": float(w.get("cutmix", 0.0) / total) if total > 0 else 0.5, "prob": parts[0][2],
                "num_classes": parts[0][3], "partner": "roll", "cutmix_box": "torchvision"}, None
    return None, None


def mix_op(collate_fn):
    """(op or None, why): the mixup_cutmix op `collate_fn` amounts to; None (and why,
    when there is something to say) when Ferry does not recognise it."""
    if collate_fn is None:
        return None, None
    op, why = _from_object(collate_fn)
    if op is not None or why is not None:
        return op, why
    code = getattr(collate_fn, "__code__", None)
    if code is None:
        return None, "%s is not a function Ferry can see through" % _cls(collate_fn)
    seen = []
    for cell in getattr(collate_fn, "__closure__", None) or ():
        try:
            seen.append(cell.cell_contents)
        except ValueError:
            pass
    globs = getattr(collate_fn, "__globals__", {})
    seen += [globs[n] for n in code.co_names if n in globs]
    found = []
    for obj in seen:
        op, why = _from_object(obj)
        if op is not None:
            found.append(op)
        elif why is not None:
            return None, why
    names = set(code.co_names) | set(code.co_freevars)
    calls_default = "default_collate" in names or any(getattr(o, "__name__", "") == "default_collate" for o in seen)
    if len(found) == 1 and calls_default:
        return found[0], None
    if len(found) > 1:
        return None, "the collate_fn holds several mixing transforms"
    return None, "%s is not a MixUp/CutMix collate Ferry recognises" % getattr(collate_fn, "__name__", "it")


class TrainerCollate:
    """The fallback: the user's collate_fn, on the trainer, over the batch's samples
    (image tensor, int label) as the dataset would have returned them; its time is
    counted (seconds)."""

    def __init__(self, collate_fn):
        self.fn = collate_fn
        self.seconds = 0.0
        self.batches = 0

    def __call__(self, images, labels, valid):
        t0 = time.perf_counter()
        # The labels as Python ints in one transfer (on a GPU host the batch is on the
        # device: an int() a row would synchronize with it a row at a time).
        ints = labels[:int(valid)].tolist()
        samples = [(images[i], ints[i]) for i in range(int(valid))]
        out = self.fn(samples)
        self.seconds += time.perf_counter() - t0
        self.batches += 1
        return out


