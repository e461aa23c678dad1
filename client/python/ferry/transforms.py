"""Transform translation: a torchvision (transforms or transforms.v2) or timm transform,
as the training scripts build them, into a Ferry pipeline spec whose ops do the same.

    spec = ferry.pipeline_from_transform(ClassificationPresetTrain(crop_size=176, ...))

What is seen through: a Compose, nested Composes, any object whose `.transforms` (or
`.transform`) attribute is a transform (the reference scripts' preset classes), and
RandomApply / RandomChoice / RandomOrder of supported transforms. Every parameter is
carried over; what cannot be honoured raises ValueError naming the transform and what
to do, and nothing is dropped silently. The README's table lists every transform and
what Ferry does with it.

Images stay uint8 until ToTensor, PILToTensor + ConvertImageDtype(float32), or v2's
ToImage + ToDtype(float32, scale=True): that point, with Normalize, is Ferry's
`normalize` op (fused with the float conversion). After it only tensor ops may follow
(RandomErasing; flips, which commute with Normalize, move before it).
"""
import math
import numbers

import torch

__all__ = ["pipeline_from_transform", "translate", "translate_detection", "translate_segmentation"]

# Interpolation names Ferry runs (torchvision's InterpolationMode values; PIL's ints).
_INTERP = {"nearest": "nearest", "bilinear": "bilinear", "bicubic": "bicubic", 0: "nearest", 2: "bilinear",
           3: "bicubic"}


def _name(t):
    return type(t).__name__


def _module(t):
    return type(t).__module__ or ""


def _is_timm(t):
    return _module(t).startswith("timm.")


def _interp(mode, what):
    """A Ferry interpolation name, or ValueError."""
    value = getattr(mode, "value", mode)
    if isinstance(value, str):
        value = value.lower()
    if value in _INTERP:
        return _INTERP[value]
    raise ValueError("ferry cannot run %s with interpolation=%s: it runs nearest, bilinear and bicubic (with "
                     "torchvision's antialiasing on PIL images)" % (what, getattr(mode, "name", mode)))


def _size(size, what):
    """An int (shorter side / square) or [h, w]."""
    if isinstance(size, numbers.Number):
        return int(size)
    size = list(size)
    if len(size) == 1:
        return int(size[0])
    if len(size) == 2:
        return [int(size[0]), int(size[1])]
    raise ValueError("ferry cannot run %s with size=%r" % (what, size))


def _fill(fill, what):
    """torchvision's fill for PIL images: None -> 0, a number, or one per channel."""
    if fill is None:
        return 0
    if isinstance(fill, dict):  # v2: {type: fill}
        values = [v for v in fill.values() if v is not None]
        if not values:
            return 0
        fill = values[0]
    if isinstance(fill, numbers.Number):
        return fill
    fill = [float(x) for x in fill]
    if len(fill) not in (1, 3):
        raise ValueError("ferry cannot run %s with fill=%r (one value, or one per channel)" % (what, fill))
    return fill


def _range(value, what, name, centre=None):
    if value is None:
        return None
    if isinstance(value, numbers.Number):
        if centre is None:
            return float(value)
        return [centre - float(value), centre + float(value)]
    value = [float(x) for x in value]
    if len(value) != 2:
        raise ValueError("ferry cannot run %s with %s=%r" % (what, name, value))
    return value


class _State:
    """Where the transform stands: "pil" (uint8 image), "uint8" (uint8 CHW tensor:
    PILToTensor/ToImage, still an image to Ferry), "float" (ToTensor or a float dtype
    conversion: tensor ops only)."""

    def __init__(self):
        self.stage = "pil"
        self.normalized = False
        self.ops = []        # image ops
        self.tensor_ops = []  # after the float conversion (normalize first)
        self.coco_targets = False  # the detection reference's ConvertCocoPolysToMask was seen
        self.overrides = {}  # handlers by class name that win over the table (a reference's own classes)


def _image_op(state, op, what):
    if state.stage == "float":
        raise ValueError("ferry cannot run %s after the image became a float tensor (ToTensor / "
                         "ConvertImageDtype): put it before" % what)
    state.ops.append(op)


def _translate_list(ts):
    """Nested image ops (RandomApply / RandomChoice / RandomOrder)."""
    inner = _State()
    for t in ts:
        _translate_one(t, inner)
    if inner.stage != "pil" or inner.tensor_ops:
        raise ValueError("ferry runs RandomApply / RandomChoice / RandomOrder of image transforms only, not of "
                         "tensor conversions")
    return inner.ops


def _children(t):
    """The transforms a container holds, or None."""
    for attr in ("transforms", "transform"):
        inner = getattr(t, attr, None)
        if inner is None or inner is t:
            continue
        if isinstance(inner, (list, tuple, torch.nn.ModuleList)):
            return list(inner)
        if callable(inner):
            return [inner]
    return None


def _translate_one(t, state):
    name = _name(t)
    if _is_timm(t):
        return _translate_timm(t, name, state)
    # -- containers
    if name == "Compose" or (name not in _TORCHVISION and _children(t) is not None and not _is_transform_class(t)):
        for inner in _children(t) or []:
            _translate_one(inner, state)
        return
    handler = state.overrides.get(name) or _TORCHVISION.get(name)
    if handler is None:
        raise Unknown(
            "ferry cannot run %s (%s) natively: it is not a transform Ferry knows, nor an object whose .transforms "
            "or .transform it can see through. ferry.DataLoader runs it, and what follows it, in the workers' "
            "Python (--allow-user-code); or use the transforms the README's table lists, or give pipeline= (a "
            "Ferry spec)" % (name, _module(t) or "?"))
    handler(t, state)


class Unknown(ValueError):
    """A step Ferry has no op for (the user's own function or class, a Lambda, a
    transform it does not know): ferry.DataLoader runs it, and what follows, in the
    workers' Python. Other ValueErrors are steps Ferry knows, given what it cannot
    honour (a parameter, a place in the transform): those stay errors."""


def _is_transform_class(t):
    return _module(t).startswith("torchvision.transforms")


# -- torchvision ------------------------------------------------------------------------

def _rrc(t, s):
    _image_op(s, {"op": "random_resized_crop", "size": _size(t.size, "RandomResizedCrop"),
                  "scale": [float(x) for x in t.scale], "ratio": [float(x) for x in t.ratio],
                  "interpolation": _interp(t.interpolation, "RandomResizedCrop")}, "RandomResizedCrop")


def _resize(t, s):
    op = {"op": "resize", "size": _size(t.size, "Resize"), "interpolation": _interp(t.interpolation, "Resize")}
    if getattr(t, "max_size", None) is not None:
        op["max_size"] = int(t.max_size)
    _image_op(s, op, "Resize")


def _center_crop(t, s):
    _image_op(s, {"op": "center_crop", "size": _size(t.size, "CenterCrop")}, "CenterCrop")


def _padding(padding):
    if padding is None:
        return 0
    if isinstance(padding, numbers.Number):
        return int(padding)
    return [int(x) for x in padding]


def _random_crop(t, s):
    _image_op(s, {"op": "random_crop", "size": _size(t.size, "RandomCrop"), "padding": _padding(t.padding),
                  "pad_if_needed": bool(t.pad_if_needed), "fill": _fill(t.fill, "RandomCrop"),
                  "padding_mode": t.padding_mode}, "RandomCrop")


def _pad(t, s):
    _image_op(s, {"op": "pad", "padding": _padding(t.padding), "fill": _fill(t.fill, "Pad"),
                  "padding_mode": t.padding_mode}, "Pad")


def _flip(kind):
    def handler(t, s):
        op = {"op": kind, "p": float(t.p)}
        if s.stage == "float":
            s.ops.append(op)  # a flip commutes with ToTensor and Normalize: run it on the image
        else:
            _image_op(s, op, kind)
    return handler


def _rotation(t, s):
    _image_op(s, {"op": "random_rotation", "degrees": [float(x) for x in t.degrees],
                  "interpolation": _interp(t.interpolation, "RandomRotation"), "expand": bool(t.expand),
                  "center": None if t.center is None else [float(x) for x in t.center],
                  "fill": _fill(t.fill, "RandomRotation")}, "RandomRotation")


def _affine(t, s):
    op = {"op": "random_affine", "degrees": [float(x) for x in t.degrees],
          "interpolation": _interp(t.interpolation, "RandomAffine"), "fill": _fill(t.fill, "RandomAffine"),
          "center": None if t.center is None else [float(x) for x in t.center]}
    if t.translate is not None:
        op["translate"] = [float(x) for x in t.translate]
    if t.scale is not None:
        op["scale"] = [float(x) for x in t.scale]
    if t.shear is not None:
        op["shear"] = [float(x) for x in t.shear]
    _image_op(s, op, "RandomAffine")


def _perspective(t, s):
    _image_op(s, {"op": "random_perspective", "distortion_scale": float(t.distortion_scale), "p": float(t.p),
                  "interpolation": _interp(t.interpolation, "RandomPerspective"),
                  "fill": _fill(t.fill, "RandomPerspective")}, "RandomPerspective")


def _jitter_range(value, centre):
    """ColorJitter keeps (lo, hi) or None."""
    if value is None:
        return [centre, centre]
    if isinstance(value, numbers.Number):
        v = float(value)
        return [max(0.0, centre - v), centre + v] if centre == 1.0 else [-v, v]
    return [float(value[0]), float(value[1])]


def _color_jitter(t, s):
    _image_op(s, {"op": "color_jitter", "brightness": _jitter_range(t.brightness, 1.0),
                  "contrast": _jitter_range(t.contrast, 1.0), "saturation": _jitter_range(t.saturation, 1.0),
                  "hue": _jitter_range(t.hue, 0.0)}, "ColorJitter")


def _grayscale(t, s):
    _image_op(s, {"op": "grayscale", "num_output_channels": int(t.num_output_channels)}, "Grayscale")


def _random_grayscale(t, s):
    _image_op(s, {"op": "random_grayscale", "p": float(t.p)}, "RandomGrayscale")


def _gaussian_blur(t, s):
    k = t.kernel_size
    k = [int(k), int(k)] if isinstance(k, numbers.Number) else [int(x) for x in k]
    _image_op(s, {"op": "gaussian_blur", "kernel_size": k, "sigma": [float(x) for x in t.sigma]}, "GaussianBlur")


def _simple(op, *params):
    def handler(t, s):
        d = {"op": op}
        for name, attr, cast in params:
            d[name] = cast(getattr(t, attr))
        _image_op(s, d, _name(t))
    return handler


def _rand_augment(t, s):
    _image_op(s, {"op": "rand_augment", "num_ops": int(t.num_ops), "magnitude": int(t.magnitude),
                  "num_magnitude_bins": int(t.num_magnitude_bins),
                  "interpolation": _interp(t.interpolation, "RandAugment"), "fill": _fill(t.fill, "RandAugment")},
              "RandAugment")


def _trivial(t, s):
    _image_op(s, {"op": "trivial_augment_wide", "num_magnitude_bins": int(t.num_magnitude_bins),
                  "interpolation": _interp(t.interpolation, "TrivialAugmentWide"),
                  "fill": _fill(t.fill, "TrivialAugmentWide")}, "TrivialAugmentWide")


def _auto_augment(t, s):
    policy = getattr(t.policy, "value", t.policy)
    _image_op(s, {"op": "auto_augment", "policy": str(policy),
                  "interpolation": _interp(t.interpolation, "AutoAugment"), "fill": _fill(t.fill, "AutoAugment")},
              "AutoAugment")


def _augmix(t, s):
    _image_op(s, {"op": "augmix", "severity": int(t.severity), "mixture_width": int(t.mixture_width),
                  "chain_depth": int(t.chain_depth), "alpha": float(t.alpha), "all_ops": bool(t.all_ops),
                  "interpolation": _interp(t.interpolation, "AugMix"), "fill": _fill(t.fill, "AugMix")}, "AugMix")


def _random_apply(t, s):
    _image_op(s, {"op": "random_apply", "p": float(t.p), "ops": _translate_list(t.transforms)}, "RandomApply")


def _random_choice(t, s):
    op = {"op": "random_choice", "ops": _translate_list(t.transforms)}
    if getattr(t, "p", None) is not None:
        op["p"] = [float(x) for x in t.p]
    _image_op(s, op, "RandomChoice")


def _random_order(t, s):
    _image_op(s, {"op": "random_order", "ops": _translate_list(t.transforms)}, "RandomOrder")


def _to_tensor(t, s):
    if s.stage == "float":
        raise ValueError("ferry: ToTensor after the image is already a float tensor")
    s.stage = "float"


def _pil_to_tensor(t, s):
    if s.stage != "pil":
        raise ValueError("ferry: %s after the image is already a tensor" % _name(t))
    s.stage = "uint8"


def _to_float(t, s):
    """ConvertImageDtype(float32) / v2.ToDtype(float32, scale=True) after a uint8 tensor."""
    dtype = getattr(t, "dtype", None)
    if isinstance(dtype, dict):  # v2: {type: dtype}
        dtype = next((v for v in dtype.values() if v is not None), None)
    if dtype != torch.float32:
        raise ValueError("ferry runs %s to torch.float32 only, not %s" % (_name(t), dtype))
    if _name(t) == "ToDtype" and not getattr(t, "scale", False):
        raise ValueError("ferry runs ToDtype(torch.float32, scale=True) (values in [0, 1]), not scale=False")
    if s.stage == "pil":
        raise ValueError("ferry: %s before the image is a tensor (PILToTensor / ToImage first)" % _name(t))
    s.stage = "float"


def _normalize(t, s):
    if s.stage != "float":
        raise ValueError("Normalize must follow ToTensor (or PILToTensor + ConvertImageDtype(float32), or ToImage + "
                         "ToDtype(float32, scale=True))")
    if s.normalized:
        raise ValueError("ferry runs one Normalize")
    mean, std = [float(x) for x in t.mean], [float(x) for x in t.std]
    if len(mean) not in (1, 3) or len(std) not in (1, 3):
        raise ValueError("ferry runs Normalize with 1 or 3 means and stds, not %r / %r" % (t.mean, t.std))
    s.tensor_ops.append({"op": "normalize", "mean": mean, "std": std})
    s.normalized = True


def _random_erasing(t, s):
    if s.stage != "float":
        raise ValueError("ferry runs RandomErasing on float tensors: put it after ToTensor / Normalize, as "
                         "torchvision requires")
    value = t.value
    if isinstance(value, str):
        if value != "random":
            raise ValueError("ferry cannot run RandomErasing with value=%r" % value)
    elif isinstance(value, numbers.Number):
        value = float(value)
    else:
        value = [float(v) for v in value]
    s.tensor_ops.append({"op": "random_erasing", "p": float(t.p), "scale": [float(x) for x in t.scale],
                         "ratio": [float(x) for x in t.ratio], "value": value})


def _identity(t, s):
    pass


def _lambda(t, s):
    raise Unknown("ferry has no native op for a Lambda transform (%s): ferry.DataLoader runs it, and what follows "
                  "it, in the workers' Python" % getattr(t.lambd, "__name__", "lambda"))


# -- detection (the reference scripts' transforms.py, and transforms.v2 of the same names) --
# Each takes (image, target) and moves the boxes and masks; Ferry's ops of the same
# names do both.

def _convert_coco(t, s):
    """The detection reference's ConvertCocoPolysToMask: COCO's annotations as the
    target dict (boxes XYXY, labels, masks, image_id, area, iscrowd; crowd left out),
    which is what Ferry's COCO source yields."""
    if s.ops or s.stage != "pil":
        raise ValueError("ferry runs ConvertCocoPolysToMask first, as the reference scripts do")
    s.coco_targets = True


def _scale_jitter(t, s):
    _image_op(s, {"op": "scale_jitter", "target_size": [int(x) for x in t.target_size],
                  "scale_range": [float(x) for x in t.scale_range],
                  "interpolation": _interp(getattr(t, "interpolation", 2), "ScaleJitter")}, "ScaleJitter")


def _fixed_size_crop(t, s):
    if getattr(t, "padding_mode", "constant") != "constant":
        raise ValueError("ferry runs FixedSizeCrop with padding_mode='constant' only")
    _image_op(s, {"op": "fixed_size_crop", "size": [int(t.crop_height), int(t.crop_width)],
                  "fill": _fill(getattr(t, "fill", 0), "FixedSizeCrop")}, "FixedSizeCrop")


def _iou_crop(t, s):
    _image_op(s, {"op": "random_iou_crop", "min_scale": float(t.min_scale), "max_scale": float(t.max_scale),
                  "min_aspect_ratio": float(t.min_aspect_ratio), "max_aspect_ratio": float(t.max_aspect_ratio),
                  "sampler_options": [float(x) for x in t.options], "trials": int(t.trials)}, "RandomIoUCrop")


def _zoom_out(t, s):
    _image_op(s, {"op": "random_zoom_out", "fill": _fill(getattr(t, "fill", 0), "RandomZoomOut"),
                  "side_range": [float(x) for x in t.side_range], "p": float(t.p)}, "RandomZoomOut")


def _shortest_size(t, s):
    _image_op(s, {"op": "random_shortest_size", "min_size": [int(x) for x in t.min_size],
                  "max_size": int(t.max_size),
                  "interpolation": _interp(getattr(t, "interpolation", 2), "RandomShortestSize")},
              "RandomShortestSize")


def _sanitize(t, s):
    _image_op(s, {"op": "sanitize_boxes", "min_size": float(getattr(t, "min_size", 1.0)),
                  "min_area": float(getattr(t, "min_area", 1.0))}, "SanitizeBoundingBoxes")


def _photometric(t, s):
    """The reference's RandomPhotometricDistort (ColorJitters in _brightness, ...) or
    transforms.v2's (brightness, ... as ranges)."""
    op = {"op": "random_photometric_distort", "p": float(t.p)}
    for name in ("brightness", "contrast", "saturation", "hue"):
        inner = getattr(t, "_" + name, None)
        value = getattr(inner, name, None) if inner is not None else getattr(t, name, None)
        if value is None:
            raise ValueError("ferry cannot read RandomPhotometricDistort's %s range" % name)
        op[name] = [float(v) for v in value]
    _image_op(s, op, "RandomPhotometricDistort")


_TORCHVISION = {
    "RandomResizedCrop": _rrc, "Resize": _resize, "CenterCrop": _center_crop, "RandomCrop": _random_crop,
    "Pad": _pad, "RandomHorizontalFlip": _flip("hflip"), "RandomVerticalFlip": _flip("vflip"),
    "RandomRotation": _rotation, "RandomAffine": _affine, "RandomPerspective": _perspective,
    "ColorJitter": _color_jitter, "Grayscale": _grayscale, "RandomGrayscale": _random_grayscale,
    "GaussianBlur": _gaussian_blur,
    "RandomSolarize": _simple("random_solarize", ("threshold", "threshold", float), ("p", "p", float)),
    "RandomPosterize": _simple("random_posterize", ("bits", "bits", int), ("p", "p", float)),
    "RandomEqualize": _simple("random_equalize", ("p", "p", float)),
    "RandomAutocontrast": _simple("random_autocontrast", ("p", "p", float)),
    "RandomAdjustSharpness": _simple("random_adjust_sharpness", ("sharpness_factor", "sharpness_factor", float),
                                     ("p", "p", float)),
    "RandomInvert": _simple("random_invert", ("p", "p", float)),
    "RandAugment": _rand_augment, "TrivialAugmentWide": _trivial, "AutoAugment": _auto_augment, "AugMix": _augmix,
    "RandomApply": _random_apply, "RandomChoice": _random_choice, "RandomOrder": _random_order,
    "ToTensor": _to_tensor, "PILToTensor": _pil_to_tensor, "ToImage": _pil_to_tensor,
    "ToImageTensor": _pil_to_tensor, "ConvertImageDtype": _to_float, "ToDtype": _to_float,
    "Normalize": _normalize, "RandomErasing": _random_erasing, "Identity": _identity, "Lambda": _lambda,
    "ConvertCocoPolysToMask": _convert_coco, "ScaleJitter": _scale_jitter, "FixedSizeCrop": _fixed_size_crop,
    "RandomIoUCrop": _iou_crop, "RandomZoomOut": _zoom_out, "RandomShortestSize": _shortest_size,
    "SanitizeBoundingBoxes": _sanitize, "RandomPhotometricDistort": _photometric,
}


# -- timm -------------------------------------------------------------------------------

def _timm_interp(value, what):
    if isinstance(value, (list, tuple)):
        names = sorted({_interp(v, what) for v in value})
        if names == ["bicubic", "bilinear"]:
            return "random"
        raise ValueError("ferry cannot run %s choosing among %r" % (what, value))
    return _interp(value, what)


def _timm_hparams(op, first):
    """The hparams timm's AugmentOps carry, from the first one."""
    hp = dict(first.hparams)
    kwargs = first.kwargs
    fill = kwargs.get("fillcolor", (128, 128, 128))
    op["fill"] = list(fill) if isinstance(fill, (list, tuple)) else fill
    op["interpolation"] = _timm_interp(kwargs.get("resample", 3), "timm's augmentation")
    op["translate_const"] = float(hp.get("translate_const", 250))
    op["translate_pct"] = float(hp.get("translate_pct", 0.45))
    mstd = float(hp.get("magnitude_std", 0))
    op["magnitude_std"] = "inf" if math.isinf(mstd) else mstd
    op["magnitude_max"] = float(hp.get("magnitude_max") or 10)
    return op


def _translate_timm(t, name, s):
    if name == "RandomResizedCropAndInterpolation":
        _image_op(s, {"op": "random_resized_crop", "size": _size(t.size, name), "scale": [float(x) for x in t.scale],
                      "ratio": [float(x) for x in t.ratio], "interpolation": _timm_interp(t.interpolation, name)},
                  name)
    elif name == "RandAugment":
        ops = list(t.ops)
        if not ops:
            raise ValueError("timm RandAugment with no ops")
        if len({(o.prob, o.magnitude) for o in ops}) != 1:
            raise ValueError("ferry runs timm's RandAugment with one prob and magnitude for all its ops")
        op = {"op": "timm_rand_augment", "ops": [o.name for o in ops], "num_layers": int(t.num_layers),
              "prob": float(ops[0].prob), "magnitude": float(ops[0].magnitude)}
        if t.choice_weights is not None:
            op["weights"] = [float(w) for w in t.choice_weights]
        _image_op(s, _timm_hparams(op, ops[0]), name)
    elif name == "AugMixAugment":
        if t.blended:
            raise ValueError("ferry cannot run timm's blended AugMix ('b1'); use the default (basic) mode")
        ops = list(t.ops)
        op = {"op": "timm_augmix", "ops": [o.name for o in ops], "magnitude": float(ops[0].magnitude),
              "width": int(t.width), "depth": int(t.depth), "alpha": float(t.alpha)}
        _image_op(s, _timm_hparams(op, ops[0]), name)
    elif name in ("MaybeToTensor", "ToTensor"):
        _to_tensor(t, s)
    elif name in ("MaybePILToTensor", "PILToTensor"):
        _pil_to_tensor(t, s)
    elif name == "RandomErasing":
        if getattr(t, "per_pixel", False):
            value = "random"
        elif getattr(t, "rand_color", False):
            value = "random_channel"
        else:
            value = 0.0
        lo, hi = (math.exp(x) for x in t.log_aspect_ratio)
        if t.min_count != 1:
            raise ValueError("ferry runs timm's RandomErasing with min_count=1 (the count drawn in [1, max_count])")
        if s.stage != "float":
            raise ValueError("ferry runs RandomErasing on float tensors: put it after ToTensor / Normalize")
        s.tensor_ops.append({"op": "random_erasing", "p": float(t.probability),
                             "scale": [float(t.min_area), float(t.max_area)], "ratio": [lo, hi], "value": value,
                             "max_count": int(t.max_count)})
    else:
        raise ValueError("ferry cannot run timm's %s: the README's table lists the timm transforms Ferry runs"
                         % name)


# -- the whole transform ----------------------------------------------------------------

def translate(transform):
    """(spec dict, chw_uint8): the Ferry pipeline spec that does what `transform` does,
    and whether its output is a uint8 CHW tensor (PILToTensor/ToImage without a float
    conversion; Ferry yields uint8 NHWC rows, viewed as CHW). ValueError names what
    cannot be honoured."""
    s = _State()
    _translate_one(transform, s)
    if s.stage == "pil":
        raise ValueError("the transform must end in ToTensor or PILToTensor (or v2's ToImage): ferry yields tensors")
    if not s.ops:
        raise ValueError("ferry needs a crop or a fixed-size resize in the transform (RandomResizedCrop, "
                         "CenterCrop, RandomCrop, Resize((h, w))): a batch holds images of one size")
    return _spec(s, s.ops)


def _steps(transform):
    """The top-level steps of a transform: a Compose's (nested ones flattened)."""
    if _name(transform) == "Compose" and not _is_timm(transform):
        out = []
        for t in _children(transform) or []:
            out += _steps(t)
        return out
    return [transform]


def _step_name(t):
    return getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or _name(t)


class Split:
    """A transform cut where Ferry stops knowing it: `spec` runs natively (decode and
    the leading steps), then `rest` (a Compose of the remaining steps, the trainer's
    own objects) in the workers' Python, on each row as `kind` ("pil": a PIL image,
    "uint8": a uint8 CHW tensor, "float": a float32 CHW tensor)."""

    def __init__(self, spec, chw, rest, kind, native, python, why):
        self.spec, self.chw, self.rest, self.kind = spec, chw, rest, kind
        self.native, self.python, self.why = native, python, why

    def note(self):
        return ("natively: decode%s; in Python on the workers: %s (from %s on: %s)"
                % ("".join(", " + n for n in self.native), ", ".join(self.python), self.python[0], self.why))


def split_native(transform):
    """Where `transform` stops being Ferry's, at its first step Ferry has no op for
    (Unknown): (Split, None) when the steps before it make images of one size; (None,
    why) when they do not (the whole dataset then runs in Python); (None, None) when
    every step is Ferry's (translate says whether they make a pipeline). A step Ferry
    knows, given what it cannot honour, raises ValueError as translate does."""
    import copy
    import torchvision
    steps = _steps(transform)
    s = _State()
    for k, t in enumerate(steps):
        before = copy.deepcopy(s)
        try:
            _translate_one(t, s)
            continue
        except Unknown:
            s = before
        why = "Ferry has no native op for %s" % _step_name(t)
        kinds = [_size_kind(op) for op in s.ops if _size_kind(op) is not None]
        if not kinds or kinds[-1] != "fixed":
            return None, "%s, and the steps before it do not make images of one size" % why
        if s.stage == "float":
            spec, chw = _spec(s, s.ops)
            kind = "float"
        else:
            spec = {"decode": "rgb", "ops": s.ops, "output": {"dtype": "uint8", "layout": "NHWC"}}
            chw = False
            kind = s.stage  # "pil" or "uint8"
        rest = torchvision.transforms.Compose(steps[k:])
        return Split(spec, chw, rest, kind, [_step_name(x) for x in steps[:k]], [_step_name(x) for x in steps[k:]],
                     why), None
    return None, None


def _spec(s, ops):
    """(spec, chw_uint8) of image ops `ops` then the state's float conversion."""
    if s.stage == "float":
        # Without Normalize, ToTensor's x / 255 is the normalize op with mean 0 and std 1.
        ops = ops + (s.tensor_ops if s.normalized else
                     [{"op": "normalize", "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]}] + s.tensor_ops)
        return {"decode": "rgb", "ops": ops, "output": {"dtype": "float32", "layout": "NCHW"}}, False
    return {"decode": "rgb", "ops": ops, "output": {"dtype": "uint8", "layout": "NHWC"}}, True


# Ops after which every image has one size, and ops that leave sizes that vary.
_FIXED = {"fixed_size_crop", "letterbox", "center_crop", "random_resized_crop", "random_crop"}
_VARYING = {"scale_jitter", "random_shortest_size", "random_iou_crop", "random_zoom_out", "resize_shorter", "pad",
            "random_rotation", "random_affine", "affine", "random_resize"}


def _size_kind(op):
    """"fixed" (every image leaves at one size), "varying", or None (sizes kept)."""
    if op["op"] == "resize":
        return "fixed" if isinstance(op.get("size"), list) else "varying"
    return "fixed" if op["op"] in _FIXED else "varying" if op["op"] in _VARYING else None


_CLASS_OF = {"scale_jitter": "ScaleJitter", "random_shortest_size": "RandomShortestSize",
             "random_iou_crop": "RandomIoUCrop", "random_zoom_out": "RandomZoomOut", "resize": "Resize",
             "resize_shorter": "Resize", "pad": "Pad", "random_rotation": "RandomRotation",
             "random_affine": "RandomAffine", "affine": "RandomAffine"}


def translate_detection(transform, canvas):
    """A detection dataset's joint transforms (the reference's presets: ConvertCocoPolysToMask
    first) -> (spec dict, chw_uint8, padded): `padded` True when the transform keeps
    each image's size (the "hflip" preset): the images are then padded, right and
    below, to `canvas` (h, w: the dataset's largest), and the caller cuts each back to
    its own size. A transform whose sizes vary (RandomShortestSize, ScaleJitter without
    FixedSizeCrop) raises ValueError: a batch holds one size."""
    s = _State()
    _translate_one(transform, s)
    if not s.coco_targets:
        raise ValueError("ferry.DataLoader yields detection targets as the reference's ConvertCocoPolysToMask "
                         "makes them (boxes, labels, masks, image_id, area, iscrowd): the dataset's transforms "
                         "must start with it")
    if s.stage == "pil":
        raise ValueError("the transform must end in PILToTensor (and ConvertImageDtype) or ToImage: ferry yields "
                         "tensors")
    size_ops = [(op["op"], _size_kind(op)) for op in s.ops if _size_kind(op) is not None]
    padded = False
    ops = list(s.ops)
    if not size_ops:
        padded = True
        ops.append({"op": "fixed_size_crop", "size": [int(canvas[0]), int(canvas[1])], "fill": 0})
    elif size_ops[-1][1] != "fixed":
        raise ValueError("ferry batches images of one size, and this transform leaves sizes that vary (%s last): "
                         "end it with FixedSizeCrop (the 'lsj' preset), or give pipeline= (a letterbox, say)"
                         % _CLASS_OF.get(size_ops[-1][0], size_ops[-1][0]))
    # The reference keeps every box of positive width and height (ConvertCocoPolysToMask,
    # FixedSizeCrop); v2's SanitizeBoundingBoxes, when the transform has one, says more.
    if not any(op["op"] == "sanitize_boxes" for op in ops):
        ops.append({"op": "sanitize_boxes", "min_size": 1e-4, "min_area": 0.0})
    return _spec(s, ops) + (padded,)


# -- segmentation (the reference scripts' references/segmentation/transforms.py) ---------

def _seg_resize(t, s):
    _image_op(s, {"op": "random_resize", "min_size": int(t.min_size), "max_size": int(t.max_size)}, "RandomResize")


def _seg_flip(t, s):
    _flip("hflip")(type("Flip", (), {"p": float(getattr(t, "flip_prob", getattr(t, "p", 0.5)))})(), s)


def _seg_crop(t, s):
    if hasattr(t, "padding") or hasattr(t, "pad_if_needed"):
        return _random_crop(t, s)  # torchvision's own RandomCrop
    _image_op(s, {"op": "random_crop", "size": _size(t.size, "RandomCrop"), "pad_if_smaller": True}, "RandomCrop")


_SEGMENTATION = {"RandomResize": _seg_resize, "RandomHorizontalFlip": _seg_flip, "RandomCrop": _seg_crop}


def translate_segmentation(transform):
    """A segmentation dataset's joint transforms (the reference's presets: RandomResize,
    RandomHorizontalFlip(flip_prob), RandomCrop(size) padding right and below, then
    PILToTensor, ConvertImageDtype, Normalize) -> (spec dict, chw_uint8). The images
    must end at one size (a crop): ValueError otherwise."""
    s = _State()
    s.overrides = _SEGMENTATION
    _translate_one(transform, s)
    if s.stage == "pil":
        raise ValueError("the transform must end in PILToTensor (and ConvertImageDtype) or ToImage: ferry yields "
                         "tensors")
    kinds = [_size_kind(op) for op in s.ops if _size_kind(op) is not None]
    if not kinds or kinds[-1] != "fixed":
        raise ValueError("ferry batches images of one size: the segmentation transform must end its geometry with a "
                         "crop (RandomCrop, as the reference's training preset), or give pipeline=")
    return _spec(s, s.ops)


def pipeline_from_transform(transform):
    """The Ferry pipeline spec (a dict) that does what a torchvision or timm transform does."""
    return translate(transform)[0]
