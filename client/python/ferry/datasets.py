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
    d = os.environ.get("FERRY_LIST_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "ferry", "lists")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, hashlib.sha1(body.encode()).hexdigest()[:20] + ".tsv")
    if not os.path.exists(path):
        tmp = "%s.%d.tmp" % (path, os.getpid())
        with open(tmp, "w") as f:
            f.write(body)
        os.replace(tmp, path)
    return path
