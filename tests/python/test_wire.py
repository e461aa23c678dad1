"""The trainer side of the wire: a normalizing pipeline crosses the wire as uint8 NHWC
(a quarter of float32's bytes) and is normalized on the trainer, equal to what a worker's
float32 output is; device= puts batches on a GPU (tested when one is present); batches
export DLPack."""
import json
import os

import numpy as np
import pytest
import torch

from test_binding import LocalCluster

TRAIN = {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 48}, {"op": "hflip", "p": 0.5},
                                  {"op": "color_jitter", "brightness": 0.3, "contrast": 0.3, "saturation": 0.2},
                                  {"op": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
         "output": {"dtype": "float32", "layout": "NCHW"}}


@pytest.fixture(scope="module")
def cluster(ferry_local):
    c = LocalCluster(ferry_local, workers=2)
    yield c
    c.close()


def by_index(loader):
    """{sample index: (image, label)} over one epoch, and the receive buffer sizes."""
    out, frame_bytes = {}, []
    for x, y in loader:
        info = loader.last_batch_info()
        frame_bytes.append(info["buffer"][1])
        for row, i in enumerate(info["indices"].tolist()):
            out[i] = (x[row].clone(), int(y[row]))
    return out, frame_bytes


def test_uint8_crosses_the_wire_and_the_trainer_normalizes(ferry, small_tree, cluster):
    local = ferry.Loader(data=small_tree, pipeline=TRAIN, batch_size=10, seed=3, threads=2)
    want, _ = by_index(local)

    def remote(job, **kw):
        return ferry.Loader(data=small_tree, pipeline=TRAIN, batch_size=10, seed=3, dispatcher=cluster.dispatcher,
                            job_name=job, **kw)
    got, wire_bytes = by_index(remote("wire-u8"))
    assert sorted(got) == sorted(want) == list(range(120))
    for i in want:
        x, y = got[i]
        assert x.dtype == torch.float32 and x.shape == (3, 48, 48)
        # The same code and arithmetic as the worker's float32: bit-equal.
        assert torch.equal(x, want[i][0]) and y == want[i][1], "sample %d" % i
    # Forced float32 on the wire: the same values, four times the image bytes.
    f32, f32_bytes = by_index(remote("wire-f32", trainer_normalize=False))
    assert all(torch.equal(f32[i][0], want[i][0]) for i in want)
    image_bytes = 10 * 48 * 48 * 3
    assert min(wire_bytes) >= image_bytes and max(wire_bytes) < 2 * image_bytes
    assert min(f32_bytes) >= 4 * image_bytes


def test_trainer_normalize_in_process_and_its_refusals(ferry, small_tree):
    worker_side = ferry.Loader(data=small_tree, pipeline="imagenet-eval", batch_size=8, shuffle=False, threads=1)
    trainer_side = ferry.Loader(data=small_tree, pipeline="imagenet-eval", batch_size=8, shuffle=False, threads=1,
                                device="cpu", trainer_normalize=True)
    for (a, ya), (b, yb) in zip(worker_side, trainer_side):
        assert torch.equal(a, b) and torch.equal(ya, yb)
    u8 = {"decode": "rgb", "ops": [{"op": "center_crop", "size": 32}]}
    with pytest.raises(ValueError, match="nothing to normalize"):
        ferry.Loader(data=small_tree, pipeline=u8, trainer_normalize=True)
    with pytest.raises(ValueError, match="device"):
        ferry.Loader(data=small_tree, pipeline=u8, device="meta")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="CUDA is not available"):
            ferry.Loader(data=small_tree, pipeline=u8, device="cuda")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (CI has none)")
def test_cuda_device_equals_the_cpu_result(ferry, small_tree, cluster):
    def remote(job, device):
        return ferry.Loader(data=small_tree, pipeline=TRAIN, batch_size=10, seed=3, dispatcher=cluster.dispatcher,
                            job_name=job, device=device)
    cpu, _ = by_index(remote("cuda-ref", None))
    gpu, _ = by_index(remote("cuda", "cuda"))
    for i in cpu:
        assert gpu[i][0].is_cuda
        assert torch.allclose(gpu[i][0].cpu(), cpu[i][0], atol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_copies_wait_for_nothing_and_never_read_a_recycled_buffer(ferry, small_tree, cluster):
    """Ferry's copy stream held back (a spin kernel of about 20 ms queued on it before each
    batch's copies) while the trainer takes batch after batch with one batch of credit:
    every device batch still equals the CPU loader's (a receive buffer recycled under an
    in-flight copy would carry another batch's pixels into it), the labels too; and next()
    does not wait for the spin (the copies are still queued when it returns)."""
    import time

    def remote(job, device):
        return ferry.Loader(data=small_tree, pipeline=TRAIN, batch_size=10, seed=3, dispatcher=cluster.dispatcher,
                            job_name=job, device=device, prefetch=1)
    cpu, _ = by_index(remote("recycle-ref", None))
    loader = remote("recycle", "cuda")
    upload = loader._upload

    def held_back(*args):
        if loader._copy_stream is None:
            loader._copy_stream = torch.cuda.Stream(device=loader.device)
        with torch.cuda.stream(loader._copy_stream):
            torch.cuda._sleep(40_000_000)  # cycles: about 20 ms at 2 GHz
        return upload(*args)
    loader._upload = held_back
    got, waits = {}, []
    it = iter(loader)
    while True:
        t0 = time.perf_counter()
        try:
            x, y = next(it)
        except StopIteration:
            break
        waits.append(time.perf_counter() - t0)
        info = loader.last_batch_info()
        for row, i in enumerate(info["indices"].tolist()):
            got[i] = (x[row].clone(), y[row].clone())  # on the trainer's stream: after the copy
    torch.cuda.synchronize()
    assert sorted(got) == sorted(cpu)
    for i, (image, label) in got.items():
        assert torch.allclose(image.cpu(), cpu[i][0], atol=1e-5), i
        assert int(label) == cpu[i][1], i
    assert sorted(waits)[len(waits) // 2] < 0.015, "next() waited for the copy stream: %s" % waits


def test_batches_export_dlpack(ferry, small_tree):
    u8 = {"decode": "rgb", "ops": [{"op": "center_crop", "size": 32}]}
    loader = ferry.Loader(data=small_tree, pipeline=u8, batch_size=8, threads=1)
    x, y = next(iter(loader))
    assert hasattr(x, "__dlpack__") and x.__dlpack_device__() == (1, 0)  # kDLCPU
    a = np.from_dlpack(x)  # zero copy: the receive buffer itself
    assert a.shape == (8, 32, 32, 3) and a.dtype == np.uint8
    assert a.ctypes.data == x.data_ptr()
    lo, size = loader.last_batch_info()["buffer"]
    assert lo <= a.ctypes.data < lo + size
    assert np.array_equal(np.from_dlpack(y), y.numpy())
    back = torch.from_dlpack(x.__dlpack__())
    assert back.data_ptr() == x.data_ptr()


NORM = {"op": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
DEVICE_RECIPES = {
    "normalize": [NORM],
    "erasing": [NORM, {"op": "random_erasing", "p": 0.9}, {"op": "random_erasing", "p": 0.7, "value": "random"},
                {"op": "random_erasing", "p": 0.6, "value": [0.1, 0.2, 0.3]}],
    "torchvision mixup/cutmix": [NORM, {"op": "random_erasing", "p": 0.5},
                                 {"op": "mixup_cutmix", "num_classes": 7, "mixup_alpha": 0.2, "cutmix_alpha": 1.0}],
    "timm mixup/cutmix": [NORM, {"op": "random_erasing", "p": 0.5, "value": "random_channel", "max_count": 3},
                          {"op": "mixup_cutmix", "num_classes": 7, "mixup_alpha": 0.8, "cutmix_alpha": 1.0,
                           "partner": "flip", "cutmix_box": "timm", "label_smoothing": 0.1}],
    "mixup alone": [NORM, {"op": "mixup_cutmix", "num_classes": 7, "mixup_alpha": 0.4, "partner": "flip"}],
}


@pytest.mark.parametrize("recipe", sorted(DEVICE_RECIPES))
def test_the_gpu_finish_equals_the_hosts_within_float_tolerance(ferry, recipe):
    """device_finish.finish (what device="cuda" runs on the GPU, here on the CPU's torch)
    against the host's finish (Pipeline.finish, the workers' arithmetic) for 40 batches
    of each recipe, padding rows included: the same targets and erased, pasted or zeroed
    values bit for bit, and every value within 1e-6 relative (the normalize and MixUp's
    blend may be fused into multiply-adds on a device)."""
    from ferry import _ferry, device_finish
    spec = {"decode": "rgb", "ops": [{"op": "center_crop", "size": 24}] + DEVICE_RECIPES[recipe],
            "output": {"dtype": "float32", "layout": "NCHW"}}
    compiled = _ferry.Pipeline(json.dumps(spec))
    rng = np.random.default_rng(7)
    mixed = 0
    for batch in range(40):
        rows, valid = 9, 9 - batch % 3  # odd and even batches, with and without padding
        images = rng.integers(0, 256, (rows, 24, 24, 3), dtype=np.uint8)
        indices = np.arange(batch * rows, batch * rows + rows, dtype=np.int64)
        labels = rng.integers(0, 7, rows).astype(np.int64)
        labels[valid:] = -1
        want, want_targets = compiled.finish(images, indices, labels, valid, 5, 2, batch)
        plan = compiled.plan(indices, labels, valid, 5, 2, batch)
        assert plan is not None
        got = device_finish.finish(torch.from_numpy(images), plan, valid).numpy()
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        if want_targets is not None:
            assert np.array_equal(plan["targets"], want_targets)
        mixed += bool(plan["mixed"])
    if "mixup" in recipe:
        assert mixed >= 20, "the batch op mixed too few batches to test"


def test_a_pipeline_the_gpu_cannot_finish_is_finished_on_the_host(ferry):
    """A normalize after another tensor op is a pass of its own: no plan (None), and the
    loader keeps the host's finish for such a pipeline."""
    from ferry import _ferry
    spec = {"decode": "rgb", "ops": [{"op": "center_crop", "size": 24}, {"op": "random_erasing", "p": 1.0}, NORM],
            "output": {"dtype": "float32", "layout": "NCHW"}}
    compiled = _ferry.Pipeline(json.dumps(spec))
    probe = np.zeros(1, dtype=np.int64)
    assert compiled.plan(probe, probe, 1, 0, 0, 0) is None


def _threads_named(names, skip=()):
    """{tid: (name, affinity)} of this process's threads named one of `names`, but `skip`."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        if int(tid) in skip:
            continue
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                name = f.read().strip()
            if name in names:
                out[int(tid)] = (name, os.sched_getaffinity(int(tid)))
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended meanwhile
    return out


def test_io_cpus_keep_the_receiving_threads_off_the_trainers_cpu(ferry, small_tree, cluster, monkeypatch):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs")
    trainer, other = cpus[0], cpus[-1]
    saved = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {trainer})  # a trainer pinned to one core: new threads inherit it
    try:
        def remote(job, **kw):
            return ferry.Loader(data=small_tree, pipeline="imagenet-eval", batch_size=10, epochs=1, shuffle=False,
                                dispatcher=cluster.dispatcher, job_name=job, **kw)

        def placed(loader):
            before = set(_threads_named({"ferry-recv", "ferry-control"}))  # other loaders' (not yet collected)
            it = iter(loader)
            x, y = next(it)
            assert x.shape[0] == 10
            got = _threads_named({"ferry-recv", "ferry-control"}, skip=before)
            rest = sum(1 for _ in it) + 1
            assert rest == 12, "every batch still arrives"
            return got

        pinned = placed(remote("io-cpus", io_cpus=[other]))
        # The receiving thread (and Asio's resolver thread it starts, which inherits its
        # name and affinity) and the dispatcher's control thread.
        names = sorted(n for n, _ in pinned.values())
        assert names.count("ferry-control") == 1 and names.count("ferry-recv") >= 1, pinned
        assert all(a == {other} for _, a in pinned.values()), pinned
        # taskset's form, and $FERRY_IO_CPUS when io_cpus is not given.
        by_string = placed(remote("io-cpus-str", io_cpus="%d" % other))
        assert by_string and all(a == {other} for _, a in by_string.values()), by_string
        monkeypatch.setenv("FERRY_IO_CPUS", str(other))
        by_env = placed(remote("io-cpus-env"))
        assert by_env and all(a == {other} for _, a in by_env.values()), by_env
        monkeypatch.delenv("FERRY_IO_CPUS")
        # Without: they inherit the trainer's core.
        inherited = placed(remote("io-cpus-none"))
        assert inherited and all(a == {trainer} for _, a in inherited.values()), inherited
    finally:
        os.sched_setaffinity(0, saved)


def test_io_cpus_refusals(ferry, small_tree, cluster, monkeypatch):
    def remote(**kw):
        return iter(ferry.Loader(data=small_tree, pipeline="imagenet-eval", batch_size=10, dispatcher=cluster.dispatcher,
                                 job_name="io-cpus-bad", **kw))
    with pytest.raises(ValueError, match="taskset -c"):
        remote(io_cpus="0-x")
    with pytest.raises(ValueError, match="CPU 4000|largest"):
        remote(io_cpus=[4000])
    with pytest.raises(ValueError, match="integers"):
        remote(io_cpus=["1"])
    with pytest.raises(ValueError, match="empty list"):
        remote(io_cpus=[])
    with pytest.raises(ValueError, match="receive from workers"):
        ferry.Loader(data=small_tree, batch_size=10, io_cpus=[0])
    monkeypatch.setenv("FERRY_IO_CPUS", "a-b")
    with pytest.raises(ValueError, match="FERRY_IO_CPUS"):
        next(remote())
