"""Ranks of a data-parallel trainer from Python (threads of one process here; the
multi-process DDP runs are in test_ddp.py): every rank gets len(loader) batches every
epoch and the ranks' batches are the epoch's samples once, in local, point-to-point and
dispatcher mode; a state saved at an epoch boundary loses nothing; a restarted rank
without its state gets a clear error."""
import threading

import pytest

U8 = {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 32}],
      "output": {"dtype": "uint8", "layout": "NHWC"}}
N = 120  # samples in small_tree


def on_threads(rank, world, errors):
    """Runs rank(r) for every rank on threads of its own; errors the ranks appended fail."""
    threads = [threading.Thread(target=rank, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors


def run_ranks(make, world, epochs):
    """Runs `world` loaders (make(rank)) in threads; per rank and epoch: (steps, valid indices, padding rows)."""
    out = [None] * world
    errors = []

    def rank(r):
        try:
            loader = make(r)
            per_epoch = []
            for _ in range(epochs):
                steps, seen, pad = 0, [], 0
                for x, y in loader:
                    steps += 1
                    idx = loader.last_batch_info()["indices"]
                    seen += [int(i) for i in idx if i >= 0]
                    pad += int((idx < 0).sum())
                    assert bool(((y < 0) == (idx < 0)).all()), "padding rows have label -1"
                per_epoch.append((steps, seen, pad))
            out[r] = (len(loader), per_epoch)
            loader.close()
        except Exception as e:  # reported by the main thread
            errors.append((r, e))

    on_threads(rank, world, errors)
    assert all(o is not None for o in out), "a rank did not finish"
    return out


def check_equal_steps_and_once(out, world, batch, drop_last, epochs):
    lengths = {o[0] for o in out}
    assert len(lengths) == 1, "len(loader) differs between ranks: %s" % lengths
    want = N // (world * batch) if drop_last else -(-N // (world * batch))
    assert lengths == {want}
    for e in range(epochs):
        steps = [o[1][e][0] for o in out]
        assert steps == [want] * world, "epoch %d: steps per rank %s" % (e, steps)
        seen = sorted(i for o in out for i in o[1][e][1])
        assert len(seen) == len(set(seen)), "a sample twice in epoch %d" % e
        if drop_last:
            assert len(seen) == want * world * batch and N - len(seen) < world * batch
        else:
            assert seen == list(range(N))
            assert sum(o[1][e][2] for o in out) == want * world * batch - N


@pytest.mark.parametrize("drop_last", [True, False])
def test_local_ranks(ferry, small_tree, drop_last):
    def make(r):
        return ferry.Loader(data=small_tree, pipeline=U8, batch_size=7, epochs=2, threads=1, drop_last=drop_last,
                            rank=r, world_size=4)
    check_equal_steps_and_once(run_ranks(make, 4, 2), 4, 7, drop_last, 2)


@pytest.mark.parametrize("deterministic", [False, True])
def test_dispatcher_ranks(ferry, small_tree, daemons, deterministic):
    def make(r):
        return ferry.Loader(data=small_tree, pipeline=U8, batch_size=7, epochs=2, drop_last=False, rank=r,
                            world_size=3, dispatcher=daemons.dispatcher, job_name="ranks-%s" % deterministic,
                            deterministic=deterministic, batches_per_split=2)
    check_equal_steps_and_once(run_ranks(make, 3, 2), 3, 7, False, 2)


def test_point_to_point_ranks(ferry, small_tree, daemons):
    def make(r):
        return ferry.Loader(data=small_tree, pipeline=U8, batch_size=5, epochs=2, drop_last=True, rank=r,
                            world_size=2, workers=daemons.workers)
    check_equal_steps_and_once(run_ranks(make, 2, 2), 2, 5, True, 2)


def test_rank_and_world_size_come_from_the_environment(ferry, small_tree, monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = ferry.Loader(data=small_tree, pipeline=U8, batch_size=4)
    assert (loader.rank, loader.world_size) == (2, 3)
    assert len(loader) == N // 12
    with pytest.raises(ValueError, match="both rank and world_size"):
        ferry.Loader(data=small_tree, pipeline=U8, rank=1)
    with pytest.raises(ValueError, match="rank must be in"):
        ferry.Loader(data=small_tree, pipeline=U8, rank=3, world_size=3)


@pytest.mark.parametrize("shared", [False, True])
def test_a_state_saved_at_an_epoch_boundary_loses_nothing(ferry, small_tree, daemons, shared):
    # Arrival order with two workers: the next epoch's batches arrive while this one
    # ends. A rank ends its epoch exactly; a shared job's consumer looks one batch ahead,
    # and its saved state must give that batch back.
    kw = dict(data=small_tree, pipeline=U8, batch_size=10, epochs=2, dispatcher=daemons.dispatcher,
              job_name="boundary-%s" % shared, batches_per_split=1)
    if shared:
        kw["consumer_id"] = "trainer"
    first = ferry.Loader(**kw)
    epoch0 = [i for _ in first for i in first.last_batch_info()["indices"].tolist()]
    assert sorted(epoch0) == list(range(N))
    state = first.state_dict()
    first.close()
    second = ferry.Loader(**kw)
    second.load_state_dict(state)
    epoch1 = [i for _ in second for i in second.last_batch_info()["indices"].tolist()]
    assert sorted(epoch1) == list(range(N)), "epoch 1 after a resume at the boundary: %d samples" % len(epoch1)
    assert list(second) == []


def test_a_restarted_rank_without_its_state_is_refused(ferry, small_tree, daemons):
    kw = dict(data=small_tree, pipeline=U8, batch_size=10, epochs=1, dispatcher=daemons.dispatcher,
              job_name="restart", rank=0, world_size=2, drop_last=True, batches_per_split=1)
    first = ferry.Loader(**kw)
    it = iter(first)
    for _ in range(3):
        next(it)
    state = first.state_dict()
    del it
    first.close()
    with pytest.raises(ferry.FerryError, match="load_state_dict"):
        list(ferry.Loader(**kw))
    resumed = ferry.Loader(**kw)
    resumed.load_state_dict(state)
    assert len(list(resumed)) == len(resumed) - 3


def run_then_stop(make, world, steps):
    """Each of `world` ranks reads `steps` batches and saves its state: (states, indices seen)."""
    states, seen, errors = [None] * world, [], []

    def rank(r):
        try:
            loader = make(r)
            it = iter(loader)
            mine = []
            for _ in range(steps):
                next(it)
                mine += [i for i in loader.last_batch_info()["indices"].tolist() if i >= 0]
            states[r] = loader.state_dict()
            seen.extend(mine)
            del it
            loader.close()
        except Exception as e:
            errors.append((r, e))

    on_threads(rank, world, errors)
    return states, seen


@pytest.mark.parametrize("mode", ["local", "dispatcher"])
@pytest.mark.parametrize("old_world,new_world", [(4, 2), (2, 4)])
def test_elastic_resume(ferry, small_tree, daemons, mode, old_world, new_world):
    kw = dict(data=small_tree, pipeline=U8, batch_size=5, epochs=2, drop_last=False, batches_per_split=2)
    if mode == "local":
        kw["threads"] = 1
    else:
        kw.update(dispatcher=daemons.dispatcher, job_name="elastic-%d-%d" % (old_world, new_world))
    states, before = run_then_stop(lambda r: ferry.Loader(rank=r, world_size=old_world, **kw), old_world, 3)
    assert len(before) == old_world * 3 * 5

    def make(r):
        loader = ferry.Loader(rank=r, world_size=new_world, **kw)
        loader.load_state_dict(states)  # every old rank's state
        assert loader.epoch == 0
        return loader
    out = run_ranks(make, new_world, 2)
    rest = N - len(before)
    want = -(-rest // (new_world * 5))
    assert [o[1][0][0] for o in out] == [want] * new_world, "equal steps for the rest of epoch 0"
    epoch0 = sorted(before + [i for o in out for i in o[1][0][1]])
    assert epoch0 == list(range(N)), "before + after: epoch 0 exactly once"
    full = -(-N // (new_world * 5))
    assert [o[1][1][0] for o in out] == [full] * new_world
    assert sorted(i for o in out for i in o[1][1][1]) == list(range(N)), "epoch 1 whole"


def test_elastic_resume_refuses_an_incomplete_list(ferry, small_tree):
    kw = dict(data=small_tree, pipeline=U8, batch_size=5, threads=1, drop_last=False)
    states, _ = run_then_stop(lambda r: ferry.Loader(rank=r, world_size=3, **kw), 3, 1)
    loader = ferry.Loader(rank=0, world_size=2, **kw)
    with pytest.raises(ValueError, match="every rank's state once"):
        loader.load_state_dict(states[:2])
    with pytest.raises(ValueError, match="give the list of every rank's states"):
        loader.load_state_dict(states[0])
