"""Ferry for PyTorch: batches of decoded, augmented images as torch tensors, from the
in-process pipeline (local mode) or from Ferry workers (point to point, or through a
ferry-dispatcher job).

    import ferry
    loader = ferry.Loader(data="/datasets/imagenet/train", pipeline="imagenet-train",
                          batch_size=256, threads=8)
    for epoch in range(90):
        for images, labels in loader:      # one epoch per pass, like a DataLoader
            ...

or, in a script written for torch's DataLoader, change one line:

    loader = ferry.DataLoader(dataset, batch_size=64, sampler=sampler, collate_fn=collate_fn)

Tensors are views of Ferry's batch buffers (no copy): images float32 NCHW for the
normalizing pipelines, uint8 NHWC when the spec says so; labels int64, or soft targets
float32 [B, num_classes] when the pipeline mixes (MixUp/CutMix). A tensor keeps its
buffer alive for as long as it lives. From remote workers a normalizing pipeline
travels as uint8 and its float32 is made here (device="cuda": on the GPU).

`state_dict()` / `load_state_dict()` give exact resume: a run interrupted and resumed
yields the same batches, bit for bit, as one that was not (local mode, and
deterministic remote mode).

Modules: loader (ferry.Loader), dataloader (the drop-in ferry.DataLoader), transforms
(torchvision/timm transforms -> Ferry ops), mixing (MixUp/CutMix collate functions),
datasets (what a torchvision dataset names), distributed (ranks, seeds, CPUs).
"""
import os

from . import _ferry
from .dataloader import DataLoader
from .datasets import Mixture, list_dataset
from .distributed import available_cpus, default_threads
from .loader import FerryError, Loader
from .transforms import pipeline_from_transform

__all__ = ["Loader", "DataLoader", "FerryError", "Mixture", "list_dataset", "pipeline_from_transform", "available_cpus",
           "default_threads", "registered_ops", "load_plugin"]


def load_plugin(path):
    """Loads an op plugin (a shared library, include/ferry/plugin.h) into this process:
    its ops may then be named in pipelines, in process; remote workers and the
    dispatcher load it with --plugin. $FERRY_PLUGIN (':'-separated paths) is loaded at
    import."""
    _ferry.load_plugin(os.fspath(path))


for _path in filter(None, os.environ.get("FERRY_PLUGIN", "").split(":")):
    load_plugin(_path)


def registered_ops():
    """The names of every op a pipeline spec may use."""
    return _ferry.registered_ops()
