"""User code on workers (issue 24): a Dataset class and a random Python transform of
this file's own, shipped with cloudpickle to ferry-workers started with
--allow-user-code and run in their Python processes; every sample exactly once per
epoch, the same tensors whatever the worker and process counts, through a worker and a
Python process killed mid-epoch, and equal to the in-process result."""
import glob
import os
import random
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch

from conftest import Daemons

# -- the user's code: defined here, as a training script defines it ----------------------


class PhotoCrops(torch.utils.data.Dataset):
    """Real photographs, read with PIL, each a random crop (Python's random), jittered
    with numpy noise and a torch draw; label from the folder name, and the path."""

    def __init__(self, files, delay=0.0, fail_every=0, hang_at=-1):
        self.files = list(files)
        self.delay = delay
        self.fail_every = fail_every
        self.hang_at = hang_at

    def __len__(self):
        return len(self.files)

    def __getitem__(self, i):
        from PIL import Image
        if self.fail_every and i % self.fail_every == self.fail_every - 1:
            raise ValueError("sample %d: no label in its sidecar" % i)
        if i == self.hang_at:
            time.sleep(3600)
        if self.delay:
            time.sleep(self.delay)
        path = self.files[i]
        with Image.open(path) as im:
            im = im.convert("RGB")
            w, h = im.size
            s = min(w, h) // 2
            x, y = random.randint(0, w - s), random.randint(0, h - s)
            im = im.crop((x, y, x + s, y + s)).resize((32, 32))
            a = np.asarray(im, dtype=np.float32) / 255.0
        return a, int(os.path.basename(os.path.dirname(path))[-2:]), path


def jitter(sample):
    """A random transform of the user's own: numpy noise, a torch draw, a flip."""
    a, label, path = sample
    a = a + np.random.normal(0, 0.01, a.shape).astype(np.float32)
    t = torch.from_numpy(a).permute(2, 0, 1) * (0.9 + 0.2 * torch.rand(1))
    if random.random() < 0.5:
        t = t.flip(-1)
    return t.contiguous(), label, path


def first_names(batch):
    """A custom collate: the stacked images and only the file names."""
    images = torch.stack([s[0] for s in batch])
    return {"images": images, "labels": torch.tensor([s[1] for s in batch]),
            "names": [os.path.basename(s[2]) for s in batch]}


# -- helpers -----------------------------------------------------------------------------

N = 48
BATCH = 8


@pytest.fixture(scope="module")
def photos(sample_data):
    files = sorted(glob.glob(os.path.join(sample_data, "*", "*.jpg")))[::37][:N]
    assert len(files) == N
    return files


def per_sample(loader, epochs=1):
    """{(epoch, index): (image, label, path)} of every row the loader yields, checking
    that each epoch holds every sample exactly once."""
    out = {}
    for e in range(epochs):
        seen = []
        for images, labels, paths in loader:
            info = loader.last_batch_info()
            idx = info["indices"][: info["valid"]].tolist()
            assert len(idx) == images.shape[0] == len(paths)
            for r, i in enumerate(idx):
                out[(e, i)] = (images[r].clone(), int(labels[r]), paths[r])
            seen += idx
        assert sorted(seen) == list(range(N)), "epoch %d: %d rows, %d distinct" % (e, len(seen), len(set(seen)))
    return out


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k][0], b[k][0]), k
        assert a[k][1:] == b[k][1:], k


def python_children(pid):
    """The Python processes a ferry-worker started (its children running python; a
    sanitizer build has a symbolizer child too)."""
    out = []
    for t in glob.glob("/proc/%d/task/*/children" % pid):
        with open(t) as f:
            for x in f.read().split():
                try:
                    with open("/proc/%s/cmdline" % x, "rb") as c:
                        if b"python" in c.read().split(b"\0")[0]:
                            out.append(int(x))
                except OSError:
                    pass
    return out


@pytest.fixture(scope="module")
def reference(ferry, photos):
    """The in-process result (local loader, one Python process), two epochs."""
    loader = ferry.Loader(dataset=PhotoCrops(photos), transform=jitter, batch_size=BATCH, seed=11, epochs=2,
                          drop_last=False)
    return per_sample(loader, epochs=2)


# -- tests -------------------------------------------------------------------------------


def test_in_process_equals_the_trainers_own_calls(ferry, photos, reference):
    """Each batch is what the trainer's own process makes with the seeds Ferry gives:
    random, numpy and torch seeded per sample from (seed, epoch, index)."""
    from ferry import _user_worker
    job = (PhotoCrops(photos), jitter, None)
    for (epoch, i), (image, label, path) in list(reference.items())[:: 7]:
        seed = ferry._ferry.user_sample_seed(11, epoch, i)
        (images, labels, paths), kept, skipped = _user_worker.make_batch(job, [i], [seed])
        assert kept == [0] and not skipped
        assert torch.equal(images[0], image) and int(labels[0]) == label and paths == [path]
    # The epochs differ (other order, other draws), the samples are the user's.
    assert not torch.equal(reference[(0, 3)][0], reference[(1, 3)][0])
    assert reference[(0, 3)][2] == photos[3]


def test_three_python_processes_give_the_same_batches(ferry, photos, reference):
    loader = ferry.Loader(dataset=PhotoCrops(photos), transform=jitter, batch_size=BATCH, seed=11, epochs=2,
                          drop_last=False, python_processes=3)
    assert_same(per_sample(loader, epochs=2), reference)


def test_one_two_three_workers_give_the_in_process_tensors(ferry, ferry_local, photos, reference, tmp_path):
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=1,
                worker_args=["--allow-user-code", "--python-processes", "3"])
    try:
        for workers in (1, 2, 3):
            if workers > 1:
                d.workers.append(d.start_worker(["--allow-user-code", "--python-processes", "1"]))
                time.sleep(0.3)  # registered before the job is made
            loader = ferry.Loader(dataset=PhotoCrops(photos), transform=jitter, batch_size=BATCH, seed=11, epochs=2,
                                  drop_last=False, dispatcher=d.dispatcher, job_name="photos-%d" % workers,
                                  batches_per_split=1)
            assert_same(per_sample(loader, epochs=2), reference)
            loader.close()
    finally:
        d.close()
        print(d.tails())


def test_a_worker_and_a_python_process_killed_mid_epoch(ferry, ferry_local, photos, reference, tmp_path):
    """Worker 0's Python process is killed during epoch 0, worker 1 during epoch 1:
    every sample once per epoch, and the same tensors as in-process."""
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=2,
                worker_args=["--allow-user-code", "--python-processes", "2"])
    try:
        loader = ferry.Loader(dataset=PhotoCrops(photos, delay=0.02), transform=jitter, batch_size=BATCH, seed=11,
                              epochs=2, drop_last=False, dispatcher=d.dispatcher, job_name="kills",
                              batches_per_split=1, prefetch=1)
        out = {}
        killed_python = killed_worker = False
        for e in range(2):
            seen = []
            for images, labels, paths in loader:
                info = loader.last_batch_info()
                idx = info["indices"][: info["valid"]].tolist()
                for r, i in enumerate(idx):
                    out[(e, i)] = (images[r].clone(), int(labels[r]), paths[r])
                seen += idx
                if e == 0 and not killed_python and len(seen) >= 2 * BATCH:
                    kids = python_children(d.procs[1].pid)
                    assert kids, "worker 0 has no Python process"
                    for k in kids:
                        os.kill(k, signal.SIGKILL)
                    killed_python = True
                if e == 1 and not killed_worker and len(seen) >= BATCH:
                    d.kill_worker(1)
                    killed_worker = True
            assert sorted(seen) == list(range(N)), "epoch %d: %d rows, %d distinct" % (e, len(seen), len(set(seen)))
        assert killed_python and killed_worker
        assert_same(out, reference)
        loader.close()
    finally:
        d.close()
        logs = d.tails()
        print(logs)
    assert "replaced, and the batch made again" in logs


def test_ranks_get_equal_steps_and_a_state_resumes_exactly(ferry, ferry_local, photos, reference, tmp_path):
    """Two DDP ranks of a job with user code: as many batches each, every sample of
    the epoch once between them; then a rank's state saved mid-epoch resumes with the
    next batch: the same rows, the same tensors."""
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=2, worker_args=["--allow-user-code"])
    try:
        def make(rank, name="ranks"):
            return ferry.Loader(dataset=PhotoCrops(photos), transform=jitter, batch_size=4, seed=11, epochs=2,
                                drop_last=False, dispatcher=d.dispatcher, job_name=name, rank=rank, world_size=2)
        r0, r1 = make(0), make(1)
        rows = {0: [], 1: []}
        batches = {0: 0, 1: 0}
        for rank, loader in ((0, r0), (1, r1)):
            for x, _, _ in loader:
                info = loader.last_batch_info()
                idx = info["indices"][: info["valid"]].tolist()
                batches[rank] += 1
                rows[rank] += idx
                for r, i in enumerate(idx):
                    assert torch.equal(x[r], reference[(0, i)][0])
        assert batches[0] == batches[1] == N // 8 and len(rows[0]) == len(rows[1]) == N // 2
        assert sorted(rows[0] + rows[1]) == list(range(N))
        # Mid-epoch 1: three batches read, the state saved, the loader gone.
        first = []
        it = iter(r0)
        for _ in range(3):
            next(it)
            info = r0.last_batch_info()
            first += info["indices"][: info["valid"]].tolist()
        state = r0.state_dict()
        r0.close()
        resumed = make(0)
        resumed.load_state_dict(state)
        rest = []
        for x, _, _ in resumed:
            info = resumed.last_batch_info()
            idx = info["indices"][: info["valid"]].tolist()
            rest += idx
            for r, i in enumerate(idx):
                assert torch.equal(x[r], reference[(1, i)][0])
        theirs = []
        for _ in r1:
            info = r1.last_batch_info()
            theirs += info["indices"][: info["valid"]].tolist()
        assert not set(first) & set(rest)
        assert sorted(first + rest + theirs) == list(range(N))
        for loader in (resumed, r1):
            loader.close()
    finally:
        d.close()
        print(d.tails())


class Numbers(torch.utils.data.Dataset):
    """Cheap samples; one in a hundred raises."""

    def __len__(self):
        return 400

    def __getitem__(self, i):
        if i % 100 == 37:
            raise KeyError("no sidecar for sample %d" % i)
        return torch.full((4,), float(i)), i


def test_exceptions_on_one_percent_are_reported_and_each_batch_keeps_the_rest(ferry):
    loader = ferry.Loader(dataset=Numbers(), batch_size=50, seed=2, drop_last=False, python_processes=2)
    rows = []
    for x, i in loader:
        assert torch.equal(x[:, 0], i.to(torch.float32))
        rows += i.tolist()
    assert sorted(rows) == [i for i in range(400) if i % 100 != 37]
    assert sorted((s[0], s[2]) for s in loader.skipped()) == [
        (i, "KeyError: 'no sidecar for sample %d'" % i) for i in (37, 137, 237, 337)]


def test_a_trainer_that_writes_into_its_batches_sees_every_new_batch(ferry):
    """In process a batch's tensors map the Python process's buffer, which the process
    writes again for a later batch, and which stays mapped in the trainer: what the
    trainer writes into a batch (in place, as a normalize does) stays its own, and never
    shows in a later batch from the same buffer."""
    loader = ferry.Loader(dataset=Numbers(), batch_size=50, seed=3, drop_last=False, python_processes=1,
                          epochs=None, prefetch=1)
    batches = 0
    for _ in range(3):
        for x, i in loader:
            assert torch.equal(x[:, 0], i.to(torch.float32)) and torch.equal(x[:, 3], i.to(torch.float32))
            x.fill_(-7.0)
            i.fill_(-1)
            batches += 1
    assert batches == 3 * 8
    # The buffers were reused (mapped once each), not a mapping per batch.
    with open("/proc/self/maps") as f:
        mapped = [line for line in f if "ferry-batch" in line]
    assert 0 < len(mapped) <= 8, mapped
    loader.close()


class Ten(torch.utils.data.Dataset):
    """10 samples: with batches of 4 on 2 ranks the epoch's 3 batches leave rank 0 a
    batch of 2 and rank 1 a batch without a sample."""

    def __len__(self):
        return 10

    def __getitem__(self, i):
        return np.full((2,), i, np.float32), i + 100, "s%d" % i


def as_dict(samples):
    """A collate_fn of the user's own: it sees the samples made, never padding."""
    return {"x": torch.stack([torch.from_numpy(s[0]) for s in samples]),
            "y": torch.tensor([s[1] for s in samples]), "name": [s[2] for s in samples]}


@pytest.mark.parametrize("collate", [None, as_dict])
@pytest.mark.parametrize("shuffle", [True, False])
def test_a_ranks_padding_with_user_code_as_with_native_batches(ferry, collate, shuffle):
    """A rank's last batches with user code, as the native path's: every rank steps as
    often; padding rows are -1 in the label (never 0, a real class); a batch with no
    sample is shaped after the one before it (not an empty list); ferry.DataLoader cuts
    the padding rows, keeps a training loader's padding batch (labelled -1, with a
    warning) and leaves it out of an evaluation's. Every sample once across the ranks."""
    def rows(batch):
        return (batch["x"], batch["y"], batch["name"]) if isinstance(batch, dict) else batch

    for kind in ("Loader", "DataLoader"):
        got, steps = [], []
        for rank in (0, 1):
            if kind == "Loader":
                loader = ferry.Loader(dataset=Ten(), collate_fn=collate, batch_size=4, seed=5, epochs=1,
                                      drop_last=False, shuffle=shuffle, rank=rank, world_size=2)
            else:
                loader = ferry.DataLoader(Ten(), collate_fn=collate, batch_size=4, seed=5, epochs=1,
                                          drop_last=False, shuffle=shuffle, rank=rank, world_size=2)
            n = 0
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for batch in loader:
                    x, y, names = rows(batch)
                    n += 1
                    real = y >= 0
                    assert torch.equal(x[real, 0], (y[real] - 100).to(torch.float32)), (kind, rank, x, y)
                    assert torch.all(x[~real] == 0), (kind, rank, x, y)
                    assert [nm for nm in names if nm] == ["s%d" % (v - 100) for v in y[real].tolist()]
                    if kind == "DataLoader" and bool(real.any()):
                        assert bool(real.all()), "padding rows left in a DataLoader batch: %s" % y
                    got += y[real].tolist()
            steps.append(n)
            padded = [w for w in caught if "holds no sample" in str(w.message)]
            assert len(padded) == (1 if kind == "DataLoader" and shuffle and rank == 1 else 0), \
                [str(w.message) for w in caught]
            loader.close()
        assert sorted(got) == list(range(100, 110)), (kind, got)
        if kind == "DataLoader" and not shuffle:
            assert steps == [2, 1], steps  # an evaluation: rank 1's padding batch is left out
        else:
            assert steps == [2, 2], steps


def test_exceptions_are_reported_and_the_rest_arrives(ferry, photos):
    """A sample whose code raises is left out with its exception's type and message;
    a custom collate function gets the rest."""
    loader = ferry.Loader(dataset=PhotoCrops(photos, fail_every=16), transform=jitter, collate_fn=first_names,
                          batch_size=BATCH, seed=1, drop_last=False, shuffle=False)
    rows = 0
    for b in loader:
        assert set(b) == {"images", "labels", "names"}
        assert b["images"].shape[1:] == (3, 32, 32) and len(b["names"]) == b["images"].shape[0]
        rows += len(b["names"])
    skipped = loader.skipped()
    assert rows == N - 3
    assert sorted(s[0] for s in skipped) == [15, 31, 47]
    assert all("ValueError: sample %d: no label in its sidecar" % s[0] == s[2] for s in skipped)


def test_a_sample_that_never_returns_is_skipped_after_the_timeout(ferry, photos):
    t0 = time.time()
    loader = ferry.Loader(dataset=PhotoCrops(photos[:16], hang_at=5), transform=jitter, batch_size=BATCH, seed=1,
                          drop_last=False, shuffle=False, sample_timeout=1.5)
    seen = []
    for images, labels, paths in loader:
        info = loader.last_batch_info()
        seen += info["indices"][: info["valid"]].tolist()
    assert sorted(seen) == [i for i in range(16) if i != 5]
    assert [(s[0], s[2]) for s in loader.skipped()] == [(5, "ran past the sample timeout (1.5 s)")]
    assert time.time() - t0 < 60


def test_a_module_the_worker_cannot_import_fails_the_job_fast(ferry, ferry_local, photos, tmp_path):
    """The dataset's class comes from a package the trainer has and the workers do not:
    the job fails at once, naming the module (no crash loop)."""
    import sys
    pkg = tmp_path / "site-packages"  # an installed package of the trainer's (sent by reference)
    os.makedirs(pkg)
    (pkg / "trainer_only_pkg.py").write_text(
        "class Data:\n    def __len__(self):\n        return 10\n    def __getitem__(self, i):\n        return i\n")
    sys.path.insert(0, str(pkg))
    try:
        import trainer_only_pkg
        d = Daemons(os.path.dirname(ferry_local), tmp_path / "d", workers=2, worker_args=["--allow-user-code"])
        try:
            t0 = time.time()
            loader = ferry.Loader(dataset=trainer_only_pkg.Data(), batch_size=2, dispatcher=d.dispatcher,
                                  job_name="missing")
            with pytest.raises(RuntimeError, match="No module named 'trainer_only_pkg'"):
                next(iter(loader))
            assert time.time() - t0 < 10
            loader.close()
        finally:
            d.close()
    finally:
        sys.path.remove(str(pkg))
        sys.modules.pop("trainer_only_pkg", None)


def test_a_worker_without_the_flag_refuses_code_and_serves_others(ferry, ferry_local, photos, small_tree, tmp_path):
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=0)
    try:
        worker = d.start_worker(["--allow-synthetic"])  # no --allow-user-code; no dispatcher job below
        loader = ferry.Loader(dataset=PhotoCrops(photos), batch_size=BATCH, workers=[worker])
        with pytest.raises(RuntimeError, match="start it with --allow-user-code"):
            next(iter(loader))
        loader.close()
        images = ferry.Loader(data=small_tree, pipeline="imagenet-eval", batch_size=4, workers=[worker])
        x, y = next(iter(images))
        assert x.shape[0] == 4
        images.close()
    finally:
        d.close()


def test_with_tokens_on_a_client_without_one_cannot_submit_code(ferry, ferry_local, photos, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret-token-for-user-code\n")
    os.chmod(token, 0o600)
    d = Daemons(os.path.dirname(ferry_local), tmp_path / "d", workers=0)
    try:
        worker = d.start_worker(["--allow-user-code", "--token-file", str(token)])
        loader = ferry.Loader(dataset=PhotoCrops(photos), batch_size=BATCH, workers=[worker])
        with pytest.raises(RuntimeError, match="(?i)token|auth"):
            next(iter(loader))
        loader.close()
        ok = ferry.Loader(dataset=PhotoCrops(photos), transform=jitter, batch_size=BATCH, workers=[worker],
                          token_file=str(token), epochs=1, drop_last=False)
        assert sum(x.shape[0] for x, _, _ in ok) == N
        ok.close()
    finally:
        d.close()


class WhoAmI(torch.utils.data.Dataset):
    """Each sample: the uid its code runs as; reading `secret` raises for a user who
    may not."""

    def __init__(self, secret):
        self.secret = secret

    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == 3:
            with open(self.secret) as f:
                return f.read()
        return os.getuid()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (to start a worker whose Python runs as another user)")
def test_user_code_user_runs_the_processes_without_the_workers_credentials(ferry, ferry_local, tmp_path):
    token = tmp_path / "token"
    token.write_text("worker-and-trainer-secret\n")
    os.chmod(token, 0o600)
    os.chmod(tmp_path, 0o755)
    # The workers' Python is this interpreter (conftest): nobody must be able to run it
    # and import what the code needs (not so for a virtual environment under /root).
    probe = subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", "import cloudpickle, numpy, torch"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("user nobody cannot run %s with its packages: %s" % (sys.executable,
                                                                       (probe.stderr.strip() or "?")[-200:]))
    d = Daemons(os.path.dirname(ferry_local), tmp_path / "d", workers=0)
    try:
        worker = d.start_worker(["--allow-user-code", "--user-code-user", "nobody", "--token-file", str(token)])
        loader = ferry.Loader(dataset=WhoAmI(str(token)), batch_size=4, shuffle=False, drop_last=False,
                              workers=[worker], token_file=str(token))
        (uids,) = [b for b in loader]
        import pwd
        assert uids.tolist() == [pwd.getpwnam("nobody").pw_uid] * 3
        assert [(s[0], s[2].split(":")[0]) for s in loader.skipped()] == [(3, "PermissionError")]
        loader.close()
    finally:
        d.close()
