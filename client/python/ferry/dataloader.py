"""ferry.DataLoader: torch.utils.data.DataLoader's signature over Ferry, so that an
existing script switches by changing one line."""
import hashlib
import json
import logging
import os
import warnings

import torch

from . import _ferry, _user_worker
from .datasets import dataset_listing, detection_listing, segmentation_listing
from .distributed import broadcast_seed, default_threads, resolve_rank
from .loader import Loader
from ._options import _pipeline_string
from .mixing import TrainerCollate, mix_op
from .transforms import split_native, translate, translate_detection, translate_segmentation


_log = logging.getLogger("ferry")


class DataLoader(Loader):
    """torch.utils.data.DataLoader's signature over Ferry, for an existing script:

        dataset = torchvision.datasets.ImageFolder(root, transform=train_transform)
        sampler = DistributedSampler(dataset)
    -   loader = torch.utils.data.DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=8)
    +   loader = ferry.DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=8)

    `dataset`: a torchvision ImageFolder-like dataset (ImageNet, DatasetFolder), a
    Subset of one, or a path (then give pipeline=). Ferry reads the samples
    `dataset.samples` names, in its order, and runs the dataset's transform, translated
    faithfully (ferry.transforms: torchvision's transforms and v2, timm's, preset
    objects holding a Compose, RandomApply/RandomChoice/RandomOrder): what it cannot
    honour raises ValueError naming it. No transform is an error (the images would
    differ in size), unless pipeline= is given.

    collate_fn: a MixUp/CutMix collate (ferry.mixing: torchvision's v2 MixUp/CutMix or
      the reference scripts' RandomMixup/RandomCutmix, alone or under RandomChoice, or
      timm's Mixup; the object, or a function that calls default_collate with one) runs
      natively, and batches are (images, soft targets [B, num_classes]). Any other
      collate_fn runs on the trainer over each batch's samples, with a warning at start;
      its time is stats()["collate_s"].
    trim_padding: True (default): batches hold real samples only (padding rows, label
      -1, of ranks' last batches under drop_last=False are left out), so that an
      evaluation counts every validation sample once across ranks and a loss needs no
      ignore_index; False keeps fixed-size batches with padding rows.

    sampler: DistributedSampler (its rank, num_replicas, seed and shuffle are taken;
      set_epoch() on it, or on this loader, picks the epoch), RandomSampler or
      SequentialSampler, or None (then shuffle=). drop_last=False gives the ranks' last
      batches fewer rows (see trim_padding) instead of repeating samples. As with
      torch's DataLoader, only a DistributedSampler (or rank=/world_size=) shards the
      epoch between ranks: with another sampler, or none, every process reads the whole
      dataset whatever its torch.distributed group (an evaluation on rank 0 alone),
      and the loader calls no collective.
    num_workers: decode threads, capped by this rank's share of the host's CPUs
      (affinity and cgroup limit, split across LOCAL_WORLD_SIZE ranks); 0 = the share.
      Where the dataset or a step of its transform runs in Python, as many Python
      processes (python_processes=, unless given).
    seed: None = torch.initial_seed() (of a sharded loader: rank 0's, broadcast over
      torch.distributed).
    epochs: None (no limit): each pass is one epoch, as a DataLoader's.
    persistent_workers, prefetch_factor (batches prefetched): accepted.
    pin_memory=True on a CUDA host: the batches come out on the GPU already, received
      into pinned memory and copied on Ferry's own stream (Loader's device="cuda"), so the
      script's own `.to(device, non_blocking=True)` is a no-op; on the device
      pin_memory_device names, else on the current CUDA device (a DDP script's
      torch.cuda.set_device(local_rank) before the loader is made picks it). device="cpu"
      keeps host tensors in pinned memory, as torch's DataLoader gives them. Without CUDA,
      pin_memory warns and does nothing. (Ferry's own images and labels; a user's
      Dataset run on Ferry's processes keeps what its collate_fn made.)

    Detection: `dataset` may be a torchvision.datasets.CocoDetection (or a subclass, as
    the detection reference's coco_utils.CocoDetection), or the Subset the reference's
    _coco_remove_images_without_annotations makes of one, whose transforms start with
    the reference's ConvertCocoPolysToMask. Its presets translate when the images leave
    at one size or at their own ("hflip", "lsj"; "ssd", "ssdlite" and "multiscale"
    leave sizes that vary and are refused, naming the transform: give pipeline=), and
    each batch is handed, as a list of (image, target) samples, to collate_fn: the
    reference's `lambda batch: tuple(zip(*batch))` gives (images, targets) as its
    DataLoader does, each image float32 [3, H, W] at its own size and each target the
    dict ConvertCocoPolysToMask makes (boxes, labels, masks, image_id, area, iscrowd).
    With no collate_fn: (images [B, ...], list of target dicts). `annotations=` names the
    annotations file when the dataset does not keep its path (torchvision's does not:
    the loaded JSON is then written once to FERRY_LIST_DIR); `targets=` narrows the
    fields (masks cost the most).

    Segmentation: a torchvision.datasets.VOCSegmentation with the segmentation
    reference's joint transforms (RandomResize, RandomHorizontalFlip, RandomCrop, then
    PILToTensor, ConvertImageDtype, Normalize) gives (image float32 [3, H, W], target
    int64 [H, W], 255 where padding added pixels) samples to collate_fn, as the
    reference's DataLoader does.
    Remote modes take dispatcher=/job_name= or workers= as in Loader; with neither,
    FERRY_DISPATCHER and FERRY_JOB_NAME in the environment name a dispatcher job (each
    loader of the script its own: FERRY_JOB_NAME.<digest of what it reads>).
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", seed=None, epochs=None, pipeline=None, rank=None, world_size=None,
                 threads=None, trim_padding=None, **kwargs):
        for name, value in (("batch_sampler", batch_sampler), ("worker_init_fn", worker_init_fn),
                            ("multiprocessing_context", multiprocessing_context)):
            if value is not None:
                raise ValueError("ferry.DataLoader cannot take %s: Ferry batches and runs its workers itself" % name)
        if timeout:
            raise ValueError("ferry.DataLoader has no timeout: remote workers that fail are replaced, and a "
                             "dispatcher that cannot be reached raises")
        if batch_size is None or batch_size <= 0:
            raise ValueError("batch_size must be > 0 (Ferry batches)")
        import torch.utils.data as tud
        self.sampler = sampler
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")  # as torch says
        if isinstance(sampler, tud.distributed.DistributedSampler):
            if sampler.dataset is not dataset:
                raise ValueError("the DistributedSampler is of another dataset")
            if rank is not None or world_size is not None:
                raise ValueError("give rank/world_size or a DistributedSampler, not both")
            rank, world_size, seed, shuffle = sampler.rank, sampler.num_replicas, sampler.seed, sampler.shuffle
        elif isinstance(sampler, tud.RandomSampler):
            if sampler.replacement or sampler._num_samples is not None:
                raise ValueError("ferry reads every sample once an epoch: RandomSampler(replacement=True) or "
                                 "num_samples= cannot be honoured")
            shuffle = True
            if sampler.generator is not None and seed is None:
                seed = sampler.generator.initial_seed()
        elif isinstance(sampler, tud.SequentialSampler):
            shuffle = False
        elif sampler is not None:
            raise ValueError("ferry.DataLoader takes DistributedSampler, RandomSampler or SequentialSampler, not %s"
                             % type(sampler).__name__)
        if generator is not None and seed is None:
            seed = generator.initial_seed()
        annotations = kwargs.pop("annotations", None)
        detection = None if isinstance(dataset, (str, os.PathLike)) else detection_listing(dataset, annotations)
        segmentation = None if detection is not None or isinstance(dataset, (str, os.PathLike)) \
            else segmentation_listing(dataset)
        self._detection = detection is not None or segmentation is not None
        self._hide_image_id = False
        self._sizes = None  # {image_id: (h, w)}: images padded to a canvas, cut back to their size
        self._chw = False
        whole = None  # why the dataset runs whole in Python, if it does
        if segmentation is not None:
            data, joint = segmentation
            if pipeline is None:
                if joint is None:
                    raise ValueError("the segmentation dataset has no transforms: give it the reference's, or "
                                     "pipeline=")
                pipeline, self._chw = translate_segmentation(joint)
            kwargs.setdefault("targets", ("semantic",))
            self._collate, self.collate_note = None, None
            self._det_collate = collate_fn
        elif self._detection:
            data, joint, sizes, canvas = detection
            if pipeline is None:
                if joint is None:
                    raise ValueError("the detection dataset has no transforms: give it the reference's "
                                     "(ConvertCocoPolysToMask, then a preset), or pipeline=")
                pipeline, self._chw, padded = translate_detection(joint, canvas)
                self._sizes = sizes if padded else None
            kwargs.setdefault("targets", ("boxes", "labels", "masks", "image_id", "area", "iscrowd"))
            # Padded rows are cut back by their image's id: it travels even when not asked for.
            self._hide_image_id = self._sizes is not None and "image_id" not in kwargs["targets"]
            if self._hide_image_id:
                kwargs["targets"] = tuple(kwargs["targets"]) + ("image_id",)
            self._collate, self.collate_note = None, None
            self._det_collate = collate_fn
        elif isinstance(dataset, (str, os.PathLike)):
            data, transform = os.fspath(dataset), None
        else:
            try:
                data, transform = dataset_listing(dataset)
            except ValueError as e:
                data, transform, whole = None, None, "Ferry cannot read it (%s)" % e
        # Where each step runs: natively (Ferry's ops), or in the workers' Python (the
        # trainer's own objects, shipped with cloudpickle) from the first step Ferry
        # cannot run on; a dataset Ferry cannot read runs whole in Python.
        self.placement_note = None
        python_steps = None
        self._python = False
        if not self._detection and pipeline is None and data is not None:
            split = None
            if transform is None:
                raise ValueError("the dataset has no transform: ferry would batch images of different sizes. "
                                 "Give the dataset a transform (with RandomResizedCrop or CenterCrop) or "
                                 "pipeline=")
            split, whole = split_native(transform)
            if split is None and whole is None:
                pipeline, self._chw = translate(transform)  # every step is Ferry's
            if split is not None:
                pipeline, self._chw = split.spec, False
                python_steps = (split.rest, collate_fn, split.kind)
                self.placement_note = "ferry.DataLoader: %s; collate_fn %s in Python on the workers" % (
                    split.note(), _fn_name(collate_fn) if collate_fn is not None else "default_collate")
        if not self._detection and whole is not None:
            self._python = True
            self.placement_note = ("ferry.DataLoader: the dataset %s runs whole in Python on the workers: %s"
                                   % (type(dataset).__name__, whole))
        if self.placement_note is not None:
            _log.warning("%s", self.placement_note)
        self._mix_source, self._mix_op = None, None  # a native MixUp/CutMix: its object, its op
        if not self._detection and not self._python and python_steps is None:
            pipeline, self._collate, self.collate_note, self._mix_op = _with_collate(pipeline, collate_fn)
            if self._mix_op is not None:
                self._mix_source = collate_fn
        elif not self._detection:
            self._collate, self.collate_note = None, None
        self.dataset = dataset
        # Sharded only by a DistributedSampler or rank=/world_size=, as torch's DataLoader
        # is: without, this process reads the whole dataset even inside a process group
        # (torch.distributed's rank and world size are ferry.Loader's default, not this).
        sharded = rank is not None or world_size is not None
        if kwargs.get("consumer_id"):
            pass  # a consumer of a shared job: ferry.Loader checks
        elif sharded:
            rank, world_size = resolve_rank(rank, world_size)
        else:
            rank, world_size = 0, 1
        if seed is None:
            seed = torch.initial_seed() & ((1 << 63) - 1)
            if sharded:
                seed = broadcast_seed(seed, world_size or 1)
        if threads is None:
            threads = default_threads(num_workers)
        if (self._python or python_steps is not None) and "python_processes" not in kwargs:
            # torch's num_workers are processes running the dataset's Python: here too,
            # when it runs in this process's loader (a remote worker has its own
            # --python-processes).
            kwargs["python_processes"] = threads
        if prefetch_factor is not None:
            kwargs.setdefault("prefetch", max(1, int(prefetch_factor)))
        if not kwargs.get("dispatcher") and not kwargs.get("workers") and os.environ.get("FERRY_DISPATCHER"):
            # The operator points an unchanged script at a dispatcher job.
            if not os.environ.get("FERRY_JOB_NAME"):
                raise ValueError("FERRY_DISPATCHER is set: set FERRY_JOB_NAME too (every rank the same)")
            # One job per loader of the script (a training and an eval loader, say): the
            # name the operator gave, and a digest of what this loader reads, the same on
            # every rank.
            what = json.dumps([data, _ferry.pipeline_json(_pipeline_string(pipeline)), bool(shuffle), int(batch_size),
                               bool(drop_last), int(seed)])
            kwargs["dispatcher"] = os.environ["FERRY_DISPATCHER"]
            kwargs["job_name"] = "%s.%s" % (os.environ["FERRY_JOB_NAME"], hashlib.sha1(what.encode()).hexdigest()[:10])
            if not sharded and not kwargs.get("consumer_id"):
                # Every process of a group reads the whole dataset: a job each.
                group_rank, group_world = resolve_rank(None, None)
                if group_world > 1:
                    kwargs["job_name"] += ".p%d" % group_rank
        self.persistent_workers = bool(persistent_workers)  # Ferry's pipeline lives across epochs anyway
        # The sampler's epoch as last seen: a set_epoch() on it since then moves this
        # loader. (A script that never calls it still gets a new order every epoch,
        # where torch would repeat the first.)
        self._sampler_epoch = getattr(sampler, "epoch", None)
        if self._python:
            super().__init__(dataset=dataset, collate_fn=collate_fn, batch_size=batch_size, seed=seed,
                             shuffle=bool(shuffle), drop_last=drop_last, epochs=epochs, pin_memory=pin_memory,
                             rank=rank, world_size=world_size, **kwargs)
        else:
            kwargs["device"] = batch_device(pin_memory, pin_memory_device, kwargs.get("device"),
                                            torch.cuda.is_available())
            super().__init__(data=data, pipeline=pipeline, batch_size=batch_size, seed=seed, shuffle=bool(shuffle),
                             drop_last=drop_last, epochs=epochs, threads=threads, pin_memory=pin_memory, rank=rank,
                             world_size=world_size, python_steps=python_steps, **kwargs)
        # Padding rows (label -1: ranks' last batches when drop_last=False) are left out of
        # the batches, as a script written for torch's DataLoader expects real samples
        # only: an evaluation counts each validation sample once across ranks, and a loss
        # without ignore_index=-1 sees real labels. A batch with no sample at all (a
        # rank's last one, when the epoch does not fill every rank's) is skipped by an
        # in-order loader (evaluation) and, so that every rank steps as often, kept as
        # padding by a shuffling one (training), with a warning.
        self.trim_padding = True if trim_padding is None else bool(trim_padding)
        self._warned_empty = False

    def set_epoch(self, epoch):
        """The epoch the next pass yields: a later epoch skips ahead (as
        DistributedSampler.set_epoch picks the shuffle of an epoch); from the middle of
        an epoch (a script that breaks out of its epochs after so many steps) the rest of
        that epoch is left unread, as torch's DataLoader leaves it. Going back raises.
        A pass left mid-epoch with no set_epoch() after it is continued by the next
        pass (where torch's would start the epoch over)."""
        epoch = int(epoch)
        if epoch == self._epoch:
            return
        if epoch < self._epoch:
            raise ValueError("set_epoch(%d), but the loader is at epoch %d: it goes forward only "
                             "(load_state_dict() puts it back)" % (epoch, self._epoch))
        if self.epochs is not None and epoch >= self.epochs:
            raise ValueError("set_epoch(%d) is past epochs=%d" % (epoch, self.epochs))
        self.close()
        self._stash = None
        self._resume_state = ""
        self._epoch = epoch
        self._batches_done = 0
        self._taken = []  # an elastic resume's rest of an epoch, left too
        self._len = None
        if self.mode == "dispatcher":
            # The job's epochs start here: a job of its own (every rank names the same).
            self._job_first_epoch = epoch
            self._segment_name = "%s.e%d" % (self.job_name, epoch)

    def __iter__(self):
        epoch = getattr(self.sampler, "epoch", None)
        if epoch is not None and epoch != self._sampler_epoch:
            self._sampler_epoch = epoch
            self.set_epoch(epoch)
        if self._mix_source is not None and not self._batches_done and not self._taken:
            # The mixing object as it is now (timm's train.py turns mixup_enabled off
            # at --mixup-off-epoch): its op from this epoch on.
            op, _ = mix_op(self._mix_source)
            if op is not None and op != self._mix_op:
                self._replace_batch_op(op)
                self._mix_op = op
        batches = super().__iter__()
        if self._user_code is not None:
            return self._python_batches(batches)
        if self._detection:
            return self._detection_batches(batches)
        if not self.trim_padding and self._collate is None:
            return batches
        return self._finish_batches(batches)

    def _finish_batches(self, batches):
        for images, labels in batches:
            valid = int(self._last["valid"])
            if self.trim_padding and valid < images.shape[0]:
                if valid > 0:
                    images, labels = images[:valid], labels[:valid]
                elif not self.shuffle:
                    continue
                else:
                    self._warn_padding_batch(images.shape[0])
            if self._collate is not None:
                yield self._collate(images, labels, valid)
            else:
                yield images, labels

    def _warn_padding_batch(self, rows):
        if not self._warned_empty:
            self._warned_empty = True
            warnings.warn("rank %d's last batch of epoch %d holds no sample (the epoch does not fill every "
                          "rank's last batch): it comes as %d padding rows labelled -1, so that every rank "
                          "steps as often; use ignore_index=-1 in the loss, or drop_last=True"
                          % (self.rank, self._epoch, rows), stacklevel=3)

    def _python_batches(self, batches):
        """Batches made in the workers' Python, as their collate made them, as the
        native ones are: with trim_padding, a rank's last batch holds its real rows only
        (the default collate's padding rows cut), and a batch with none (a rank's
        padding batch) is left out of an in-order loader's epoch (an evaluation) and
        kept by a shuffling one (training: every rank steps as often), as padding rows
        labelled -1."""
        for b in batches:
            valid, rows = int(self._last["valid"]), int(self._last["indices"].shape[0])
            if self.trim_padding and valid < rows:
                if valid > 0:
                    b = _user_worker.trim_rows(b, valid, rows)
                elif not self.shuffle:
                    continue
                else:
                    self._warn_padding_batch(rows)
            yield b

    def _detection_batches(self, batches):
        """Each batch as the reference's DataLoader gives it: its real rows as (image,
        target) samples, through collate_fn."""
        for images, targets in batches:
            rows = int(self._last["valid"]) if self.trim_padding else images.shape[0]
            if rows == 0 and not self.shuffle:
                continue
            samples = []
            for r in range(rows):
                image, t = images[r], dict(targets[r])
                if self._sizes is not None and t.get("image_id") in self._sizes:
                    h, w = self._sizes[t["image_id"]]
                    image = image[:, :h, :w]  # a translated transform's rows are CHW
                    if "masks" in t:
                        t["masks"] = t["masks"][:, :h, :w]
                if self._hide_image_id:
                    del t["image_id"]
                elif "image_id" in t:
                    t["image_id"] = torch.tensor([t["image_id"]])
                if "iscrowd" in t:
                    t["iscrowd"] = t["iscrowd"].to(torch.int64)
                if set(t) == {"semantic"}:
                    t = t["semantic"].to(torch.int64)  # the reference's target: the class mask alone
                samples.append((image, t))
            if self._det_collate is not None:
                yield self._det_collate(samples)
            else:
                yield images[:rows], [t for _, t in samples]

    def _to_torch(self, b):
        if self._user_code is not None:
            return super()._to_torch(b)
        if self._detection:
            images, targets = super()._to_torch(b)
            return (images.permute(0, 3, 1, 2) if self._chw else images), targets
        images, labels = super()._to_torch(b)
        if self._chw:
            images = images.permute(0, 3, 1, 2)  # PILToTensor's CHW, a view of the NHWC rows
        return images, labels

    def stats(self):
        s = super().stats()
        if self._collate is not None:
            s["collate_s"] = self._collate.seconds  # the trainer-side collate_fn's time
        return s


def _with_collate(pipeline, collate_fn):
    """(pipeline, trainer collate or None, note, batch op or None): a MixUp/CutMix
    collate_fn joins the pipeline as its batch op; any other collate_fn runs on the
    trainer (the fallback), said once. default_collate is what Ferry's batches are
    already."""
    import torch.utils.data as tud
    if collate_fn is None or collate_fn is getattr(tud, "default_collate", None) or \
            collate_fn is getattr(getattr(tud, "_utils", None), "collate", None) and \
            collate_fn is tud._utils.collate.default_collate:
        return pipeline, None, None, None
    op, why = mix_op(collate_fn)
    spec = json.loads(_ferry.pipeline_json(_pipeline_string(pipeline)))
    if op is not None and spec["output"]["dtype"] == "float32":
        spec["ops"].append(op)
        return spec, None, "collate_fn %s runs natively as Ferry's mixup_cutmix op" % _fn_name(collate_fn), op
    if op is not None:
        why = "MixUp/CutMix needs a float32 output (ToTensor or ConvertImageDtype), and this transform ends uint8"
    note = ("collate_fn %s runs on the trainer, on each batch's samples (%s); its time is in stats()['collate_s']"
            % (_fn_name(collate_fn), why or "Ferry does not recognise it"))
    warnings.warn(note, stacklevel=3)
    return pipeline, TrainerCollate(collate_fn), note, None


def _fn_name(f):
    return getattr(f, "__qualname__", None) or type(f).__name__


def batch_device(pin_memory, pin_memory_device, device, cuda_available):
    """Where ferry.DataLoader's batches go (see the class doc): `device` when given;
    else, with pin_memory on a CUDA host, pin_memory_device or the current CUDA device;
    else the host (None)."""
    if device is not None:
        return device
    if pin_memory and cuda_available:
        return pin_memory_device or "cuda"
    return None
