"""What a torchvision dataset names, as Ferry reads it: an ImageFolder's root, or a
file list of (path, label) that every rank and every worker can read."""
import hashlib
import os

import torch

from . import _ferry


def list_dataset(data):
    """(paths, labels, classes) as Ferry lists `data` (the order of torchvision's ImageFolder)."""
    return _ferry.list_dataset(str(data))


def dataset_listing(dataset):
    """(root or list file, transform) of a torchvision dataset, or of a Subset of one:
    Ferry reads the samples `dataset.samples` names, in its order."""
    indices = None
    inner = dataset
    while isinstance(inner, torch.utils.data.Subset):
        indices = [int(i) for i in inner.indices] if indices is None else [int(inner.indices[i]) for i in indices]
        inner = inner.dataset
    if not hasattr(inner, "samples"):
        raise ValueError("ferry.DataLoader reads a torchvision ImageFolder-like dataset (one with .samples), a "
                         "Subset of one, or a path; not a %s" % type(inner).__name__)
    if getattr(inner, "target_transform", None) is not None:
        raise ValueError("ferry cannot run the dataset's target_transform")
    loader = getattr(inner, "loader", None)
    if loader is not None:
        import torchvision.datasets.folder as folder
        if loader not in (folder.default_loader, folder.pil_loader, getattr(folder, "accimage_loader", None)):
            raise ValueError("the dataset has a custom loader (%s); ferry decodes the files itself"
                             % getattr(loader, "__name__", loader))
    samples = list(inner.samples)
    if indices is not None:
        samples = [samples[i] for i in indices]
    root = getattr(inner, "root", None)
    if indices is None and root is not None:
        try:
            paths, labels, _ = list_dataset(os.fspath(root))
            if len(paths) == len(samples) and all(
                    os.path.abspath(p) == os.path.abspath(q) and int(l) == int(m)
                    for p, l, (q, m) in zip(paths, labels, samples)):
                return os.fspath(root), getattr(inner, "transform", None)
        except (RuntimeError, ValueError):  # the binding raises ValueError for NotFound, InvalidArgument
            pass  # a root Ferry does not list as the dataset does: the samples' own list
    return write_list(samples), getattr(inner, "transform", None)


def write_list(samples):
    """A .tsv file list of (path, label): named by its content, so that every rank (and
    every run) names the same file; written once, atomically. It lives in
    FERRY_LIST_DIR (default ~/.cache/ferry/lists): remote workers must see it at the
    same path, as they see the images."""
    body = "".join("%s\t%d\n" % (os.path.abspath(p), int(l)) for p, l in samples)
    if any("\n" in p or "\t" in p for p, _ in samples):
        raise ValueError("a sample path holds a tab or a newline; ferry's file lists cannot name it")
    return _write_once(body, ".tsv")


def _write_once(body, ext):
    """`body` in FERRY_LIST_DIR (default ~/.cache/ferry/lists), named by its content:
    written once, atomically; the path."""
    d = os.environ.get("FERRY_LIST_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "ferry", "lists")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, hashlib.sha1(body.encode()).hexdigest()[:20] + ext)
    if not os.path.exists(path):
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write(body)
        os.replace(tmp, path)
    return path


def _usable(anns):
    """The detection reference's rule for training images: some box larger than 1 x 1."""
    return any(all(float(o) > 1 for o in a["bbox"][2:]) for a in anns)


def detection_listing(dataset, annotations=None):
    """For torchvision.datasets.CocoDetection (or a subclass of it, as the detection
    reference's), possibly under a Subset: (data spec dict, joint transforms, sizes
    {image_id: (h, w)}, canvas (max h, max w)). None for any other dataset.

    Ferry reads the annotations file itself (`annotations=`, the dataset's `ann_file`
    or `annFile`, or else the loaded JSON written once to FERRY_LIST_DIR, named by its
    content, where remote workers must see it). The samples are the dataset's: every
    image in id order, or the Subset the reference's
    _coco_remove_images_without_annotations makes (anything else raises)."""
    indices = None
    inner = dataset
    while isinstance(inner, torch.utils.data.Subset):
        indices = [int(i) for i in inner.indices] if indices is None else [int(inner.indices[i]) for i in indices]
        inner = inner.dataset
    coco = getattr(inner, "coco", None)
    if coco is None or not hasattr(inner, "ids") or not isinstance(getattr(coco, "dataset", None), dict):
        return None
    ids = [int(i) for i in inner.ids]
    if ids != sorted(int(i) for i in coco.imgs.keys()):
        raise ValueError("ferry reads every image of the annotations file in id order, as CocoDetection lists "
                         "them; this dataset's ids differ")
    spec = {"format": "coco", "images": os.path.abspath(os.fspath(inner.root)), "skip_crowd": True}
    if indices is not None:
        by_image = {}
        for a in coco.dataset.get("annotations", []):
            by_image.setdefault(int(a["image_id"]), []).append(a)
        if indices != [i for i, image_id in enumerate(ids) if _usable(by_image.get(image_id, []))]:
            raise ValueError("ferry reads a Subset of a CocoDetection only as the reference's "
                             "_coco_remove_images_without_annotations makes it (images with a box larger than 1 x 1)")
        spec["remove_images_without_annotations"] = True
    ann = annotations or getattr(inner, "ann_file", None) or getattr(inner, "annFile", None)
    spec["annotations"] = os.path.abspath(os.fspath(ann)) if ann else _write_json(coco.dataset)
    transforms = getattr(inner, "_transforms", None) or getattr(inner, "transforms", None)
    if transforms is not None and type(transforms).__name__ == "StandardTransform":
        if getattr(transforms, "target_transform", None) is not None:
            raise ValueError("ferry cannot run the dataset's target_transform")
        transforms = transforms.transform
    sizes = {int(im["id"]): (int(im["height"]), int(im["width"])) for im in coco.dataset.get("images", [])}
    canvas = (max((h for h, _ in sizes.values()), default=1), max((w for _, w in sizes.values()), default=1))
    return spec, transforms, sizes, canvas


def _write_json(obj):
    """`obj` as JSON in FERRY_LIST_DIR, named by its content (written once, atomically)."""
    import json
    return _write_once(json.dumps(obj, sort_keys=True, separators=(",", ":")), ".json")


def segmentation_listing(dataset):
    """For torchvision.datasets.VOCSegmentation (its `images` and `masks` lists): (data
    spec dict, joint transforms). None for any other dataset. Ferry pairs the VOC
    layout's JPEGImages and SegmentationClass by the ImageSets list, the dataset's own
    order (checked)."""
    if isinstance(dataset, torch.utils.data.Subset):
        if segmentation_listing(dataset.dataset) is not None:
            raise ValueError("ferry.DataLoader reads a VOCSegmentation whole, not a Subset of one")
        return None
    images, masks = getattr(dataset, "images", None), getattr(dataset, "masks", None)
    if not isinstance(images, list) or not isinstance(masks, list) or not images or len(images) != len(masks) or \
            getattr(dataset, "image_set", None) is None:
        return None
    images_dir, masks_dir = os.path.dirname(os.path.abspath(images[0])), os.path.dirname(os.path.abspath(masks[0]))
    split = os.path.join(os.path.dirname(images_dir), "ImageSets", "Segmentation", dataset.image_set + ".txt")
    stems = [os.path.splitext(os.path.basename(p))[0] for p in images]
    with open(split) as f:
        listed = [line.strip() for line in f if line.strip()]
    if listed != stems or any(os.path.dirname(os.path.abspath(p)) != images_dir for p in images) or \
            [os.path.splitext(os.path.basename(m))[0] for m in masks] != stems:
        raise ValueError("ferry reads a VOCSegmentation as its ImageSets list names it (%s); this dataset's images "
                         "differ" % split)
    transforms = getattr(dataset, "transforms", None)
    if transforms is not None and type(transforms).__name__ == "StandardTransform":
        raise ValueError("ferry runs a segmentation dataset's joint transforms (transforms=, as the reference "
                         "scripts give them), not a transform and a target_transform")
    spec = {"format": "segmentation", "images": images_dir, "masks": masks_dir, "list": split}
    return spec, transforms


class Mixture:
    """Several datasets drawn as one by weight: data=ferry.Mixture(...) for ferry.Loader.

        data = ferry.Mixture([("/data/laion", 0.6), ("/data/cc12m", 0.3),
                              ("s3://bucket/coyo/", 0.1, coyo_pipeline)], epoch=1_000_000)

    sources: a list of (data, weight) or (data, weight, pipeline) (or dicts with those
    keys), or a dict {data: weight}. Each data is any dataset the Loader reads (a
    folder, a list, shards, a description dict, a bucket URL); a pipeline of its own
    (a name, a JSON string or a dict) must make rows of the Loader's pipeline's shape
    and type (say, another resize for a source of other image sizes), with no batch op.
    epoch: the draws of an epoch (len(loader) follows from it). Every epoch each
    source gets weight / sum(weights) of them (to within one draw; largest remainders),
    interleaved in an order drawn from (seed, epoch). Each source is read without
    replacement, in a new order each pass; a pass goes on across epochs where the last
    one stopped, so every sample of a source comes once in each of its passes.
    Deterministic for a seed, equal steps on every rank, resumable mid-epoch (also on
    another world size), exactly once within each source's pass through worker and
    dispatcher failures. Batch indices are the sources' samples one after the other:
    source k's sample i is sum(len(source j), j < k) + i.
    """

    def __init__(self, sources, epoch):
        import json
        import math
        from ._options import _pipeline_string
        if isinstance(sources, dict):
            sources = list(sources.items())
        out = []
        for s in sources:
            if isinstance(s, dict):
                unknown = set(s) - {"data", "weight", "pipeline"}
                if unknown or "data" not in s:
                    raise ValueError("a mixture source is {data, weight, pipeline}; got %s" % sorted(s))
                data, weight, pipeline = s["data"], s.get("weight", 1.0), s.get("pipeline")
            elif isinstance(s, (tuple, list)) and len(s) in (2, 3):
                data, weight, pipeline = (tuple(s) + (None,))[:3]
            else:
                raise ValueError("a mixture source is (data, weight) or (data, weight, pipeline), not %r" % (s,))
            if isinstance(data, dict):
                data = json.dumps(data, sort_keys=True, separators=(",", ":"))
            data = os.fspath(data)
            if not data or data == "mixture":
                raise ValueError("a mixture source needs its data")
            weight = float(weight)
            if not (weight > 0 and math.isfinite(weight)):
                raise ValueError("mixture source %s: weight must be > 0, not %r" % (data, weight))
            out.append((data, weight, "" if pipeline is None else _pipeline_string(pipeline)))
        if not out:
            raise ValueError("a mixture needs at least one source")
        if len(out) > 256:
            raise ValueError("a mixture of %d sources: at most 256" % len(out))
        if int(epoch) < 1 or int(epoch) > 1 << 26:
            raise ValueError("epoch (the draws of an epoch) must be in [1, 2^26], not %r" % (epoch,))
        self.sources = tuple(out)
        self.epoch = int(epoch)

    @property
    def own_pipelines(self):
        return any(p for _, _, p in self.sources)

    def options(self):
        """The job's keys for the native loader."""
        return {"mixture": [list(s) for s in self.sources], "mixture_epoch": self.epoch}

    def key(self):
        """One canonical string: a saved state names the mixture it was read from."""
        import json
        return json.dumps({"epoch": self.epoch, "sources": [list(s) for s in self.sources]}, sort_keys=True)

    def __repr__(self):
        return "ferry.Mixture(%r, epoch=%d)" % (list(self.sources), self.epoch)
