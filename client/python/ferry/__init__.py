"""Ferry for PyTorch: batches of decoded, augmented images as torch tensors, from the
in-process pipeline (local mode) or from Ferry workers (point to point, or through a
ferry-dispatcher job).

    import ferry
    loader = ferry.Loader(data="/datasets/imagenet/train", pipeline="imagenet-train",
                          batch_size=256, threads=8)
    for epoch in range(90):
        for images, labels in loader:      # one epoch per pass, like a DataLoader
            ...

Tensors are views of Ferry's batch buffers (no copy): images float32 NCHW for the
normalizing presets, uint8 NHWC when the spec says so; labels int64. A tensor keeps its
buffer alive for as long as it lives. From remote workers a normalizing pipeline travels
as uint8 and is normalized here (device="cuda": on the GPU).

`state_dict()` / `load_state_dict()` give exact resume: a run interrupted and resumed
yields the same batches, bit for bit, as one that was not (local mode, and
deterministic remote mode).
"""
import hashlib
import json
import os
import time
import warnings

import torch

from . import _ferry

__all__ = ["Loader", "DataLoader", "FerryError", "list_dataset", "pipeline_from_transform", "available_cpus",
           "default_threads"]

FerryError = RuntimeError


def list_dataset(data):
    """(paths, labels, classes) as Ferry lists `data` (the order of torchvision's ImageFolder)."""
    return _ferry.list_dataset(str(data))


def _pipeline_string(pipeline):
    if isinstance(pipeline, dict):
        return json.dumps(pipeline)
    return str(pipeline)


def _resolve_rank(rank, world_size):
    """(rank, world_size): as given; else from an initialized torch.distributed process
    group; else from RANK and WORLD_SIZE in the environment (as torchrun sets them);
    else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise ValueError("give both rank and world_size, or neither (they then come from torch.distributed or "
                         "RANK/WORLD_SIZE)")
    if rank is None:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        elif "RANK" in os.environ and "WORLD_SIZE" in os.environ:
            rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        else:
            rank, world_size = 0, 1
    rank, world_size = int(rank), int(world_size)
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError("rank must be in [0, world_size) and world_size >= 1, not rank=%d world_size=%d"
                         % (rank, world_size))
    return rank, world_size


class Loader(torch.utils.data.IterableDataset):
    """An iterable of (images, labels) batches; each pass over it is one epoch.

    It is also a torch IterableDataset of whole batches, so that frameworks that want a
    DataLoader get one: torch.utils.data.DataLoader(loader, batch_size=None).

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
    local_threads: hybrid (dispatcher mode): this many of the trainer's own cores join
      the job as a worker that serves only this loader, leasing splits like any other
      worker (exactly once and equal steps hold as before).
    device: where the images go: None or "cpu" (host tensors), or "cuda[:n]": batches
      are received into pinned memory (cudaHostAlloc, through the CUDA runtime torch
      loaded) and copied to the GPU asynchronously from there.
    trainer_normalize: a pipeline that normalizes to float32 NCHW has remote workers
      send uint8 NHWC (a quarter of the bytes) and normalizes on the trainer: on the
      GPU with device="cuda", else on the CPU by the code a worker runs (the same
      values, bit for bit). None (default): when remote or on CUDA; True/False forces.

    Batches are torch tensors, so they export DLPack (`images.__dlpack__()`,
    `numpy.from_dlpack(images)`): uint8 batches without copying the receive buffer.
    """

    def __init__(self, data=None, pipeline="imagenet-train", batch_size=256, seed=0, shuffle=True, drop_last=True,
                 epochs=1, threads=0, dispatcher=None, job_name=None, workers=None, prefetch=2, pin_memory=False,
                 deterministic=False, token_file="", consumer_id="", batches_per_split=4, rank=None,
                 world_size=None, device=None, trainer_normalize=None, local_threads=0, bad_samples="skip"):
        if data is None:
            raise ValueError("data is required: an ImageFolder root, a .tsv list, or .tar shards")
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
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.epochs = epochs
        self.threads = int(threads)
        self.dispatcher = dispatcher or ""
        self.job_name = job_name or ""
        self.workers = list(workers or [])
        self.prefetch = int(prefetch)
        self.deterministic = bool(deterministic)
        self.token_file = token_file or ""
        self.consumer_id = consumer_id or ""
        self.batches_per_split = int(batches_per_split)
        self.pin_memory = bool(pin_memory)
        if self.pin_memory and not torch.cuda.is_available():
            warnings.warn("pin_memory=True, but CUDA is not available: ignored", stacklevel=2)
            self.pin_memory = False
        self.mode = "dispatcher" if self.dispatcher else ("workers" if self.workers else "local")
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
        self._setup_wire(trainer_normalize)
        if self.consumer_id:
            if self.mode != "dispatcher":
                raise ValueError("consumer_id names a consumer of a shared dispatcher job")
            if rank not in (None, 0) or world_size not in (None, 1):
                raise ValueError("give consumer_id (a shared job) or rank/world_size (ranks), not both")
            self.rank, self.world_size = 0, 1
        else:
            self.rank, self.world_size = _resolve_rank(rank, world_size)
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
        (a quarter of the bytes) and normalizes here: on the GPU with a CUDA device, else
        on the CPU by the same code a worker runs (equal to the worker's float32, bit for
        bit). trainer_normalize: None = when remote or on CUDA; True/False to force."""
        spec = json.loads(_ferry.pipeline_json(self.pipeline))
        self._wire_pipeline = self.pipeline
        self._post = None
        normalizing = spec["output"] == {"dtype": "float32", "layout": "NCHW"}
        cuda = self.device is not None and self.device.type == "cuda"
        if trainer_normalize is None:
            trainer_normalize = normalizing and (self.mode != "local" or cuda)
        if not trainer_normalize:
            return
        if not normalizing:
            raise ValueError("trainer_normalize=True, but the pipeline outputs uint8 (nothing to normalize)")
        norm = [op for op in spec["ops"] if op["op"] == "normalize"]
        channels = 1 if spec.get("decode") == "gray" else 3
        mean = norm[0]["mean"][:channels] if norm else [0.0] * channels
        std = norm[0]["std"][:channels] if norm else [1.0] * channels
        wire = dict(spec, ops=[op for op in spec["ops"] if op["op"] != "normalize"],
                    output={"dtype": "uint8", "layout": "NHWC"})
        self._wire_pipeline = json.dumps(wire, sort_keys=True)
        self._post = (mean, std)
        self._post_device = {}  # device -> (scale, bias) tensors of shape [1, C, 1, 1]

    def _normalize(self, images):
        """uint8 NHWC (numpy) -> float32 NCHW torch tensor, on self.device."""
        mean, std = self._post
        if self.device is None or self.device.type == "cpu":
            return torch.from_numpy(_ferry.normalize_nhwc(images, mean, std))
        x = self._to_cuda(torch.from_numpy(images))
        if self.device not in self._post_device:
            # The worker's arithmetic: x * (1 / (255 std)) + (-mean / std), in float32.
            m = torch.tensor(mean, dtype=torch.float32)
            sd = torch.tensor(std, dtype=torch.float32)
            scale = (1.0 / (255.0 * sd)).view(1, -1, 1, 1).to(self.device)
            bias = (-m / sd).view(1, -1, 1, 1).to(self.device)
            self._post_device[self.device] = (scale, bias)
        scale, bias = self._post_device[self.device]
        return torch.addcmul(bias, x.permute(0, 3, 1, 2).float(), scale).contiguous()

    def _to_cuda(self, host):
        """A host tensor (a view of a receive buffer; pinned when the client allocated
        it with cudaHostAlloc) copied to the device asynchronously; the host tensor is
        kept until the copy is done, so its buffer is not recycled under the copy."""
        out = host.to(self.device, non_blocking=host.is_pinned())
        event = torch.cuda.Event()
        event.record()
        self._inflight = [(h, e) for h, e in getattr(self, "_inflight", []) if not e.query()] + [(host, event)]
        return out

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
        if self.ranked:
            o.update(rank=self.rank, world_size=self.world_size)
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
            self._it = _ferry.open_local(o)
            self._num_samples = self._it.dataset_size()
        elif self.mode == "dispatcher":
            # The job counts the run's epochs (from its first; a saved state says where
            # it stands); a remainder job is the one epoch it finishes.
            epochs = self._epoch + 1 if self._taken else (0 if self.epochs is None else self.epochs)
            self._start_local_worker()
            o.update(epochs=epochs, job_first_epoch=self._job_first_epoch, dispatcher=self.dispatcher,
                     job_name=self._segment_name, credits=self.prefetch, token_file=self.token_file,
                     consumer_id=self.consumer_id, resume_state=self._resume_state, host_alloc=self._host_alloc())
            self._it = _ferry.connect(o)
        else:
            # Point to point, the streams start at the epoch to read.
            o.update(epochs=remaining, first_epoch=self._epoch, workers=self.workers, credits=self.prefetch,
                     token_file=self.token_file, host_alloc=self._host_alloc())
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
        try:
            self.close()
        except Exception:
            pass

    # -- iteration ---------------------------------------------------------------------

    def __iter__(self):
        if self.epochs is not None and self._epoch >= self.epochs:
            return iter(())
        return self._epoch_batches()

    def _to_torch(self, b):
        labels = torch.from_numpy(b["labels"])
        if self._post is not None:
            images = self._normalize(b["images"])
        else:
            images = torch.from_numpy(b["images"])
            if self.device is not None and self.device.type == "cuda":
                images = self._to_cuda(images)
        if self.device is not None and self.device.type == "cuda":
            labels = labels.to(self.device)
        elif self.pin_memory:
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
        """The dataset's sample count as the job lists it."""
        if self._num_samples < 0:
            if self.mode == "local":
                self._open()
            elif self.mode == "dispatcher":
                self._num_samples = self._open().job_samples()
            else:
                self._num_samples = len(list_dataset(self.data)[0])
        return self._num_samples

    def _unyield(self):
        if self._stash is None:
            return []
        # Counted as yielded by the client, never given to the trainer: the resumed
        # loader must get it.
        s = self._stash
        return [(s["epoch"], s["split"], s["batch_in_split"], s["batches_in_split"])]

    # -- state -------------------------------------------------------------------------

    _STATE_VERSION = 2

    def state_dict(self):
        """Where this rank's iteration stands, to resume exactly: save it with the
        checkpoint (every rank its own)."""
        sd = {"version": self._STATE_VERSION, "mode": self.mode, "rank": self.rank, "world_size": self.world_size,
              "ranked": self.ranked, "epoch": self._epoch, "batches_done": self._batches_done, "seed": self.seed,
              "batch_size": self.batch_size, "data": self.data, "pipeline": self.pipeline,
              "last_batch": self._last_batch(), "bad_samples": self.bad_samples}
        sd["job_name"] = self.job_name
        # The job being read, as elastic resume needs it to work out what was yielded.
        sd["job"] = {"name": self._segment_name, "first_epoch": self._job_first_epoch,
                     "taken": [list(t) for t in self._taken], "batches_per_split": self.batches_per_split,
                     "num_samples": self._samples_listed() if self.mode != "workers" else -1}
        if self.mode == "dispatcher":
            sd["iterator_state"] = self._open().state(self._unyield())
        return sd

    def load_state_dict(self, sd):
        """Continues from a state_dict(): the next batch is the one after the saved point.

        `sd` is this rank's own state, or the list of every rank's states (as gathered
        with torch.distributed.all_gather_object, or read one file per rank). Given the
        list of a different world size (elastic resume), the rest of the epoch the old
        ranks stopped in, and only the rest, is spread over this world's ranks with
        equal steps (its last batches padded, or fewer than world_size x batch_size
        samples dropped), then the run goes on from the next epoch."""
        if isinstance(sd, (list, tuple)):
            states = list(sd)
            if not states:
                raise ValueError("an empty list of states")
            worlds = {int(x["world_size"]) if isinstance(x, dict) and "world_size" in x else -1 for x in states}
            old_world = worlds.pop() if len(worlds) == 1 else -1
            if old_world < 1 or sorted(int(x["rank"]) for x in states) != list(range(old_world)):
                raise ValueError("the list must hold every rank's state once, all of one world size")
            for x in states:
                self._check_state(x, same_world=old_world == self.world_size)
            if old_world != self.world_size:
                self._load_elastic(sorted(states, key=lambda x: int(x["rank"])))
                return
            sd = states[self.rank]
        self._check_state(sd, same_world=True)
        if int(sd["world_size"]) != self.world_size or int(sd["rank"]) != self.rank:
            raise ValueError("this is the state of rank %s of %s, and this loader is rank %d of %d; to resume with "
                             "another world size give the list of every rank's states"
                             % (sd["rank"], sd["world_size"], self.rank, self.world_size))
        self.close()
        self._stash = None
        self._epoch = int(sd["epoch"])
        self._batches_done = int(sd["batches_done"])
        job = sd["job"]
        self._segment_name = job["name"]
        self._job_first_epoch = int(job["first_epoch"])
        self._taken = [tuple(t) for t in job["taken"]]
        self._num_samples = int(job["num_samples"])
        self._len = None
        if self.mode == "dispatcher":
            self._resume_state = sd["iterator_state"]
        elif self.mode == "workers" and self._batches_done:
            raise ValueError("point-to-point loaders resume at epoch boundaries only; use a dispatcher job")

    def _load_elastic(self, states):
        """Elastic resume from the old ranks' states (sorted by rank)."""
        epochs = {int(x["epoch"]) for x in states}
        if len(epochs) != 1:
            raise ValueError("the old ranks' states are at different epochs %s (not saved at the same step?)"
                             % sorted(epochs))
        epoch = epochs.pop()
        old = states[0]
        job = old["job"]
        if any(x["job"] != job for x in states):
            raise ValueError("the old ranks' states are of different jobs")
        mid_epoch = any(int(x["batches_done"]) > 0 for x in states)
        if mid_epoch and any(x.get("bad_samples", "skip") == "refill" for x in states):
            # Under refill a yielded batch holds the split's next good samples, not the
            # positions its plan names, so the old ranks' positions are not known.
            raise ValueError("a state saved mid-epoch under bad_samples='refill' resumes with the same world size "
                             "only (or save at an epoch boundary)")
        if self.mode == "workers" and mid_epoch:
            raise ValueError("point-to-point loaders resume at epoch boundaries only; use a dispatcher job")
        taken = [tuple(t) for t in job["taken"]]  # the old world's own remainder of this epoch
        n = int(job["num_samples"])
        if mid_epoch:
            old_job = {"data": self.data, "pipeline": self._wire_pipeline, "batch_size": int(old["batch_size"]),
                       "seed": self.seed, "shuffle": self.shuffle, "last_batch": old["last_batch"],
                       "batches_per_split": int(job["batches_per_split"]), "world_size": int(old["world_size"]),
                       "num_samples": n, "taken": taken}
            yielded = []
            for r, x in enumerate(states):
                if int(x["batches_done"]) == 0:
                    yielded.append([])
                elif self.mode == "local":
                    yielded.append(list(range(int(x["batches_done"]))))
                else:
                    yielded.append(_ferry.yielded_batches(old_job, x["iterator_state"], r, epoch))
            taken = [tuple(t) for t in _ferry.taken_positions(old_job, yielded)]
        rest = n - sum(hi - lo for lo, hi in taken)
        if taken and self.drop_last and rest < self.world_size * self.batch_size:
            taken, epoch = [], epoch + 1  # what is left of the epoch makes no batch for every rank: dropped
        self.close()
        self._stash = None
        self._epoch = epoch
        self._batches_done = 0
        self._taken = taken
        self._num_samples = n
        self._resume_state = ""
        self._len = None
        if self.mode == "dispatcher":
            # A job of this world for the rest of the epoch (named after what it holds,
            # so that every new rank names the same), then one from the next epoch.
            self._job_first_epoch = epoch
            self._segment_name = "%s.w%d.e%d" % (self.job_name, self.world_size, epoch)
            if taken:
                digest = hashlib.sha1(json.dumps(taken).encode()).hexdigest()[:12]
                self._segment_name += ".rest-" + digest

    def _check_state(self, sd, same_world):
        if not isinstance(sd, dict) or sd.get("version") != self._STATE_VERSION:
            raise ValueError("not a ferry.Loader state_dict of this version (version %r)"
                             % (sd.get("version") if isinstance(sd, dict) else type(sd).__name__))
        if sd.get("mode") != self.mode:
            raise ValueError("state_dict of a %s loader given to a %s loader" % (sd.get("mode"), self.mode))
        if bool(sd.get("ranked")) != self.ranked:
            raise ValueError("state_dict of a %s given to a %s" % (
                "rank" if sd.get("ranked") else "shared job's consumer", "rank" if self.ranked else
                "shared job's consumer"))
        # Another world may change the batch size (keeping the global batch, say).
        keys = ("seed", "data", "pipeline", "job_name") + (("batch_size",) if same_world else ())
        for key in keys:
            if sd.get(key) != getattr(self, key):
                raise ValueError("state_dict was saved with %s=%r, this loader has %r" % (key, sd.get(key),
                                                                                        getattr(self, key)))
        if sd.get("bad_samples", "skip") != self.bad_samples:
            # Saved by a loader of the other policy: its positions name other batches.
            raise ValueError("state_dict was saved with bad_samples=%r, this loader has %r"
                             % (sd.get("bad_samples", "skip"), self.bad_samples))

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
        info = {k: v for k, v in self._last.items() if k not in ("images", "labels", "indices")}
        info["indices"] = torch.from_numpy(self._last["indices"])
        return info

    def skipped(self):
        """Bad files skipped so far: a list of (index, path, reason)."""
        return list(self._skipped)


# ---------------------------------------------------------------------------------------
# The drop-in wrapper

def available_cpus():
    """CPUs this process may use: its CPU affinity, capped by the cgroup's CPU quota
    (a container's limit), at least 1."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    try:  # cgroup v2: "max 100000" or "<quota> <period>"
        with open("/sys/fs/cgroup/cpu.max") as f:
            quota, period = f.read().split()[:2]
        if quota != "max":
            n = min(n, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        try:  # cgroup v1
            with open("/sys/fs/cgroup/cpu/cpu.cfs_quota_us") as f:
                quota = int(f.read())
            with open("/sys/fs/cgroup/cpu/cpu.cfs_period_us") as f:
                period = int(f.read())
            if quota > 0 and period > 0:
                n = min(n, max(1, quota // period))
        except (OSError, ValueError):
            pass
    return max(1, n)


def default_threads(num_workers=0):
    """Decode threads for one rank: this host's CPUs (affinity and cgroup limit) split
    across its local ranks (LOCAL_WORLD_SIZE, as torchrun sets it), capped by
    num_workers when that is given (> 0)."""
    local = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1))
    share = max(1, available_cpus() // local)
    return min(int(num_workers), share) if num_workers and num_workers > 0 else share


def _square(size, what):
    if isinstance(size, int):
        return size
    if isinstance(size, (tuple, list)) and len(size) == 1:
        return int(size[0])
    if isinstance(size, (tuple, list)) and len(size) == 2 and size[0] == size[1]:
        return int(size[0])
    raise ValueError("ferry cannot run %s with the non-square size %r (its outputs are square)" % (what, size))


def _check_interpolation(t, what):
    mode = getattr(t, "interpolation", None)
    if mode is None:
        return
    name = getattr(mode, "value", str(mode))
    if str(name).lower() not in ("bilinear", "2"):  # InterpolationMode.BILINEAR, or PIL's BILINEAR (2)
        raise ValueError("ferry cannot run %s with interpolation=%s: it resizes bilinearly (area-averaging "
                         "large reductions, as antialiasing does)" % (what, name))
    if getattr(t, "antialias", None) is False:
        raise ValueError("ferry cannot run %s with antialias=False: it always antialiases large reductions" % what)


def _jitter_amount(value, name, centre=1.0):
    """ColorJitter keeps (lo, hi); ferry draws from [max(0, c - v), c + v]: v, or raise."""
    if value is None:
        return 0.0
    if isinstance(value, (int, float)):
        return float(value)
    lo, hi = float(value[0]), float(value[1])
    v = round(hi - centre, 12)  # (0.6, 1.4) is 0.4, not 0.3999999999999999
    if v < 0 or abs(lo - max(0.0, centre - v)) > 1e-9:
        raise ValueError("ferry cannot run ColorJitter with the asymmetric %s range (%g, %g); it draws from "
                         "[max(0, 1 - v), 1 + v]" % (name, lo, hi))
    return v


def _transform_to_pipeline(transform):
    """(A Ferry pipeline spec (dict) equivalent to a torchvision transform, whether the
    output is CHW uint8 as PILToTensor gives it), or ValueError naming what Ferry
    cannot honour. Nothing is dropped silently."""
    import torchvision.transforms as T
    ops = []
    steps = list(transform.transforms) if isinstance(transform, T.Compose) else [transform]
    geometry = None
    tensor = None  # "ToTensor" (float32 in [0, 1]) or "PILToTensor" (uint8)
    normalized = False
    for t in steps:
        name = type(t).__name__
        if tensor is None and name not in ("ToTensor", "PILToTensor") and geometry is None and name in (
                "RandomHorizontalFlip", "ColorJitter"):
            raise ValueError("ferry runs %s after the crop; put RandomResizedCrop or Resize+CenterCrop first" % name)
        if tensor is not None and name not in ("Normalize", "ConvertImageDtype"):
            raise ValueError("ferry cannot run %s after %s (only Normalize and ConvertImageDtype may follow it)"
                             % (name, tensor))
        if name == "RandomResizedCrop":
            _check_interpolation(t, name)
            ops.append({"op": "random_resized_crop", "size": _square(t.size, name), "scale": list(t.scale),
                        "ratio": list(t.ratio)})
            geometry = name
        elif name == "Resize":
            _check_interpolation(t, name)
            if getattr(t, "max_size", None) is not None:
                raise ValueError("ferry cannot run Resize with max_size=%r" % t.max_size)
            size = t.size
            if not isinstance(size, int) and not (isinstance(size, (tuple, list)) and len(size) == 1):
                raise ValueError("ferry runs Resize(int) (the shorter side to int), not Resize(%r) (a fixed "
                                 "size)" % (size,))
            ops.append({"op": "resize_shorter", "size": int(size if isinstance(size, int) else size[0])})
        elif name == "CenterCrop":
            ops.append({"op": "center_crop", "size": _square(t.size, name)})
            geometry = name
        elif name == "RandomHorizontalFlip":
            ops.append({"op": "hflip", "p": float(t.p)})
        elif name == "ColorJitter":
            hue = t.hue
            if hue is not None and (not isinstance(hue, (tuple, list)) or any(float(h) != 0 for h in hue)) and \
                    hue != 0:
                raise ValueError("ferry cannot run ColorJitter with hue=%r (brightness, contrast and saturation "
                                 "only)" % (hue,))
            ops.append({"op": "color_jitter", "brightness": _jitter_amount(t.brightness, "brightness"),
                        "contrast": _jitter_amount(t.contrast, "contrast"),
                        "saturation": _jitter_amount(t.saturation, "saturation")})
        elif name in ("ToTensor", "PILToTensor"):
            tensor = name
        elif name == "ConvertImageDtype":
            if tensor != "PILToTensor" or t.dtype != torch.float32:
                raise ValueError("ferry runs ConvertImageDtype(torch.float32) after PILToTensor only")
            tensor = "ToTensor"  # the same values as ToTensor's
        elif name == "Normalize":
            if tensor != "ToTensor":
                raise ValueError("Normalize must follow ToTensor (or PILToTensor + ConvertImageDtype(float32))")
            if getattr(t, "inplace", False):
                pass  # the same values
            mean, std = [float(x) for x in t.mean], [float(x) for x in t.std]
            if len(mean) != 3 or len(std) != 3:
                raise ValueError("ferry runs Normalize with 3 means and 3 stds, not %r / %r" % (t.mean, t.std))
            ops.append({"op": "normalize", "mean": mean, "std": std})
            normalized = True
        else:
            raise ValueError("ferry cannot run torchvision's %s; it runs RandomResizedCrop, Resize(int), CenterCrop, "
                             "RandomHorizontalFlip, ColorJitter (no hue), ToTensor, PILToTensor, "
                             "ConvertImageDtype(float32) and Normalize" % name)
    if geometry is None:
        raise ValueError("ferry needs RandomResizedCrop or CenterCrop in the transform: a batch holds images of one "
                         "size")
    if tensor is None:
        raise ValueError("the transform must end in ToTensor or PILToTensor (ferry yields tensors)")
    if tensor == "ToTensor":
        output = {"dtype": "float32", "layout": "NCHW"}
        if not normalized:
            ops.append({"op": "normalize", "mean": [0.0, 0.0, 0.0], "std": [1.0, 1.0, 1.0]})  # ToTensor's x / 255
    else:
        output = {"dtype": "uint8", "layout": "NHWC"}
    return {"decode": "rgb", "ops": ops, "output": output}, tensor == "PILToTensor"


def pipeline_from_transform(transform):
    """The Ferry pipeline spec (a dict) that does what a torchvision transform does."""
    return _transform_to_pipeline(transform)[0]


def _dataset_listing(dataset):
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
    return _write_list(samples), getattr(inner, "transform", None)


def _write_list(samples):
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


def _broadcast_seed(seed, world_size):
    import torch.distributed as dist
    if dist.is_available() and dist.is_initialized():
        box = [int(seed)]
        dist.broadcast_object_list(box, src=0)
        return box[0]
    if world_size > 1:
        raise ValueError("seed=None with world_size > 1 and no torch.distributed group: the ranks would shuffle "
                         "differently; give seed=")
    return seed


class DataLoader(Loader):
    """torch.utils.data.DataLoader's signature over Ferry, for an existing script:

        dataset = torchvision.datasets.ImageFolder(root, transform=train_transform)
        sampler = DistributedSampler(dataset)
    -   loader = torch.utils.data.DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=8)
    +   loader = ferry.DataLoader(dataset, batch_size=64, sampler=sampler, num_workers=8)

    `dataset`: a torchvision ImageFolder-like dataset (ImageNet, DatasetFolder), a
    Subset of one, or a path (then give pipeline=). Ferry reads the samples
    `dataset.samples` names, in its order, and runs the dataset's transform, translated
    faithfully: what it cannot honour (hue, asymmetric jitter ranges, non-square sizes,
    other interpolation modes, other transforms) raises ValueError naming it. No
    transform is an error (the images would differ in size), unless pipeline= is given.

    sampler: DistributedSampler (its rank, num_replicas, seed and shuffle are taken;
      set_epoch() on it, or on this loader, picks the epoch), RandomSampler or
      SequentialSampler, or None (then shuffle=). drop_last=False pads the ranks' last
      batches with rows labelled -1 instead of repeating samples.
    num_workers: decode threads, capped by this rank's share of the host's CPUs
      (affinity and cgroup limit, split across LOCAL_WORLD_SIZE ranks); 0 = the share.
    seed: None = torch.initial_seed() (rank 0's, broadcast over torch.distributed).
    epochs: None (no limit): each pass is one epoch, as a DataLoader's.
    persistent_workers, prefetch_factor (batches prefetched), pin_memory: accepted.
    Remote modes take dispatcher=/job_name= or workers= as in Loader; with neither,
    FERRY_DISPATCHER and FERRY_JOB_NAME in the environment name a dispatcher job.
    """

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None, num_workers=0,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", seed=None, epochs=None, pipeline=None, rank=None, world_size=None,
                 threads=None, **kwargs):
        for name, value in (("batch_sampler", batch_sampler), ("collate_fn", collate_fn),
                            ("worker_init_fn", worker_init_fn), ("multiprocessing_context", multiprocessing_context)):
            if value is not None:
                raise ValueError("ferry.DataLoader cannot take %s: Ferry batches and collates itself" % name)
        if timeout:
            raise ValueError("ferry.DataLoader has no timeout: remote workers that fail are replaced, and a "
                             "dispatcher that cannot be reached raises")
        if pin_memory_device:
            raise ValueError("pin_memory_device is not supported; use device= to get batches on a GPU")
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
        if isinstance(dataset, (str, os.PathLike)):
            data, transform = os.fspath(dataset), None
        else:
            data, transform = _dataset_listing(dataset)
        self._chw = False
        if pipeline is None:
            if transform is None:
                raise ValueError("the dataset has no transform: ferry would batch images of different sizes. Give "
                                 "the dataset a transform (with RandomResizedCrop or CenterCrop) or pipeline=")
            pipeline, self._chw = _transform_to_pipeline(transform)
        self.dataset = dataset
        rank, world_size = _resolve_rank(rank, world_size) if not kwargs.get("consumer_id") else (rank, world_size)
        if seed is None:
            seed = _broadcast_seed(torch.initial_seed() & ((1 << 63) - 1), world_size or 1)
        if threads is None:
            threads = default_threads(num_workers)
        if prefetch_factor is not None:
            kwargs.setdefault("prefetch", max(1, int(prefetch_factor)))
        if not kwargs.get("dispatcher") and not kwargs.get("workers") and os.environ.get("FERRY_DISPATCHER"):
            # The operator points an unchanged script at a dispatcher job.
            if not os.environ.get("FERRY_JOB_NAME"):
                raise ValueError("FERRY_DISPATCHER is set: set FERRY_JOB_NAME too (every rank the same)")
            kwargs["dispatcher"], kwargs["job_name"] = os.environ["FERRY_DISPATCHER"], os.environ["FERRY_JOB_NAME"]
        self.persistent_workers = bool(persistent_workers)  # Ferry's pipeline lives across epochs anyway
        # The sampler's epoch as last seen: a set_epoch() on it since then moves this
        # loader. (A script that never calls it still gets a new order every epoch,
        # where torch would repeat the first.)
        self._sampler_epoch = getattr(sampler, "epoch", None)
        super().__init__(data=data, pipeline=pipeline, batch_size=batch_size, seed=seed, shuffle=bool(shuffle),
                         drop_last=drop_last, epochs=epochs, threads=threads, pin_memory=pin_memory, rank=rank,
                         world_size=world_size, **kwargs)

    def set_epoch(self, epoch):
        """The epoch the next pass yields: at an epoch boundary, a later epoch skips
        ahead (as DistributedSampler.set_epoch picks the shuffle of an epoch). Going
        back, or moving mid-epoch, raises."""
        epoch = int(epoch)
        if epoch == self._epoch:
            return
        if epoch < self._epoch or self._batches_done or self._taken:
            raise ValueError("set_epoch(%d), but the loader is at epoch %d%s: it goes forward from an epoch's "
                             "boundary only (load_state_dict() puts it back)"
                             % (epoch, self._epoch, " mid-epoch" if self._batches_done else ""))
        if self.epochs is not None and epoch >= self.epochs:
            raise ValueError("set_epoch(%d) is past epochs=%d" % (epoch, self.epochs))
        self.close()
        self._stash = None
        self._resume_state = ""
        self._epoch = epoch
        if self.mode == "dispatcher":
            # The job's epochs start here: a job of its own (every rank names the same).
            self._job_first_epoch = epoch
            self._segment_name = "%s.e%d" % (self.job_name, epoch)

    def __iter__(self):
        epoch = getattr(self.sampler, "epoch", None)
        if epoch is not None and epoch != self._sampler_epoch:
            self._sampler_epoch = epoch
            self.set_epoch(epoch)
        return super().__iter__()

    def _to_torch(self, b):
        images, labels = super()._to_torch(b)
        if self._chw:
            images = images.permute(0, 3, 1, 2)  # PILToTensor's CHW, a view of the NHWC rows
        return images, labels
