"""Weighted mixtures (ferry.Mixture) of three sources made of real photographs: the
shares of 10,000 draws are the weights' within binomial tolerance, each source's passes
hold each of its samples once, ranks resumed from 4 to 2 through a dispatcher equal
the uninterrupted run, and a worker killed mid-epoch changes nothing a trainer sees."""
import hashlib
import math
import os
import threading

import pytest

U8 = {"ops": [{"op": "random_resized_crop", "size": 16}], "output": {"dtype": "uint8", "layout": "NHWC"}}
SIZES = (60, 40, 20)
WEIGHTS = (0.6, 0.3, 0.1)


@pytest.fixture(scope="module")
def sources(sample_data, tmp_path_factory):
    """Three file lists of distinct photographs: 60, 40 and 20 of them."""
    root = tmp_path_factory.mktemp("mixture")
    classes = sorted(c for c in os.listdir(sample_data) if os.path.isdir(os.path.join(sample_data, c)))
    files = [(os.path.join(sample_data, c, f), label) for label, c in enumerate(classes[:4])
             for f in sorted(os.listdir(os.path.join(sample_data, c)))[:30]]
    out, at = [], 0
    for k, n in enumerate(SIZES):
        path = root / ("source-%d.tsv" % k)
        path.write_text("".join("%s\t%d\n" % f for f in files[at:at + n]))
        at += n
        out.append(str(path))
    return out


def mixture(ferry, sources, epoch):
    return ferry.Mixture(list(zip(sources, WEIGHTS)), epoch=epoch)


def source_of(i):
    return 0 if i < SIZES[0] else 1 if i < SIZES[0] + SIZES[1] else 2


def rows(loader, it=None, batches=None):
    """(index, digest of its pixels) of every valid row, in order."""
    out = []
    it = iter(loader) if it is None else it
    for n, (images, labels) in enumerate(it):
        for r, i in enumerate(loader.last_batch_info()["indices"].tolist()):
            if i >= 0:
                out.append((i, hashlib.sha256(images[r].numpy().tobytes()).hexdigest()[:16]))
        if batches is not None and n + 1 == batches:
            break
    return out


def test_shares_of_ten_thousand_draws_are_the_weights(ferry, sources):
    loader = ferry.Loader(data=mixture(ferry, sources, 10000), pipeline=U8, batch_size=250, seed=3, threads=2,
                          epochs=1, drop_last=False)
    assert len(loader) == 40
    got = [i for i, _ in rows(loader)]
    assert len(got) == 10000
    # The epoch, and its first 1,000 draws (a run stopped early sees the weights too).
    for n in (10000, 1000):
        counts = [0, 0, 0]
        for i in got[:n]:
            counts[source_of(i)] += 1
        for k, p in enumerate(WEIGHTS):
            z = abs(counts[k] - n * p) / math.sqrt(n * p * (1 - p))
            assert z <= 3.29, "source %d: %d of %d draws (p < 1e-3 for weight %.1f)" % (k, counts[k], n, p)
    # Each source's draws are passes over it: each sample once a pass.
    for k, size in enumerate(SIZES):
        base = sum(SIZES[:k])
        drawn = [i - base for i in got if source_of(i) == k]
        for at in range(0, len(drawn) - size + 1, size):
            assert sorted(drawn[at:at + size]) == list(range(size)), "source %d, pass at draw %d" % (k, at)


def test_four_ranks_resumed_as_two_through_a_dispatcher_equal_the_uninterrupted_run(ferry, sources, daemons):
    kw = dict(data=mixture(ferry, sources, 200), pipeline=U8, batch_size=5, seed=9, epochs=2, drop_last=False,
              batches_per_split=2)
    whole = ferry.Loader(threads=1, **kw)
    want = [sorted(rows(whole)) for _ in range(2)]
    assert [len(w) for w in want] == [200, 200]

    dkw = dict(kw, dispatcher=daemons.dispatcher, job_name="mix-elastic")
    states, before, errors = [None] * 4, [[] for _ in range(4)], []

    def old_rank(r):
        try:
            ld = ferry.Loader(rank=r, world_size=4, **dkw)
            it = iter(ld)
            before[r] = rows(ld, it, batches=3)
            states[r] = ld.state_dict()
            del it
            ld.close()
        except Exception as e:  # reported below
            errors.append((r, e))

    after = [[[], []] for _ in range(2)]

    def new_rank(r):
        try:
            ld = ferry.Loader(rank=r, world_size=2, **dkw)
            ld.load_state_dict(states)
            for e in range(2):
                after[r][e] = rows(ld)
        except Exception as e:
            errors.append((r, e))

    for fn, world in ((old_rank, 4), (new_rank, 2)):
        threads = [threading.Thread(target=fn, args=(r,)) for r in range(world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
    assert sum(len(b) for b in before) == 4 * 3 * 5
    epoch0 = sorted([x for b in before for x in b] + [x for a in after for x in a[0]])
    assert epoch0 == want[0], "epoch 0 from 4 ranks then 2: what the uninterrupted run yields, pixel for pixel"
    assert sorted(x for a in after for x in a[1]) == want[1], "epoch 1 on 2 ranks"


def test_a_worker_killed_mid_epoch_changes_nothing(ferry, sources, daemons):
    kw = dict(data=mixture(ferry, sources, 150), pipeline=U8, batch_size=5, seed=4, epochs=2,
              dispatcher=daemons.dispatcher, deterministic=True, batches_per_split=2)
    alone = ferry.Loader(job_name="mix-alone", **kw)
    want = rows(alone) + rows(alone)
    ld = ferry.Loader(job_name="mix-kill", **kw)
    it = iter(ld)
    got = rows(ld, it, batches=11)
    daemons.kill_worker(0)
    got += rows(ld, it) + rows(ld)
    assert got == want


def test_mixtures_are_checked(ferry, sources, tmp_path):
    with pytest.raises(ValueError, match="weight must be > 0"):
        ferry.Mixture([(sources[0], 0)], epoch=10)
    with pytest.raises(ValueError, match="epoch"):
        ferry.Mixture([(sources[0], 1)], epoch=0)
    with pytest.raises(ValueError, match="a mixture source is"):
        ferry.Mixture([sources[0]], epoch=10)
    # A source's own pipeline must make the job's rows.
    bad = ferry.Mixture([(sources[0], 1), (sources[1], 1, dict(U8, ops=[{"op": "resize", "size": 20},
                                                                          {"op": "center_crop", "size": 20}]))],
                        epoch=10)
    with pytest.raises(ValueError, match="rows must all be alike"):
        next(iter(ferry.Loader(data=bad, pipeline=U8, batch_size=5, threads=1)))
    with pytest.raises(Exception, match="mixture source 1"):
        missing = ferry.Mixture([(sources[0], 1), (str(tmp_path / "missing.tsv"), 1)], epoch=10)
        next(iter(ferry.Loader(data=missing, pipeline=U8, batch_size=5, threads=1)))
    # A state names its mixture: another one's is refused.
    a = ferry.Loader(data=mixture(ferry, sources, 50), pipeline=U8, batch_size=5, threads=1)
    it = iter(a)
    next(it)
    state = a.state_dict()
    b = ferry.Loader(data=ferry.Mixture(list(zip(sources, (0.5, 0.3, 0.2))), epoch=50), pipeline=U8, batch_size=5,
                     threads=1)
    with pytest.raises(ValueError, match="another mixture"):
        b.load_state_dict(state)
    # The same mixture resumes exactly.
    c = ferry.Loader(data=mixture(ferry, sources, 50), pipeline=U8, batch_size=5, threads=1)
    c.load_state_dict(state)
    rest = rows(c)
    fresh = ferry.Loader(data=mixture(ferry, sources, 50), pipeline=U8, batch_size=5, threads=1)
    assert rest == rows(fresh)[5:]


def test_the_dispatcher_killed_mid_epoch_and_restarted_changes_nothing(ferry, sources, ferry_local, tmp_path):
    """SIGKILL of the dispatcher mid-epoch: it comes back on its address and work dir,
    replays its journal, and the trainer's sequence is the job's, batch for batch."""
    import signal
    import socket
    import subprocess
    import time
    bindir = os.path.dirname(ferry_local)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []

    def start(argv, name):
        with open(str(tmp_path / (name + ".log")), "a") as err:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
        procs.append(p)
        line = p.stdout.readline()
        assert line.startswith("listening on "), line
        return p, line.split()[-1]

    def dispatcher():
        return start([os.path.join(bindir, "ferry-dispatcher"), "--listen", "127.0.0.1:%d" % port, "--work-dir",
                      str(tmp_path / "journal"), "--heartbeat-interval-ms", "100", "--heartbeat-timeout-ms", "1000"],
                     "dispatcher")

    try:
        d, address = dispatcher()
        for i in range(2):
            start([os.path.join(bindir, "ferry-worker"), "--listen", "127.0.0.1:0", "--threads", "1", "--dispatcher",
                   address], "worker-%d" % i)
        kw = dict(data=mixture(ferry, sources, 150), pipeline=U8, batch_size=5, seed=6, epochs=2,
                  dispatcher=address, deterministic=True, batches_per_split=2)
        alone = ferry.Loader(job_name="mix-alone", **kw)
        want = rows(alone) + rows(alone)
        ld = ferry.Loader(job_name="mix-dispatcher-kill", **kw)
        it = iter(ld)
        got = rows(ld, it, batches=13)
        d.send_signal(signal.SIGKILL)
        d.wait()
        time.sleep(0.5)
        dispatcher()
        got += rows(ld, it) + rows(ld)
        assert got == want
        with open(str(tmp_path / "dispatcher.log")) as f:
            assert "replayed" in f.read()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
