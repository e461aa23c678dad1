"""DistributedDataParallel on Ferry, as a trainer runs it: 4 rank processes (launched
with the environment torchrun sets; Debian's torchrun crashes at start on Python 3.11)
with the gloo backend on CPU, a ferry-dispatcher and 2 ferry-workers, 2 epochs of
training a small model (tests/python/ddp_rank.py). Every rank makes the same number of
steps each epoch (else DDP's all-reduce hangs, which the timeout turns into a failure)
and the ranks' samples are each epoch's samples exactly once (less the drop_last
remainder): plain, with a worker killed mid-epoch, and in deterministic order. Elastic
resume: 4 ranks stop mid-epoch, 2 new ranks finish the epoch from all 4 states (and 2 -> 4).

With FERRY_TEST_TORCHRUN=1 the ranks are started by the real torchrun instead
(`python -m torch.distributed.run`: a torch whose torchrun works, e.g. a current one from
PyPI; bench/peers/modern_torch.sh runs this file so)."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CLASSES, PER_CLASS = 4, 55
N = CLASSES * PER_CLASS  # 220: 4 ranks x 4 = 16 a round; drop leaves 12 out, pad adds 4 rows
WORLD, BATCH = 4, 4


@pytest.fixture(scope="module")
def ddp_tree(sample_data, tmp_path_factory):
    root = tmp_path_factory.mktemp("ddp") / "tree"
    classes = sorted(c for c in os.listdir(sample_data) if os.path.isdir(os.path.join(sample_data, c)))[:CLASSES]
    for c in classes:
        os.makedirs(root / c)
        for f in sorted(os.listdir(os.path.join(sample_data, c)))[:PER_CLASS]:
            shutil.copy(os.path.join(sample_data, c, f), root / c / f)
    return str(root)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Ranks:
    """`world` rank processes of ddp_rank.py, with torchrun's environment."""

    def __init__(self, ferry, world, args, tmp, tag, script=os.path.join(HERE, "ddp_rank.py"), extra_env=None):
        port = free_port()
        self.reports = [str(tmp / ("%s-report-%d.json" % (tag, r))) for r in range(world)]
        self.logs = [str(tmp / ("%s-log-%d.txt" % (tag, r))) for r in range(world)]
        pythonpath = os.path.dirname(os.path.dirname(ferry.__file__))
        self.procs = []
        if os.environ.get("FERRY_TEST_TORCHRUN") == "1":
            # One torchrun for all ranks (it sets MASTER_*, RANK, LOCAL_RANK, WORLD_SIZE
            # itself); their output goes to one log.
            env = dict(os.environ, PYTHONPATH=pythonpath, **(extra_env or {}))
            self.logs = [str(tmp / ("%s-torchrun-log.txt" % tag))] * world
            cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", str(world),
                   "--master_addr", "127.0.0.1", "--master_port", str(port), os.path.join(HERE, "torchrun_rank.py"),
                   script, *args, "--report", str(tmp / ("%s-report-{rank}.json" % tag))]
            with open(self.logs[0], "w") as log:
                self.procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT))
            return
        for r in range(world):
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), LOCAL_RANK=str(r),
                       WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world), PYTHONPATH=pythonpath, **(extra_env or {}))
            with open(self.logs[r], "w") as log:
                self.procs.append(subprocess.Popen([sys.executable, script, *args,
                                                    "--report", self.reports[r]], env=env, stdout=log,
                                                   stderr=subprocess.STDOUT))

    def wait(self, timeout=int(os.environ.get("FERRY_TEST_HANG_S", "240"))):
        deadline = time.time() + timeout
        for r, p in enumerate(self.procs):
            try:
                rc = p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                for q in self.procs:  # every rank's Python stacks into its log (faulthandler)
                    if q.poll() is None:
                        q.send_signal(signal.SIGUSR1)
                time.sleep(2)
                for q in self.procs:
                    q.kill()
                logs = "\n".join("--- rank %d\n%s" % (i, self.log(i)) for i in range(len(self.procs)))
                pytest.fail("rank %d did not finish in %d s (a hang?); the ranks' logs:\n%s" % (r, timeout, logs))
            assert rc == 0, "rank %d exited with %d; its log:\n%s" % (r, rc, self.log(r))
        out = []
        for path in self.reports:
            with open(path) as f:
                out.append(json.load(f))
        return out

    def log(self, r):
        with open(self.logs[r]) as f:
            return f.read()[-8000:]


def check(reports, epochs, drop_last, n=N, world=WORLD):
    per_rank = n // (world * BATCH) if drop_last else -(-n // (world * BATCH))
    assert [r["len"] for r in reports] == [per_rank] * world
    for e in epochs:
        steps = [r["epochs"][str(e)]["steps"] for r in reports]
        assert steps == [per_rank] * world, "epoch %d: steps per rank %s" % (e, steps)
        seen = sorted(i for r in reports for i in r["epochs"][str(e)]["indices"])
        assert len(seen) == len(set(seen)), "epoch %d: a sample twice" % e
        if drop_last:
            assert len(seen) == per_rank * world * BATCH and n - len(seen) < world * BATCH
        else:
            assert seen == list(range(n)), "epoch %d: %d of %d samples" % (e, len(seen), n)


def args(ddp_tree, daemons, job, *extra):
    return ["--data", ddp_tree, "--dispatcher", daemons.dispatcher, "--job", job, *extra]


@pytest.mark.parametrize("drop_last", [True, False])
def test_four_ranks_two_epochs(ferry, ddp_tree, daemons, tmp_path, drop_last):
    job = "ddp-%s" % ("drop" if drop_last else "pad")
    ranks = Ranks(ferry, WORLD, args(ddp_tree, daemons, job, *([] if drop_last else ["--pad"])), tmp_path, job)
    check(ranks.wait(), [0, 1], drop_last)


def test_a_worker_killed_mid_epoch(ferry, ddp_tree, daemons, tmp_path):
    progress = str(tmp_path / "progress")
    ranks = Ranks(ferry, WORLD, args(ddp_tree, daemons, "ddp-kill", "--step-delay", "0.1", "--progress", progress),
                  tmp_path, "kill")
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with open(progress) as f:
                if int(f.read() or 0) >= 4:
                    break
        except FileNotFoundError:
            pass
        time.sleep(0.02)
    else:
        pytest.fail("rank 0 made no progress")
    daemons.kill_worker(0)
    reports = ranks.wait()
    check(reports, [0, 1], True)
    assert reports[0]["epochs"]["0"]["steps"] > 4, "the kill came mid-epoch"


def test_deterministic_order(ferry, ddp_tree, daemons, tmp_path):
    ranks = Ranks(ferry, WORLD, args(ddp_tree, daemons, "ddp-det", "--deterministic", "--pad"), tmp_path, "det")
    reports = ranks.wait()
    check(reports, [0, 1], False)
    # Deterministic order is the job's order, whatever the workers: each rank's batches
    # are those of an in-process loader of the same rank, in the same order.
    sys.path.insert(0, HERE)
    from ddp_rank import PIPELINE
    for r in range(WORLD):
        local = ferry.Loader(data=ddp_tree, pipeline=PIPELINE, batch_size=BATCH, epochs=2, drop_last=False, rank=r,
                             world_size=WORLD, threads=1)
        for e in range(2):
            want = [i for _ in local for i in local.last_batch_info()["indices"].tolist() if i >= 0]
            assert reports[r]["epochs"][str(e)]["indices"] == want, "rank %d epoch %d" % (r, e)


@pytest.mark.parametrize("old,new,drop_last", [(4, 2, False), (2, 4, True)])
def test_elastic_resume_on_another_world_size(ferry, ddp_tree, daemons, tmp_path, old, new, drop_last):
    """`old` ranks stop mid-epoch and save their states (one file per rank, as a
    checkpoint); `new` ranks load all of them: the rest of the epoch, and only the rest,
    is spread over the new ranks with equal steps, then the next epoch is a whole one."""
    job, stop = "ddp-elastic-%d-%d" % (old, new), 5
    state_dir = tmp_path / "states"
    state_dir.mkdir()
    common = args(ddp_tree, daemons, job, "--state-dir", str(state_dir), *([] if drop_last else ["--pad"]))
    before = Ranks(ferry, old, common + ["--stop-after", str(stop)], tmp_path, "before").wait()
    assert [r["epochs"]["0"]["steps"] for r in before] == [stop] * old
    assert len(os.listdir(state_dir)) == old
    after = Ranks(ferry, new, common + ["--resume"], tmp_path, "after").wait()
    assert [r["first_epoch"] for r in after] == [0] * new

    taken = [i for r in before for i in r["epochs"]["0"]["indices"]]
    rest = [i for r in after for i in r["epochs"]["0"]["indices"]]
    steps = [r["epochs"]["0"]["steps"] for r in after]
    left = N - old * stop * BATCH
    want_steps = left // (new * BATCH) if drop_last else -(-left // (new * BATCH))
    assert steps == [want_steps] * new, "steps per new rank after the resume: %s" % steps
    union = sorted(taken + rest)
    assert len(union) == len(set(union)), "a sample twice across the resume"
    if drop_last:
        assert len(rest) == want_steps * new * BATCH and N - len(union) < new * BATCH
    else:
        assert union == list(range(N)), "epoch 0 before + after: %d of %d samples" % (len(union), N)
    per_rank = N // (new * BATCH) if drop_last else -(-N // (new * BATCH))
    assert [r["epochs"]["1"]["steps"] for r in after] == [per_rank] * new
    seen = sorted(i for r in after for i in r["epochs"]["1"]["indices"])
    assert len(seen) == len(set(seen))
    if drop_last:
        assert N - len(seen) < new * BATCH
    else:
        assert seen == list(range(N))


EXAMPLE = os.path.join(os.path.dirname(os.path.dirname(HERE)), "client", "examples", "ddp_imagefolder.py")
TORCH_LINE = "    loader = torch.utils.data.DataLoader(dataset, batch_size=a.batch_size, sampler=sampler, " \
             "num_workers=a.workers, drop_last=True)\n"


@pytest.fixture(scope="module")
def one_per_class(sample_data, tmp_path_factory):
    """100 real JPEGs, each its own class: a target names its sample."""
    root = tmp_path_factory.mktemp("example") / "tree"
    files = sorted(os.path.join(c, f) for c in os.listdir(sample_data) if os.path.isdir(os.path.join(sample_data, c))
                   for f in os.listdir(os.path.join(sample_data, c)))[:100]
    for i, f in enumerate(files):
        os.makedirs(root / ("c%03d" % i))
        shutil.copy(os.path.join(sample_data, f), root / ("c%03d" % i) / os.path.basename(f))
    return str(root)


def test_the_example_script_switched_with_one_line(ferry, one_per_class, daemons, tmp_path):
    """client/examples/ddp_imagefolder.py is a DistributedSampler + set_epoch script whose
    only changes from torch's DataLoader are the import and the DataLoader line. Its 4
    ranks, on a dispatcher job named in the environment, take equal steps and see each
    epoch's samples once (less the drop_last remainder)."""
    with open(EXAMPLE) as f:
        lines = f.readlines()
    ferry_lines = [l for l in lines if "ferry.DataLoader(" in l]
    assert len(ferry_lines) == 1 and lines.count("import ferry\n") == 1
    torch_version = [TORCH_LINE if l in ferry_lines else l for l in lines if l != "import ferry\n"]
    assert len(torch_version) == len(lines) - 1
    n, world, batch = 100, 4, 4
    env = {"FERRY_DISPATCHER": daemons.dispatcher, "FERRY_JOB_NAME": "example"}
    reports = Ranks(ferry, world, ["--data", one_per_class, "--batch-size", str(batch), "--size", "16"], tmp_path,
                    "example", script=EXAMPLE, extra_env=env).wait()
    per_rank = n // (world * batch)
    assert [r["len"] for r in reports] == [per_rank] * world
    for e in ("0", "1"):
        assert [r["epochs"][e]["steps"] for r in reports] == [per_rank] * world
        seen = sorted(t for r in reports for t in r["epochs"][e]["targets"])
        assert len(seen) == len(set(seen)) == per_rank * world * batch and set(seen) <= set(range(n))
    # The torch version runs too (2 ranks, 1 epoch): the diff is the import and one line.
    script = tmp_path / "torch_version.py"
    script.write_text("".join(torch_version))
    reports = Ranks(ferry, 2, ["--data", one_per_class, "--batch-size", str(batch), "--size", "16", "--epochs", "1",
                               "--workers", "1"], tmp_path, "torch", script=str(script)).wait()
    assert [r["epochs"]["0"]["steps"] for r in reports] == [n // 2 // batch] * 2


def test_hybrid_ranks_join_with_their_own_cores(ferry, ddp_tree, ferry_local, tmp_path):
    """Each rank's own cores (local_threads=1) join the job as a worker serving only that
    rank, beside one remote worker: equal steps, each epoch once, and every rank's own
    worker served part of its batches (and only its: another rank's split left on it
    would never arrive, and the run would hang)."""
    from conftest import Daemons
    d = Daemons(os.path.dirname(ferry_local), tmp_path / "daemons", workers=1)
    try:
        ranks = Ranks(ferry, 2, args(ddp_tree, d, "ddp-hybrid", "--local-threads", "1"), tmp_path, "hybrid")
        reports = ranks.wait()
    finally:
        d.close()
    check(reports, [0, 1], True, world=2)
    per_rank = N // (2 * BATCH) * 2  # batches per rank over both epochs
    for r in reports:
        assert 0 < r["local_batches"] <= per_rank, "rank %d: %d of its batches from its own worker" % (
            r["rank"], r["local_batches"])


def test_hybrid_alone_reads_the_whole_job(ferry, ddp_tree, ferry_local, tmp_path):
    """With no remote worker at all, the trainer's own worker serves the whole job."""
    from conftest import Daemons
    from ddp_rank import PIPELINE
    d = Daemons(os.path.dirname(ferry_local), tmp_path / "daemons", workers=0)
    try:
        loader = ferry.Loader(data=ddp_tree, pipeline=PIPELINE, batch_size=BATCH, dispatcher=d.dispatcher,
                              job_name="alone", local_threads=1, rank=0, world_size=1)
        seen = []
        for _ in loader:
            seen += loader.last_batch_info()["indices"].tolist()
        assert sorted(seen) == list(range(N))
        assert loader.local_batches() == len(loader) == N // BATCH
        loader.close()
        # Stopped mid-epoch: its own worker leaves with leases held (they return to the
        # job), and a resumed loader, with a new worker of its own, finishes the epoch.
        first = ferry.Loader(data=ddp_tree, pipeline=PIPELINE, batch_size=BATCH, dispatcher=d.dispatcher,
                             job_name="alone-resumed", local_threads=1, rank=0, world_size=1)
        it, part = iter(first), []
        for _ in range(5):
            next(it)
            part += first.last_batch_info()["indices"].tolist()
        state = first.state_dict()
        del it
        first.close()
        second = ferry.Loader(data=ddp_tree, pipeline=PIPELINE, batch_size=BATCH, dispatcher=d.dispatcher,
                              job_name="alone-resumed", local_threads=1, rank=0, world_size=1)
        second.load_state_dict(state)
        for _ in second:
            part += second.last_batch_info()["indices"].tolist()
        assert sorted(part) == list(range(N)), "before + after the restart: each sample once"
        second.close()
        with pytest.raises(ValueError, match="dispatcher"):
            ferry.Loader(data=ddp_tree, pipeline=PIPELINE, local_threads=1)
    finally:
        d.close()
