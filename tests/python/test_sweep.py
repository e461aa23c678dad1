"""A sweep (sharing="every") through real daemons: a ferry-dispatcher and two
ferry-workers. Every trainer of the job gets every batch of it once, pixel for pixel
the batches one trainer reading the job alone gets, in the same order; a worker killed
mid-epoch and a trainer restarted from its state_dict change nothing a trainer sees."""
import hashlib
import threading

import pytest

PIPELINE = {"ops": [{"op": "random_resized_crop", "size": 32}, {"op": "hflip", "p": 0.5}],
            "output": {"dtype": "uint8", "layout": "NHWC"}}


def loader(ferry, daemons, tree, trainer=None, job="sweep", **kw):
    extra = dict(sharing="every", trainer_id=trainer) if trainer else {}
    return ferry.Loader(data=tree, pipeline=PIPELINE, batch_size=6, epochs=2, seed=5, dispatcher=daemons.dispatcher,
                        job_name=job, deterministic=True, prefetch=2, **extra, **kw)


def digests(batches):
    out = []
    for images, labels in batches:
        h = hashlib.sha256(images.numpy().tobytes())
        h.update(labels.numpy().tobytes())
        out.append(h.hexdigest()[:16])
    return out


def take(it, n=None):
    got = []
    for b in it:
        got.append(b)
        if n is not None and len(got) == n:
            break
    return got


def read_all(ld):
    """Every epoch of a loader, as digests."""
    out = []
    for _ in range(2):
        out += digests(take(ld))
    return out


def test_every_trainer_takes_every_batch_the_same(ferry, daemons, small_tree):
    want = read_all(loader(ferry, daemons, small_tree, job="alone"))
    assert len(want) == 2 * 20  # 120 samples, batches of 6, two epochs
    got = {}

    def trainer(name):
        got[name] = read_all(loader(ferry, daemons, small_tree, trainer=name))

    threads = [threading.Thread(target=trainer, args=("lr-%d" % i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == ["lr-0", "lr-1", "lr-2", "lr-3"]
    for name, seq in got.items():
        assert seq == want, name


def test_a_worker_killed_mid_epoch_changes_nothing_a_trainer_sees(ferry, daemons, small_tree):
    want = read_all(loader(ferry, daemons, small_tree, job="alone"))
    a = loader(ferry, daemons, small_tree, trainer="a")
    b = loader(ferry, daemons, small_tree, trainer="b")
    ia, ib = iter(a), iter(b)
    first_a = digests([next(ia) for _ in range(7)])
    first_b = digests([next(ib) for _ in range(4)])
    daemons.kill_worker(0)
    rest = {}
    threads = [threading.Thread(target=lambda k, it: rest.__setitem__(k, digests(list(it))), args=(k, it))
               for k, it in (("a", ia), ("b", ib))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    seq_a = first_a + rest["a"] + digests(take(a))
    seq_b = first_b + rest["b"] + digests(take(b))
    assert seq_a == want
    assert seq_b == want


def test_a_trainer_restarted_from_its_state_goes_on_exactly(ferry, daemons, small_tree):
    want = read_all(loader(ferry, daemons, small_tree, job="alone"))
    first = loader(ferry, daemons, small_tree, trainer="restarted")
    it = iter(first)
    seen = digests([next(it) for _ in range(13)])
    state = first.state_dict()
    del it, first  # the trainer process ends
    second = loader(ferry, daemons, small_tree, trainer="restarted")
    second.load_state_dict(state)
    seen += digests(take(second))
    seen += digests(take(second))
    assert seen == want


def test_sweep_arguments_are_checked(ferry, daemons, small_tree):
    with pytest.raises(ValueError, match="trainer_id"):
        ferry.Loader(data=small_tree, dispatcher=daemons.dispatcher, job_name="s", sharing="every")
    with pytest.raises(ValueError, match="dispatcher"):
        ferry.Loader(data=small_tree, sharing="every", trainer_id="t")
    with pytest.raises(ValueError, match="sharing must be"):
        ferry.Loader(data=small_tree, dispatcher=daemons.dispatcher, job_name="s", sharing="all")
    with pytest.raises(ValueError, match="trainer_id names a trainer of a sweep"):
        ferry.Loader(data=small_tree, dispatcher=daemons.dispatcher, job_name="s", trainer_id="t")
