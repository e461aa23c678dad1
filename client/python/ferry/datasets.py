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
        except RuntimeError:
            pass
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
