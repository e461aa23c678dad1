"""Ferry's Python runtime for user code: a worker process's main loop, and the batch
encoding the client decodes.

A ferry-worker started with --allow-user-code (and ferry.Loader in local mode) runs
this file, by itself, in processes of its own (lib/pyrt/python_pool.cc embeds it and
starts `python3 -c <this file> FD`): it must not import ferry, whose C extension the
worker's interpreter may not have. It talks to its parent over the socket FD:

  frame:  magic "FPY1", kind u32, json_len u32, blob_len u32, json (UTF-8), blob
  parent -> here   LOAD   {"key", "input"}, blob = cloudpickle of (dataset, transform, collate_fn)
                   BATCH  {"key", "samples", "seeds", "rows", "timeout", "native"}; with
                          "native" (user code after Ferry's own pipeline), the rows
                          that pipeline made come as a memfd: each goes through the
                          transform as a PIL image, or a uint8 or float32 CHW tensor
                          ("input"), with its label
                   EXIT
  here -> parent   LOADED {"ok", "versions"} or {"ok": false, "error", "module", "versions"}
                   BATCH  {"skipped", "structure", "bytes", "buf"}, and the
                          batch's memory as a memfd passed with SCM_RIGHTS (no copy, no
                          pickle); "structure" only when it differs from this process's
                          previous batch's (the parent keeps the last one)
                   FAILED {"error"}: the batch as a whole failed (its collate raised)

FD 4 (the second argument) is a page shared with the parent: before each sample this
process writes its position in the request there, so that the parent's watchdog knows
which sample a hung or dead process was on, with no message per sample.

A batch is `collate_fn([transform(dataset[i]) for i in samples])`; before each sample
`random`, `numpy.random` and `torch` are seeded with the seed the parent sends for it
(Philox of the job's seed, the epoch and the sample index), so a random transform gives
the same values whatever the process, worker or rank count. A sample whose code raises,
or runs past the timeout, is left out and reported with the exception's type and
message. Without a collate_fn the batch is torch's default_collate of the samples,
written straight into shared memory; shapes that differ from row to row become a list
of per-row tensors instead of an error.
"""
import json
import mmap
import os
import random
import signal
import socket
import struct
import sys
import traceback

MAGIC = 0x31595046  # "FPY1"
LOAD, BATCH, EXIT, LOADED, BATCH_OK, FAILED = 1, 2, 3, 11, 13, 14
HEADER = struct.Struct("<IIII")
RELEASED = 64      # the shared page's byte RELEASED + i: 1 once the parent is done with buffer i
MAX_BUFFERS = 64
ALIGN = 64
MAX_JOBS = 8


def _versions():
    """The interpreter's and the main packages' versions (the job records the
    trainer's; a worker warns when its own differ)."""
    out = {"python": "%d.%d.%d" % sys.version_info[:3]}
    for name in ("torch", "numpy", "torchvision", "PIL", "cloudpickle"):
        mod = sys.modules.get(name)
        if mod is None:
            try:
                mod = __import__(name)
            except Exception:
                continue
        out[name] = str(getattr(mod, "__version__", "?"))
    return out


# -- the encoding of a batch: leaves into one block of memory, the nesting as JSON -------

class _Arena:
    """Sizes first (plan), then writes (fill): one block for the whole batch."""

    def __init__(self):
        self.size = 0
        self.writes = []  # (offset, writer(view))

    def reserve(self, nbytes):
        off = (self.size + ALIGN - 1) // ALIGN * ALIGN
        self.size = off + nbytes
        return off


def _np():
    import numpy
    return numpy


def _torch():
    return sys.modules.get("torch")


def _as_array(x):
    """A tensor or ndarray as a C-contiguous numpy array (tensors: their values)."""
    np = _np()
    torch = _torch()
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach()
        if x.device.type != "cpu":
            x = x.cpu()
        if x.dtype == torch.bfloat16:
            raise TypeError("bfloat16 tensors cannot cross to the trainer yet: convert to float32 in the transform")
        return np.ascontiguousarray(x.numpy())
    return np.ascontiguousarray(x)


def _is_tensor(x):
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _is_array(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray) and x.dtype.kind in "biufc?"


def _leaf_array(kind, arr, arena):
    off = arena.reserve(arr.nbytes)
    arena.writes.append((off, arr))
    return {"k": kind, "dtype": arr.dtype.str, "shape": list(arr.shape), "off": off}


def _encode(x, arena):
    """A collated batch (any nesting of tensors, arrays, numbers, strings, lists,
    tuples and dicts) as a structure whose array leaves point into the arena."""
    if _is_tensor(x):
        return _leaf_array("tensor", _as_array(x), arena)
    if _is_array(x):
        return _leaf_array("ndarray", _as_array(x), arena)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(x, np.generic):
        return _leaf_array("npscalar", np.asarray(x).reshape(()), arena)
    if x is None or isinstance(x, (bool, int, float, str)):
        if isinstance(x, float) and x != x:
            return {"k": "float", "v": "nan"}
        if isinstance(x, float) and x in (float("inf"), float("-inf")):
            return {"k": "float", "v": "inf" if x > 0 else "-inf"}
        return {"k": "py", "v": x}
    if isinstance(x, bytes):
        return {"k": "bytes", "v": x.hex()}
    if isinstance(x, dict):
        keys = list(x.keys())
        for k in keys:
            if not isinstance(k, (str, int)):
                raise TypeError("a batch dict's keys must be str or int, not %s" % type(k).__name__)
        return {"k": "dict", "keys": keys, "v": [_encode(x[k], arena) for k in keys]}
    if isinstance(x, tuple):
        return {"k": "tuple", "v": [_encode(v, arena) for v in x]}
    if isinstance(x, list):
        return {"k": "list", "v": [_encode(v, arena) for v in x]}
    raise TypeError("a batch may hold tensors, numpy arrays, numbers, strings, lists, tuples and dicts, not %s"
                    % type(x).__module__ + "." + type(x).__name__)


class _Stacked:
    """default_collate's tensor of several rows, stacked straight into the arena."""

    def __init__(self, kind, rows, pad):
        self.kind = kind
        self.rows = rows
        self.pad = pad


def _default_collate(samples, pad, arena):
    """torch's default_collate of `samples` (torch 1.13's rules), encoded; `pad` rows
    follow each stacked tensor (a padded last batch of ranks): -1 in signed integers (a
    label, as the native path pads them), zeros elsewhere."""
    np = _np()
    elem = samples[0]
    if _is_tensor(elem) or _is_array(elem) or (np is not None and isinstance(elem, np.generic)):
        arrs = [_as_array(s) if not isinstance(s, np.generic) else np.asarray(s) for s in samples]
        if any(a.shape != arrs[0].shape or a.dtype != arrs[0].dtype for a in arrs):
            # default_collate raises here; Ferry gives the rows as a list instead.
            return {"k": "list", "v": [_leaf_array("tensor", a, arena) for a in arrs]}
        shape = [len(arrs) + pad] + list(arrs[0].shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * arrs[0].dtype.itemsize
        off = arena.reserve(nbytes)
        arena.writes.append((off, (arrs, shape, arrs[0].dtype)))
        return {"k": "tensor", "dtype": arrs[0].dtype.str, "shape": shape, "off": off}
    if isinstance(elem, bool):
        return _leaf_array("tensor", np.array(list(samples) + [False] * pad, dtype=np.bool_), arena)
    if isinstance(elem, int):  # padding rows' integers are -1, as the native path's labels
        return _leaf_array("tensor", np.array(list(samples) + [-1] * pad, dtype=np.int64), arena)
    if isinstance(elem, float):
        return _leaf_array("tensor", np.array(list(samples) + [0.0] * pad, dtype=np.float64), arena)
    if isinstance(elem, (str, bytes)):
        return _encode(list(samples), arena)
    if isinstance(elem, dict):
        return {"k": "dict", "keys": list(elem.keys()),
                "v": [_default_collate([s[k] for s in samples], pad, arena) for k in elem.keys()]}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return {"k": "tuple", "v": [_default_collate(list(col), pad, arena) for col in zip(*samples)]}
    if isinstance(elem, (list, tuple)):
        if any(len(s) != len(elem) for s in samples):
            raise RuntimeError("each element in list of batch should be of equal size")
        # default_collate gives a list for both (tuples: "backwards compatibility").
        return {"k": "list", "v": [_default_collate(list(col), pad, arena) for col in zip(*samples)]}
    if elem is None:
        return {"k": "list", "v": [{"k": "py", "v": None} for _ in samples]}
    raise TypeError("default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found %s"
                    % type(elem).__name__)


def _fill(arena, buf):
    np = _np()
    for off, what in arena.writes:
        if isinstance(what, tuple):
            arrs, shape, dtype = what
            out = np.ndarray(shape, dtype=dtype, buffer=buf, offset=off)
            n = len(arrs)
            if n:
                np.stack(arrs, out=out[:n])
            if shape[0] > n:
                out[n:] = -1 if np.issubdtype(dtype, np.signedinteger) else 0
        else:
            out = np.ndarray(what.shape, dtype=what.dtype, buffer=buf, offset=off)
            out[...] = what


def decode(structure, data):
    """The batch a structure and its bytes stand for (the trainer's side): tensors view
    `data` (no copy; writable when `data` is)."""
    if isinstance(structure, (str, bytes)):
        structure = json.loads(structure)
    return _decode(structure, data, _np())


def decoder(structure):
    """decode(structure, data) as a function of `data` alone, for a structure many
    batches share: the common batch (a tuple, list or dict of tensors) is rebuilt with
    the dtypes, counts and shapes worked out once, with no walk of the structure."""
    if isinstance(structure, (str, bytes)):
        structure = json.loads(structure)
    np = _np()
    k = structure["k"]
    if k in ("list", "tuple", "dict") and all(v["k"] == "tensor" for v in structure["v"]):
        import torch
        leaves = []
        for v in structure["v"]:
            count = 1
            for d in v["shape"]:
                count *= d
            leaves.append((np.dtype(v["dtype"]), count, v["off"], tuple(v["shape"])))
        frombuffer, from_numpy = np.frombuffer, torch.from_numpy

        def tensors(data):
            return [from_numpy(frombuffer(data, dtype=t, count=c, offset=o).reshape(shape))
                    for t, c, o, shape in leaves]
        if k == "list":
            return tensors
        if k == "tuple":
            return lambda data: tuple(tensors(data))
        keys = list(structure["keys"])
        return lambda data: dict(zip(keys, tensors(data)))
    return lambda data: _decode(structure, data, np)


def _decode(s, data, np):
    # A module-level function, not a closure: a recursive closure is a reference cycle
    # (the function and its cell) that held `data`, and with it the batch's mapping,
    # until the cyclic collector ran; the worker's buffer was then never released in
    # time to be reused, and every batch cost a fresh memfd.
    k = s["k"]
    if k in ("tensor", "ndarray", "npscalar"):
        dtype = np.dtype(s["dtype"])
        count = 1
        for d in s["shape"]:
            count *= d
        arr = np.frombuffer(data, dtype=dtype, count=count, offset=s["off"]).reshape(s["shape"])
        if k == "ndarray":
            return arr
        if k == "npscalar":
            return arr[()]
        import torch
        return torch.from_numpy(arr)
    if k == "py":
        return s["v"]
    if k == "float":
        return float(s["v"])
    if k == "bytes":
        return bytes.fromhex(s["v"])
    if k == "list":
        return [_decode(v, data, np) for v in s["v"]]
    if k == "tuple":
        return tuple(_decode(v, data, np) for v in s["v"])
    if k == "dict":
        return {key: _decode(v, data, np) for key, v in zip(s["keys"], s["v"])}
    if k == "padding":
        return Padding(int(s["rows"]))
    raise ValueError("unknown leaf kind %r in a user-code batch" % (k,))


class Padding:
    """A batch without a sample (a rank's padding batch): `rows` rows, for the trainer
    to shape after an earlier batch of the job (pad_like)."""

    def __init__(self, rows):
        self.rows = rows


def _is_row_strings(x, batch_rows):
    return isinstance(x, list) and len(x) in batch_rows and bool(x) and all(isinstance(e, (str, bytes)) for e in x)


def pad_like(x, rows, batch_rows):
    """A batch of `rows` padding rows shaped after an earlier batch `x` of the same job:
    each tensor or array whose first dimension is that batch's (one of `batch_rows`) with
    `rows` rows of -1 in signed integers (labels, as the native path pads them) and
    zeros elsewhere; a list of strings a row, empty strings; anything else as it was."""
    np = _np()
    if _is_tensor(x) and x.dim() > 0 and x.shape[0] in batch_rows:
        import torch
        signed = x.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)
        return torch.full((rows,) + tuple(x.shape[1:]), -1 if signed else 0, dtype=x.dtype)
    if _is_array(x) and x.ndim > 0 and x.shape[0] in batch_rows:
        return np.full((rows,) + x.shape[1:], -1 if np.issubdtype(x.dtype, np.signedinteger) else 0, dtype=x.dtype)
    if isinstance(x, dict):
        return type(x)((k, pad_like(v, rows, batch_rows)) for k, v in x.items())
    if _is_row_strings(x, batch_rows):
        return [type(x[0])()] * rows
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*[pad_like(v, rows, batch_rows) for v in x])
    if isinstance(x, (list, tuple)):
        return type(x)(pad_like(v, rows, batch_rows) for v in x)
    return x


def trim_rows(x, valid, rows):
    """The batch `x` of `rows` rows (its padding rows last) with its first `valid` only:
    every tensor, array or list of strings `rows` long is cut; the rest is left."""
    if (_is_tensor(x) or _is_array(x)) and len(x.shape) > 0 and x.shape[0] == rows:
        return x[:valid]
    if isinstance(x, dict):
        return type(x)((k, trim_rows(v, valid, rows)) for k, v in x.items())
    if _is_row_strings(x, (rows,)):
        return x[:valid]
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*[trim_rows(v, valid, rows) for v in x])
    if isinstance(x, (list, tuple)):
        return type(x)(trim_rows(v, valid, rows) for v in x)
    return x


# -- making batches ---------------------------------------------------------------------

class SampleTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise SampleTimeout()


def seed_all(seed):
    """Seeds random, numpy.random and torch (when loaded) for one sample."""
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed & 0xFFFFFFFF)
    torch = _torch()
    if torch is not None:
        torch.manual_seed(seed)


def _describe(e):
    msg = str(e)
    return type(e).__name__ + (": " + msg if msg else "")


def native_input(row, kind):
    """A row of Ferry's pipeline as the rest of the transform takes it: a PIL image
    (HWC uint8 rows), a uint8 CHW tensor, or a float32 CHW tensor."""
    if kind == "pil":
        from PIL import Image
        return Image.fromarray(row, "RGB" if row.ndim == 3 and row.shape[2] == 3 else None)
    import torch
    t = torch.from_numpy(row)
    return t.permute(2, 0, 1) if kind == "uint8" else t


def run_samples(job, samples, seeds, timeout=0.0, step=None, native=None):
    """(kept positions, samples made, skipped [(pos, reason)]). `native`: (rows,
    labels, kind): the pipeline's row and label of each position instead of
    dataset[index]."""
    dataset, transform, _ = job[:3]
    kept, made, skipped = [], [], []
    for pos, (index, seed) in enumerate(zip(samples, seeds)):
        if step is not None:
            step(pos)
        seed_all(seed)
        try:
            if timeout > 0:
                signal.setitimer(signal.ITIMER_REAL, timeout)
            try:
                if native is not None:
                    rows, labels, kind = native
                    x = native_input(rows[pos], kind)
                    if transform is not None:
                        x = transform(x)
                    x = (x, labels[pos])
                else:
                    x = dataset[index]
                    if transform is not None:
                        x = transform(x)
            finally:
                if timeout > 0:
                    signal.setitimer(signal.ITIMER_REAL, 0)
        except SampleTimeout:
            skipped.append((pos, "ran past the sample timeout (%g s)" % timeout))
            continue
        except Exception as e:  # the user's code: any exception skips the sample
            skipped.append((pos, _describe(e)))
            continue
        kept.append(pos)
        made.append(x)
    return kept, made, skipped


def collate(job, made, pad):
    """(structure, arena) of a batch of made samples."""
    collate_fn = job[2]
    arena = _Arena()
    if not made:
        # No sample (a rank's padding batch, or every sample skipped): nothing here to
        # shape it after; the trainer shapes it after its previous batch (pad_like).
        return {"k": "padding", "rows": int(pad)}, arena
    if collate_fn is not None:
        structure = _encode(collate_fn(made), arena)
    else:
        structure = _default_collate(made, pad, arena)
    return structure, arena


def make_batch(job, samples, seeds, rows=0, timeout=0.0, native=None):
    """In this process (ferry's tests, and the trainer's reference): the batch as the
    trainer gets it, and the kept positions and skips."""
    kept, made, skipped = run_samples(job, samples, seeds, timeout, native=native)
    pad = max(0, rows - len(made)) if rows else 0
    structure, arena = collate(job, made, pad)
    buf = bytearray(max(arena.size, 1))
    _fill(arena, buf)
    return decode(structure, buf), kept, skipped


# -- the process's loop -----------------------------------------------------------------

def _recv_exact(sock, n):
    chunks = []
    while n:
        b = sock.recv(min(n, 1 << 20))
        if not b:
            raise EOFError()
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def _recv(sock, fds=None):
    """A frame; a file descriptor passed with it is appended to `fds`."""
    head = b""
    while len(head) < HEADER.size:
        data, anc, _, _ = sock.recvmsg(HEADER.size - len(head), socket.CMSG_SPACE(16))
        for level, typ, payload in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                import array
                got = array.array("i")
                got.frombytes(payload[: len(payload) - len(payload) % got.itemsize])
                if fds is not None:
                    fds.extend(got)
                else:
                    for f in got:
                        os.close(f)
        if not data:
            raise EOFError()
        head += data
    magic, kind, jlen, blen = HEADER.unpack(head)
    if magic != MAGIC:
        raise RuntimeError("ferry user-code runtime: bad frame from the worker")
    meta = json.loads(_recv_exact(sock, jlen)) if jlen else {}
    blob = _recv_exact(sock, blen) if blen else b""
    return kind, meta, blob


def _send(sock, kind, meta, fd=None):
    j = json.dumps(meta).encode()
    data = HEADER.pack(MAGIC, kind, len(j), 0) + j
    if fd is None:
        sock.sendall(data)
        return
    import array
    sent = sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
    if sent < len(data):
        sock.sendall(data[sent:])


def _load(blob):
    import pickle
    job = pickle.loads(blob)  # cloudpickle's output loads with pickle (cloudpickle must be importable)
    if not (isinstance(job, tuple) and len(job) == 3):
        raise TypeError("user code must be a (dataset, transform, collate_fn) tuple")
    return job


class _Buffers:
    """The memfds batches are written into, kept and written again once the parent says
    it is done with one (a byte of the shared page): a batch's pages are not allocated,
    zeroed and freed each time. Without the page (or past MAX_BUFFERS in use), a memfd
    of its own per batch."""

    def __init__(self, page):
        self.page = page
        self.bufs = {}  # id -> [fd, capacity, mmap]
        self.free = set()

    def take(self, size):
        """(id or -1, fd, mmap of at least `size` bytes)."""
        if self.page is not None:
            for i in list(self.bufs):
                if i not in self.free and self.page[RELEASED + i] == 1:
                    self.page[RELEASED + i] = 0
                    self.free.add(i)
            fits = sorted((self.bufs[i][1], i) for i in self.free if self.bufs[i][1] >= size)
            if fits:
                i = fits[0][1]
            elif self.free:
                i = max(self.free, key=lambda k: self.bufs[k][1])
                fd, _, m = self.bufs[i]
                m.close()
                cap = size + size // 8
                os.ftruncate(fd, cap)
                self.bufs[i] = [fd, cap, mmap.mmap(fd, cap)]
            elif len(self.bufs) < MAX_BUFFERS:
                i = next(k for k in range(MAX_BUFFERS) if k not in self.bufs)
                fd = os.memfd_create("ferry-batch-%d" % i, os.MFD_CLOEXEC)
                cap = size + size // 8
                os.ftruncate(fd, cap)
                self.bufs[i] = [fd, cap, mmap.mmap(fd, cap)]
            else:
                i = -1
            if i >= 0:
                self.free.discard(i)
                return i, self.bufs[i][0], self.bufs[i][2]
        fd = os.memfd_create("ferry-batch", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        return -1, fd, mmap.mmap(fd, size)


def serve(fd, progress_fd=None):
    sock = socket.socket(fileno=fd)
    progress = None
    page = None
    if progress_fd is not None:
        # The parent's watchdog reads which sample this process is making from a page
        # shared with it (no message per sample).
        page = mmap.mmap(progress_fd, 4096)
        os.close(progress_fd)

        def progress(pos):
            struct.pack_into("<i", page, 0, pos)
    buffers = _Buffers(page)
    last_structure = None
    # What nearly every job's code imports, imported while the process waits for its
    # first job: loading a job (on a worker, while it should be heartbeating) is then
    # an unpickling, not seconds of imports.
    for name in ("numpy", "cloudpickle", "torch"):
        try:
            __import__(name)
        except Exception:
            pass
    signal.signal(signal.SIGALRM, _alarm)
    jobs = {}
    while True:
        fds = []
        try:
            kind, meta, blob = _recv(sock, fds)
        except EOFError:
            return 0
        if kind == EXIT:
            return 0
        if kind == LOAD:
            try:
                jobs[meta["key"]] = _load(blob) + (meta.get("input") or "",)
                while len(jobs) > MAX_JOBS:
                    jobs.pop(next(iter(jobs)))
                _send(sock, LOADED, {"ok": True, "versions": _versions()})
            except BaseException as e:  # SystemExit from a module's import, too
                _send(sock, LOADED, {"ok": False, "error": _describe(e), "versions": _versions(),
                                     "module": getattr(e, "name", None) if isinstance(e, ImportError) else None})
            continue
        if kind != BATCH:
            return 2
        job = jobs.get(meta["key"])
        if job is None:
            _send(sock, FAILED, {"error": "job not loaded in this process"})
            continue
        samples, seeds = meta["samples"], meta["seeds"]
        native = None
        mm = None
        if meta.get("native") is not None:
            n = meta["native"]
            if len(fds) != 1:
                _send(sock, FAILED, {"error": "the native rows did not come with the request"})
                continue
            np = _np()
            size = os.fstat(fds[0]).st_size
            mm = mmap.mmap(fds[0], size, access=mmap.ACCESS_COPY) if size else None
            os.close(fds.pop())
            dims = [int(d) for d in n["dims"]]
            count = size // int(n["row_bytes"]) if size else 0
            allrows = np.ndarray([count] + dims, dtype=np.dtype(n["dtype"]), buffer=mm) if mm is not None \
                else np.zeros([0] + dims, dtype=np.dtype(n["dtype"]))
            native = ([allrows[r] for r in n["rows"]], n["labels"], job[3])
        for f in fds:
            os.close(f)
        kept, made, skipped = run_samples(job, samples, seeds, float(meta.get("timeout") or 0),
                                          step=progress, native=native)
        if progress is not None:
            progress(-1)  # the samples are made: no sample is the one the collate takes long on
        pad = max(0, int(meta.get("rows") or 0) - len(made))
        try:
            structure, arena = collate(job, made, pad)
        except Exception as e:
            _send(sock, FAILED, {"error": "collate: " + _describe(e), "kept": kept, "skipped": skipped})
            continue
        size = (arena.size + 7) // 8 * 8
        fd_out, buf = None, -1
        if size:
            buf, fd_out, m = buffers.take(size)
            _fill(arena, m)
            if buf < 0:
                m.close()
        del made, arena, native
        # The kept samples are the request's less the skipped ones: not listed.
        reply = {"skipped": skipped, "bytes": size, "buf": buf}
        text = json.dumps(structure)
        if text != last_structure:
            # Left out while it repeats: the parent keeps the last one it got. (The
            # text is compared: as Python values 1, 1.0 and True are equal.)
            reply["structure"] = text
            last_structure = text
        _send(sock, BATCH_OK, reply, fd_out)
        if fd_out is not None and buf < 0:
            os.close(fd_out)


if __name__ == "__main__":
    # Started as `python3 -c <this file> FD`: sys.path[0] is the worker's working
    # directory, which is no place to import the user's modules from.
    if sys.path and sys.path[0] == "":
        sys.path.pop(0)
    try:
        sys.exit(serve(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else None))
    except KeyboardInterrupt:
        sys.exit(0)
    except Exception:
        traceback.print_exc()
        sys.exit(3)
