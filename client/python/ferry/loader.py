"""ferry.Loader: batches of decoded, augmented images as torch tensors, from the
in-process pipeline (local mode) or from Ferry workers (point to point, or through a
ferry-dispatcher job), with exact resume (state_dict) and ranks with equal steps."""
import json
import os
import sys
import time
import warnings

import numpy as np
import torch

from . import _ferry
from . import _user_worker
from . import device_finish
from .targets import batch_fields
from .user_code import user_code_payload
from .distributed import resolve_rank
from ._resume import Resumable
from ._options import _cpu_list, _mixture_data, _pipeline_string, _sharing

FerryError = RuntimeError


class Loader(Resumable, torch.utils.data.IterableDataset):
    """An iterable of (images, labels) batches; each pass over it is one epoch.

    It is also a torch IterableDataset of whole batches, so that frameworks that want a
    DataLoader get one: torch.utils.data.DataLoader(loader, batch_size=None) (with
    num_workers=0: Ferry's threads and workers do the work, and a forked copy in each of
    torch's workers would yield every batch once per worker, so that is refused).

    Local mode (the default): `threads` decode threads in this process.
    Remote modes: `dispatcher="host:port", job_name=...` (a dispatcher job), or
    `workers=["host:port", ...]` (point to point).

    Ranks: each rank of a data-parallel trainer (DDP) reads its own share of every
    epoch. `rank` and `world_size` default to the initialized torch.distributed group,
    else RANK and WORLD_SIZE from the environment, else 0 and 1. Every rank gets the
    same number of batches every epoch (len(loader)): with drop_last=True fewer than
    world_size x batch_size samples of an epoch are left out; with drop_last=False
    and world_size > 1 the last batches are padded to full size with rows whose label
    (and index) is -1 (use ignore_index=-1 in the loss), never with repeated samples.
    Through a dispatcher the ranks are the job's consumers; each sample of an epoch
    goes to exactly one rank.

    epochs: how many epochs the loader yields in all (None: no limit).
    drop_last: drop each epoch's final short batch (world_size 1: else it comes short).
    bad_samples: what a file that cannot be read or decoded does to its batch (it is
      always reported, see skipped()): "skip" (default) leaves the batch a row short
      (or with one more padding row); "refill" gives its row to the next good sample
      of the same split (batches_per_split batches), and so on down the split, so
      every batch is full of real samples but the split's last, and no sample is
      repeated or lost. A state saved under refill resumes mid-epoch with the same
      world size only.
    prefetch: batches decoded ahead (local), or per worker (remote).
    pin_memory: copy each batch to pinned memory for fast host-to-GPU copies, when CUDA
      is available (ignored, with a warning, when it is not).
    deterministic: remote dispatcher mode yields batches in split order, so that a run
      is the same whatever the number of workers.
    consumer_id: a dispatcher job shared by independent consumers (not ranks): each
      takes whichever batches come first, with no promise of equal counts.
    sharing: "splits" (default): a dispatcher job's consumers split every epoch.
      "every": a sweep: every trainer naming the job takes every batch of it, each
      exactly once, and the workers decode each batch once for all the trainers that
      keep pace (a trainer that falls far behind has its batches made again, the same
      bytes). Each trainer gives trainer_id, a name of its own that stays the same
      across restarts (its saved states resume it); its ranks, if any, share it.
    weight, priority: a dispatcher job's share of the workers' decode threads, against
      the other jobs on them: jobs that all want more than the workers make get
      throughput in proportion to their weights (0 < weight <= 1000); a job of a higher
      priority (-100..100) takes a free thread before any of a lower one. Neither
      changes a batch.
    local_threads: hybrid (dispatcher mode): this many of the trainer's own cores join
      the job as a worker that serves only this loader, leasing splits like any other
      worker (exactly once and equal steps hold as before).
    io_cpus: remote (workers= or dispatcher=): the CPUs the threads that receive
      batches run on, as a list of ints or taskset -c's "8-15". A CPU-bound trainer
      keeps them off the cores its step runs on, so that the kernel's copy out of the
      socket lands elsewhere. None: $FERRY_IO_CPUS when set, else where the threads
      start (they inherit the affinity of the thread that first iterates).
    device: where the images go: None or "cpu" (host tensors), or "cuda[:n]": batches
      are received into pinned memory (cudaHostAlloc, through the CUDA runtime torch
      loaded) and copied to the GPU asynchronously from there.
    trainer_normalize: a pipeline that normalizes to float32 NCHW has remote workers
      send uint8 NHWC (a quarter of the bytes) and makes the float32 on the trainer:
      the normalize, then the tensor ops (RandomErasing) and the batch op
      (MixUp/CutMix), by the code a worker runs (the same values, bit for bit); with
      device="cuda" and nothing but the normalize, on the GPU. None (default): when
      remote or on CUDA; True/False forces.

    A pipeline with a batch op (mixup_cutmix) yields (images, targets): soft targets
    float32 [B, num_classes], as torchvision's MixUp/CutMix collate gives them.

    Detection and segmentation: data={"format": "coco", "annotations": "instances.json",
    "images": "train2017"} (options: remove_images_without_annotations, skip_crowd,
    contiguous_labels) and targets=("boxes", "labels", "masks", ...): any of boxes,
    labels, iscrowd, area, masks, semantic, image_id. Every geometric op of the pipeline
    moves the boxes and masks with their image (boxes clipped, and dropped by the
    pipeline's sanitize_boxes rules, default min_size 1). The loader then yields
    (images, targets). targets_format="list" (default): one dict per row of images, as
    torchvision's detection models and reference scripts take them: boxes float32
    [N, 4] XYXY in output pixels, labels int64 [N], masks uint8 [N, H, W], iscrowd
    uint8 [N], area float32 [N], semantic uint8 [H, W], image_id int (padding rows: no
    boxes, image_id -1). targets_format="padded", for static shapes: a dict of tensors,
    boxes [B, max_N, 4] (zeros past a row's count), labels [B, max_N] (-1 past it),
    iscrowd, area, masks [B, max_N, H, W] likewise, counts int64 [B], image_id [B],
    semantic [B, H, W]. Semantic segmentation: data={"format": "segmentation",
    "images": ..., "masks": ..., "list": ...} (VOC, ADE20K and Cityscapes layouts) with
    targets=("semantic",); or WebDataset shards with .seg.png (palette) or .mask.png (gray)
    members (255 where no source pixel lands). Image-text data: WebDataset shards (a folder, a list, or a brace
    pattern "shard-{000000..000127}.tar") whose samples have .txt and .json members,
    with targets=("text", "meta"): each row's caption (str) and its JSON (parsed). With
    targets=("tokens",) and tokenizer={"model": "spm.model", "length": 64} (options
    add_bos, add_eos, pad_id: -1 for the model's pad id, or 0), the workers tokenize
    each caption with SentencePiece: "tokens" int32 [L] per row (padded form: [B, L])
    and "tokens_length" (ids before the padding), the ids of the Python
    sentencepiece package's encode(text, add_bos=..., add_eos=...)[:L]. The tensors
    view the received batch (no copy). targets=("key",) (any dataset, alone or with the
    others) gives each row's key: WebDataset's for shards, the file's path without its
    extension otherwise.

    Batches are torch tensors, so they export DLPack (`images.__dlpack__()`,
    `numpy.from_dlpack(images)`): uint8 batches without copying the receive buffer.
    """

    def __init__(self, data=None, pipeline="imagenet-train", batch_size=256, seed=0, shuffle=True, drop_last=True,
                 epochs=1, threads=0, dispatcher=None, job_name=None, workers=None, prefetch=2, pin_memory=False,
                 deterministic=False, token_file="", consumer_id="", batches_per_split=4, rank=None,
                 world_size=None, device=None, trainer_normalize=None, local_threads=0, bad_samples="skip",
                 targets=None, targets_format="list", tokenizer=None, dataset=None, transform=None, collate_fn=None,
                 python_processes=1, sample_timeout=None, python=None, python_steps=None, io_cpus=None,
                 sharing="splits", trainer_id="", weight=1.0, priority=0):
        self._user_code = None
        self._user_input = ""
        if python_steps is not None:
            # The rest of a transform (and a collate function) after the native
            # pipeline, run on each row in the workers' Python (ferry.DataLoader).
            rest, collate, kind = python_steps
            self._user_code = user_code_payload(None, rest, collate)
            self._user_input = kind
            trainer_normalize = False
        elif dataset is not None:
            if data is not None:
                raise ValueError("give data (files Ferry reads) or dataset (your own Dataset), not both")
            if targets:
                raise ValueError("a dataset of your own makes its own fields: targets are for data Ferry reads")
            self._user_code = user_code_payload(dataset, transform, collate_fn)
            self._user_len = len(dataset)
            data = "python:" + type(dataset).__name__
            pipeline = "imagenet-train"  # not run: the dataset's own code makes the samples
            trainer_normalize = False
        elif transform is not None or collate_fn is not None:
            raise ValueError("transform and collate_fn go with dataset= (a Dataset of your own)")
        if python_processes < 1:
            raise ValueError("python_processes must be >= 1")
        self.python_processes = int(python_processes)
        self.sample_timeout = float(sample_timeout or 0)
        # In-process, the Python processes are the trainer's own interpreter (its
        # packages, its cloudpickle): what pickled the code unpickles it.
        self.python = python or sys.executable or "/usr/bin/python3"
        if data is None:
            raise ValueError("data is required: an ImageFolder root, a .tsv list, or .tar shards (or dataset=, a "
                             "Dataset of your own)")
        self._mixture, data, trainer_normalize = _mixture_data(data, trainer_normalize, self._user_code)
        self.mixture = self._mixture.key() if self._mixture is not None else ""
        if isinstance(data, dict):
            # A source described by its fields ({"format": "coco", ...}): one canonical
            # string, so that every process names the same job by it.
            data = json.dumps(data, sort_keys=True, separators=(",", ":"))
        self.targets = tuple(targets or ())
        known = ("boxes", "labels", "iscrowd", "area", "masks", "semantic", "image_id", "text", "meta", "tokens",
                 "key")
        for t in self.targets:
            if t not in known:
                raise ValueError("targets: unknown field %r (known: %s)" % (t, ", ".join(known)))
        if len(set(self.targets)) != len(self.targets):
            raise ValueError("targets: a field named twice")
        if targets_format not in ("list", "padded"):
            raise ValueError("targets_format must be 'list' or 'padded', not %r" % (targets_format,))
        self.targets_format = targets_format
        self.tokenizer = dict(tokenizer or {})
        if ("tokens" in self.targets) != bool(self.tokenizer):
            raise ValueError("targets=(\"tokens\",) and tokenizer={\"model\": ..., \"length\": L} go together")
        if self.tokenizer:
            unknown = set(self.tokenizer) - {"model", "length", "add_bos", "add_eos", "pad_id"}
            if unknown or "model" not in self.tokenizer or "length" not in self.tokenizer:
                raise ValueError("tokenizer: give model and length (and add_bos, add_eos, pad_id); got %s"
                                 % sorted(self.tokenizer))
            self.tokenizer["model"] = os.fspath(self.tokenizer["model"])
        if dispatcher and workers:
            raise ValueError("give either dispatcher (with job_name) or workers, not both")
        if dispatcher and not job_name:
            raise ValueError("a dispatcher needs a job_name")
        if batch_size <= 0:
            raise ValueError("batch_size must be > 0")
        if epochs is not None and epochs <= 0:
            raise ValueError("epochs must be > 0, or None for no limit")
        if bad_samples not in ("skip", "refill"):
            raise ValueError("bad_samples must be 'skip' or 'refill', not %r" % (bad_samples,))
        self.bad_samples = bad_samples
        self.data = str(data)
        self.pipeline = _pipeline_string(pipeline)
        self.batch_size = int(batch_size)
        self.seed = int(seed)
        if not 0 <= self.seed < 1 << 64:
            raise ValueError("seed must be in [0, 2**64), not %d" % self.seed)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.epochs = epochs
        self.threads = int(threads)
        self.dispatcher = dispatcher or ""
        self.job_name = job_name or ""
        if isinstance(workers, str):  # one "host:port", or several comma-separated
            workers = [w.strip() for w in workers.split(",") if w.strip()]
        self.workers = list(workers or [])
        self.prefetch = int(prefetch)
        self.deterministic = bool(deterministic)
        self.token_file = token_file or ""
        self.consumer_id = consumer_id or ""
        self.sharing, self.trainer_id, self.weight, self.priority = _sharing(
            sharing, trainer_id, weight, priority, dispatcher, local_threads)
        self.batches_per_split = int(batches_per_split)
        self.pin_memory = bool(pin_memory)
        if self.pin_memory and not torch.cuda.is_available():
            warnings.warn("pin_memory=True, but CUDA is not available: ignored", stacklevel=2)
            self.pin_memory = False
        self.mode = "dispatcher" if self.dispatcher else ("workers" if self.workers else "local")
        self.io_cpus = _cpu_list(io_cpus)
        if self.io_cpus and self.mode == "local":
            raise ValueError("io_cpus places the threads that receive from workers: give workers= or dispatcher= "
                             "(in-process, threads= decode on the trainer's own CPUs)")
        self.local_threads = int(local_threads or 0)
        if self.local_threads < 0:
            raise ValueError("local_threads must be >= 0")
        if self.local_threads and self.mode != "dispatcher":
            raise ValueError("local_threads joins a dispatcher job (hybrid): give dispatcher= and job_name=")
        self._local = None  # the in-process worker (hybrid), and the job it serves
        self._local_job = None
        self.device = torch.device(device) if device is not None else None
        if self.device is not None and self.device.type not in ("cpu", "cuda"):
            raise ValueError("device must be cpu or cuda, not %s" % self.device)
        if self.device is not None and self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device=%s, but CUDA is not available" % self.device)
        self._copy_stream = None  # Ferry's CUDA stream for batches (see _upload), made on first use
        self._inflight = []       # (host tensors, event) of copies that may still be running
        self._trainer_normalize = trainer_normalize
        self._setup_wire(trainer_normalize)
        if self.consumer_id:
            if self.mode != "dispatcher":
                raise ValueError("consumer_id names a consumer of a shared dispatcher job")
            if rank not in (None, 0) or world_size not in (None, 1):
                raise ValueError("give consumer_id (a shared job) or rank/world_size (ranks), not both")
            self.rank, self.world_size = 0, 1
        else:
            self.rank, self.world_size = resolve_rank(rank, world_size)
        if self.deterministic and self.mode != "dispatcher":
            raise ValueError("deterministic=True needs a dispatcher job (local and point-to-point loaders are "
                             "in order already)")
        # Where the iteration stands: the epoch being yielded, and how many of its
        # batches were yielded.
        self._epoch = 0
        self._batches_done = 0
        self._resume_state = ""  # dispatcher mode: where the next client starts
        # The job being read (elastic resume reads the rest of an epoch as a job of its
        # own, then goes on from the next epoch as another): its name at the
        # dispatcher, its first epoch, and what an earlier world yielded of this epoch.
        self._segment_name = self.job_name
        self._job_first_epoch = 0
        self._taken = []
        self._num_samples = -1
        self._it = None
        self._stash = None  # a shared job's batch of the next epoch, seen early
        self._skipped = []
        self._wait = 0.0
        self._samples = 0
        self._batches = 0
        self._started = None
        self._len = None
        self._last = None
        if self._user_code is not None and not self._user_input:
            self._num_samples = self._user_len

    @property
    def epoch(self):
        """The epoch the next pass yields (or goes on with, after load_state_dict)."""
        return self._epoch

    @property
    def ranked(self):
        """Whether this loader is a rank (of world_size >= 1), not a shared job's consumer."""
        return not self.consumer_id

    # -- uint8 on the wire, float32 made on the trainer ----------------------------------

    def _setup_wire(self, trainer_normalize):
        """A pipeline that normalizes to float32 NCHW sends uint8 NHWC from remote workers
        (a quarter of the bytes) and makes the float32 here: the normalize, then the
        tensor ops (RandomErasing) of each sample and the batch op (MixUp/CutMix), by the
        same code and from the same random streams a worker's float32 output uses (equal
        to it, bit for bit). With a CUDA device all of it runs on the GPU, from the same
        draws (device_finish.py: equal within float tolerance), unless a tensor op cannot
        (a plugin's). trainer_normalize: None = when remote or on CUDA; True/False forces."""
        compiled = _ferry.Pipeline(self.pipeline)
        self._compiled = compiled
        self.num_classes = compiled.num_classes  # > 0: batches yield soft targets
        spec = json.loads(compiled.canonical_json)
        self._wire_pipeline = self.pipeline
        self._post = None
        self._finish = None
        normalizing = spec["output"] == {"dtype": "float32", "layout": "NCHW"}
        cuda = self.device is not None and self.device.type == "cuda"
        if trainer_normalize is None:
            trainer_normalize = normalizing and (self.mode != "local" or cuda)
        if not trainer_normalize:
            return
        if not normalizing:
            raise ValueError("trainer_normalize=True, but the pipeline outputs uint8 (nothing to normalize)")
        self._wire_pipeline = compiled.image_spec_json
        tensor_ops = [op for op in spec["ops"][len(json.loads(self._wire_pipeline)["ops"]):]]
        # On a GPU the whole finish runs there when every tensor op can say what it will
        # do (normalize, RandomErasing, MixUp/CutMix; not a plugin's): device_finish.py.
        probe = np.zeros(1, dtype=np.int64)
        if cuda and compiled.plan(probe, probe, 1, 0, 0, 0) is not None:
            self._post = compiled
        else:
            self._finish = compiled

    def _replace_batch_op(self, op):
        """At an epoch boundary: the pipeline's batch op (its last, mixup_cutmix) is `op`
        from the next batch on (a script that turns its MixUp off after so many epochs).
        Where the workers of a remote job make the float32 and mix, the job would change:
        refused."""
        spec = json.loads(self.pipeline)
        if not spec.get("ops") or spec["ops"][-1].get("op") != "mixup_cutmix":
            raise FerryError("internal: no batch op to replace")
        if self.mode != "local" and self._wire_pipeline == self.pipeline:
            raise FerryError("the collate_fn's mixing changed, but this job's workers mix its batches "
                             "(trainer_normalize=False): make a new loader (and job) for it")
        spec["ops"][-1] = op
        self.close()
        self.pipeline = json.dumps(spec)
        self._setup_wire(self._trainer_normalize)

    def _upload(self, images, labels, finish=None):
        """The batch's host tensors (views of its receive buffer, pinned when the client
        allocated it with cudaHostAlloc) to the device, without waiting for any GPU work:
          - the copies (and `finish` of the images, the float32 made there) run on
            Ferry's own CUDA stream, so
            they never queue behind the training step's kernels on the trainer's stream
            (a copy on that stream, such as `labels.to(device)` was, blocks next() until
            the step before is done);
          - the trainer's stream waits for them on the GPU (wait_event), not the host;
          - the device tensors are marked as used on the trainer's stream
            (record_stream), so that the caching allocator does not hand their memory
            to a later copy of Ferry's while a step still reads them;
          - the host tensors, and with them the receive buffer, are kept until the
            copy's event has completed (checked without waiting on each call), so a
            buffer is never recycled under an in-flight copy.
        Nothing here waits, except the client itself when every receive buffer is still
        held by a pending copy (the ring is full)."""
        if self._copy_stream is None:
            self._copy_stream = torch.cuda.Stream(device=self.device)
        trainer = torch.cuda.current_stream(self.device)
        with torch.cuda.stream(self._copy_stream):
            x = images.to(self.device, non_blocking=True)
            if finish is not None:
                x = finish(x)
            y = labels.to(self.device, non_blocking=True) if labels is not None else None
            done = torch.cuda.Event()
            done.record(self._copy_stream)
        trainer.wait_event(done)
        x.record_stream(trainer)
        if y is not None:
            y.record_stream(trainer)
        self._inflight = [(h, e) for h, e in self._inflight if not e.query()] + [((images, labels), done)]
        return x, y

    def _host_alloc(self):
        """(cudaHostAlloc, cudaFreeHost) addresses from the CUDA runtime torch loaded,
        for pinned receive buffers; None when there is no CUDA device to copy to."""
        if self.device is None or self.device.type != "cuda":
            return None
        import ctypes
        import glob
        torch.cuda.init()
        names = ["libcudart.so", "libcudart.so.12", "libcudart.so.11.0"]
        here = os.path.dirname(torch.__file__)
        names += sorted(glob.glob(os.path.join(here, "lib", "libcudart*.so*")))
        names += sorted(glob.glob(os.path.join(os.path.dirname(here), "nvidia", "cuda_runtime", "lib", "libcudart*")))
        for name in names:
            try:
                lib = ctypes.CDLL(name)
                return (ctypes.cast(lib.cudaHostAlloc, ctypes.c_void_p).value,
                        ctypes.cast(lib.cudaFreeHost, ctypes.c_void_p).value)
            except (OSError, AttributeError):
                continue
        warnings.warn("no CUDA runtime library found: batches are copied to the GPU from unpinned memory")
        return None

    # -- the C++ iterator, created lazily (after load_state_dict, at the right place) --

    def _last_batch(self):
        if self.drop_last:
            return "drop"
        return "pad" if self.world_size > 1 else "keep"

    def _job_options(self):
        o = {"data": self.data, "pipeline": self._wire_pipeline, "batch_size": self.batch_size, "seed": self.seed,
             "shuffle": self.shuffle, "last_batch": self._last_batch(), "batches_per_split": self.batches_per_split,
             "deterministic": self.deterministic, "bad_samples": self.bad_samples}
        if self.sharing != "splits":
            o["sharing"] = self.sharing
        if self.weight != 1.0 or self.priority != 0:
            o.update(weight=self.weight, priority=self.priority)
        if self.targets:
            o["targets"] = list(self.targets)
        for k, v in self.tokenizer.items():
            o["tokenizer_" + k] = v
        if self.ranked:
            o.update(rank=self.rank, world_size=self.world_size)
        if self._mixture is not None:
            o.update(self._mixture.options())
        if self._user_code is not None:
            o.update(user_code=self._user_code[0], user_versions=self._user_code[1], user_input=self._user_input)
            if not self._user_input:
                o["num_samples"] = self._user_len
        if self._taken:
            o["taken"] = [tuple(t) for t in self._taken]
        return o

    def _open(self):
        if self._it is not None:
            return self._it
        remaining = 0 if self.epochs is None else self.epochs - self._epoch
        o = self._job_options()
        if self.mode == "local":
            del o["deterministic"]  # batches_per_split stays: refill's groups
            o.update(epochs=1 if self._taken else remaining, first_epoch=self._epoch,
                     resume_batches=self._batches_done, threads=self.threads, prefetch=self.prefetch)
            if self._user_code is not None:
                o.update(python=self.python, python_processes=self.python_processes,
                         sample_timeout=self.sample_timeout)
            self._it = _ferry.open_local(o)
            if self._mixture is None:
                self._num_samples = self._it.dataset_size()
        elif self.mode == "dispatcher":
            # The job holds the run's epochs from its first (a saved state says where it
            # stands): epochs counts them, as everywhere; a remainder job is the one epoch
            # it finishes.
            if self._taken:
                epochs = 1
            elif self.epochs is None:
                epochs = 0
            else:
                epochs = self.epochs - self._job_first_epoch
                if epochs <= 0:
                    raise ValueError("the job starts at epoch %d, past epochs=%d" % (self._job_first_epoch, self.epochs))
            self._start_local_worker()
            o.update(epochs=epochs, job_first_epoch=self._job_first_epoch, dispatcher=self.dispatcher,
                     job_name=self._segment_name, credits=self.prefetch, token_file=self.token_file,
                     consumer_id=self.consumer_id, resume_state=self._resume_state, host_alloc=self._host_alloc(),
                     io_cpus=self.io_cpus)
            if self.trainer_id:
                o["trainer_id"] = self.trainer_id
            self._it = _ferry.connect(o)
        else:
            # Point to point, the streams start at the epoch to read.
            o.update(epochs=remaining, first_epoch=self._epoch, workers=self.workers, credits=self.prefetch,
                     token_file=self.token_file, host_alloc=self._host_alloc(), io_cpus=self.io_cpus)
            self._it = _ferry.connect(o)
        return self._it

    def _consumer(self):
        """This loader's consumer id at the dispatcher."""
        return self.consumer_id if self.consumer_id else "rank-%d" % self.rank

    def _start_local_worker(self):
        """Hybrid: `local_threads` of this process's cores join the job being read as a
        worker that serves only this loader, leasing splits like any other (one per job
        segment: an elastic remainder, then the rest of the run)."""
        if not self.local_threads or self._local_job == self._segment_name:
            return
        self._stop_local_worker()
        self._local = _ferry.LocalWorker({"dispatcher": self.dispatcher, "job_name": self._segment_name,
                                          "consumer_id": self._consumer(), "threads": self.local_threads,
                                          "token_file": self.token_file})
        self._local_job = self._segment_name

    def _stop_local_worker(self):
        if self._local is not None:
            self._local_sent = getattr(self, "_local_sent", 0) + self._local.batches_sent()
            self._local.close()
            self._local = None
            self._local_job = None

    def local_batches(self):
        """Hybrid: batches this process's own worker has served (all segments)."""
        return getattr(self, "_local_sent", 0) + (self._local.batches_sent() if self._local is not None else 0)

    def close(self):
        """Stops the pipeline (or the streams) now; a later iteration starts it again,
        where this one stopped."""
        if self._it is not None:
            if self.mode == "dispatcher":
                try:
                    self._resume_state = self._it.state(self._unyield())
                except Exception:
                    pass  # the dispatcher is gone: a reopen starts from the last state known
            self._it.close()
            self._it = None
        self._stop_local_worker()

    def __del__(self):
        # Not close(): the state it keeps for a later pass would ask a dispatcher job's
        # client where it stands (a shared job's may wait on the network), for nobody.
        try:
            if self._it is not None:
                self._it.close()
                self._it = None
            self._stop_local_worker()
        except Exception:
            pass

    # -- iteration ---------------------------------------------------------------------

    def __iter__(self):
        if torch.utils.data.get_worker_info() is not None:
            raise FerryError("a ferry.Loader iterated in a worker process of torch's DataLoader: each worker would "
                             "yield every batch; wrap it with DataLoader(loader, batch_size=None, num_workers=0) "
                             "(Ferry decodes on its own threads and workers)")
        if self.epochs is not None and self._epoch >= self.epochs:
            return iter(())
        return self._epoch_batches()

    def _fields(self, b):
        """The batch's per-sample fields as targets_format says (see the class doc)."""
        return batch_fields(b, self.targets, self.targets_format)

    def _to_torch(self, b):
        """(images, labels), or (images, soft targets) when the pipeline has a batch op,
        or (images, targets) for a job with targets; with a dataset of the user's own,
        what its collate_fn made (default_collate's batch when none)."""
        if self._user_code is not None:
            # Batches of one job mostly share a structure: parsed once while it repeats.
            text = b["structure"]
            if getattr(self, "_structure_text", None) != text:
                self._structure_text, self._decoder = text, _user_worker.decoder(text)
            out = self._decoder(b["user_data"])
            if not isinstance(out, _user_worker.Padding):
                # Its batch dimension: the rows (padded by the default collate) or the
                # samples made (a collate_fn of the user's gets those only).
                self._user_prev = (out, (int(b["indices"].shape[0]), int(b["valid"])))
                return out
            # A batch without a sample (a rank's padding batch): shaped after the one
            # before it, its rows -1 in integers (labels) and zeros elsewhere.
            prev = getattr(self, "_user_prev", None)
            if prev is None:
                raise FerryError("rank %d's batch %d of epoch %d holds no sample and no batch came before it to "
                                 "shape its padding after (fewer batches in the epoch than ranks): use "
                                 "drop_last=True, a smaller batch_size or fewer ranks"
                                 % (self.rank, self._batches_done, int(b["epoch"])))
            return _user_worker.pad_like(prev[0], out.rows or int(b["indices"].shape[0]), prev[1])
        labels = torch.from_numpy(b["labels"])
        targets = b.get("targets")
        cuda = self.device is not None and self.device.type == "cuda"
        finish = None
        if self._post is not None:  # uint8 up, the float32 made on the GPU (device_finish.py)
            valid = int(b["valid"])
            plan = self._post.plan(b["indices"], b["labels"], valid, self.seed, int(b["epoch"]),
                                   int(b["batch_in_epoch"]))
            images, targets = torch.from_numpy(b["images"]), plan["targets"]
            finish = lambda x: device_finish.finish(x, plan, valid)  # noqa: E731
        elif self._finish is not None:
            images, targets = self._finish.finish(b["images"], b["indices"], b["labels"], int(b["valid"]), self.seed,
                                                  int(b["epoch"]), int(b["batch_in_epoch"]))
            images = torch.from_numpy(images)
        else:
            images = torch.from_numpy(b["images"])
        if targets is not None:
            labels = torch.from_numpy(targets)
        if self.targets:
            # The targets stay on the host, views of the batch (the reference scripts
            # move them to the device themselves).
            if cuda:
                images, _ = self._upload(images, None, finish)
            elif self.pin_memory:
                images = images.pin_memory()
            return images, self._fields(b)
        if cuda:
            return self._upload(images, labels, finish)
        if self.pin_memory:
            images, labels = images.pin_memory(), labels.pin_memory()
        return images, labels

    def _next_raw(self):
        t0 = time.perf_counter()
        if self._started is None:
            self._started = t0
        b = self._open().next()
        self._wait += time.perf_counter() - t0
        self._skipped.extend(self._it.take_skipped())
        return b

    def _epoch_batches(self):
        epoch = self._epoch
        # A rank (and the local loader) yields its epochs one after the other, and the
        # batch marked last_in_epoch is its epoch's last: the boundary is exact. A
        # shared job's consumer knows an epoch ended only from the first batch of the
        # next one, which it keeps for the next pass (and out of its saved state).
        exact = self.ranked
        while True:
            if self._stash is not None and self._stash["epoch"] <= epoch:
                b, self._stash = self._stash, None
            elif self._stash is not None:
                break
            else:
                b = self._next_raw()
                if b is None:
                    break
                if b["epoch"] > epoch:
                    if exact:
                        raise FerryError("internal: epoch %d ended early (a batch of epoch %d came)"
                                         % (epoch, b["epoch"]))
                    self._stash = b
                    break
            self._batches_done += 1
            last = exact and b["last_in_epoch"]
            if b["valid"] > 0 or b["labels"].shape[0] > 0:
                self._last = b
                self._batches += 1
                self._samples += int(b["valid"])
                yield self._to_torch(b)
            if last:
                break
        self._epoch = epoch + 1
        self._batches_done = 0
        if self._taken:
            # The rest of an epoch is read: the run goes on from the next epoch, as a
            # job of its own at a dispatcher.
            self._it.close()
            self._it = None
            self._taken = []
            self._resume_state = ""
            self._len = None
            if self.mode == "dispatcher":
                self._job_first_epoch = self._epoch
                self._segment_name = "%s.w%d.e%d" % (self.job_name, self.world_size, self._epoch)

    def __len__(self):
        """Batches per epoch of this rank (the same for every rank); after an elastic
        resume, of the epoch being finished, then of the next."""
        if self._len is None:
            if self.mode == "local":
                self._len = self._open().batches_per_epoch()
            else:
                n = self._samples_listed()
                if n < 0:
                    raise TypeError("the job's size is not known yet (the dispatcher did not answer)")
                n -= sum(hi - lo for lo, hi in self._taken)
                self._len = _ferry.batches_per_rank(n, self.batch_size, self.world_size, self._last_batch())
        return self._len

    def _samples_listed(self):
        """The dataset's sample count as the job lists it (a mixture's: its epoch)."""
        if self._mixture is not None:
            return self._mixture.epoch
        if self._num_samples < 0:
            if self.mode == "local":
                self._open()
            elif self.mode == "dispatcher":
                self._num_samples = self._open().job_samples()
            else:
                self._num_samples = len(_ferry.list_dataset(self.data)[0])
        return self._num_samples

    def _unyield(self):
        if self._stash is None:
            return []
        # Counted as yielded by the client, never given to the trainer: the resumed
        # loader must get it.
        s = self._stash
        return [(s["epoch"], s["split"], s["batch_in_split"], s["batches_in_split"])]

    # -- observability -------------------------------------------------------------------

    def stats(self):
        """data_wait_s (time spent waiting for batches), throughput (samples/s since the
        first batch was asked for), batches, samples, skipped (bad files)."""
        wall = 0.0 if self._started is None else time.perf_counter() - self._started
        return {"data_wait_s": self._wait, "throughput": self._samples / wall if wall > 0 else 0.0,
                "batches": self._batches, "samples": self._samples, "skipped": len(self._skipped),
                "wall_s": wall}

    def last_batch_info(self):
        """Of the batch yielded last: its sample indices (a tensor; -1 for padding rows),
        provenance (epoch, batch_in_epoch, split, batch_in_split), valid rows (the
        others are padding), and `buffer` = (address, size) of the memory its tensors
        view."""
        if self._last is None:
            return None
        info = {k: v for k, v in self._last.items() if k not in ("images", "labels", "indices", "targets")}
        info["indices"] = torch.from_numpy(self._last["indices"])
        return info

    def skipped(self):
        """Bad files skipped so far: a list of (index, path, reason)."""
        return list(self._skipped)
