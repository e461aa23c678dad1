"""bad_samples="refill" with real processes: a ferry-dispatcher and two ferry-workers
(and one worker point to point) serve an ImageFolder of real JPEGs where a tenth of the
files are corrupt. Each batch holds its split's next good samples, so batches are full
but the last of each split; every good sample arrives exactly once and every bad one is
reported once; the batches are the same in-process, point to point and through the
dispatcher (deterministic order); and a dispatcher loader's state saved mid-epoch
resumes into exactly the rest of the run."""
import os
import shutil

import pytest

SMALL_U8 = {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 24}, {"op": "hflip", "p": 0.5}],
            "output": {"dtype": "uint8", "layout": "NHWC"}}
BATCH, PER_SPLIT = 8, 3


@pytest.fixture(scope="module")
def hostile_tree(small_tree, tmp_path_factory):
    """small_tree (120 real JPEGs) with 13 of them corrupt: a run of 8 in listing
    order (a whole batch's worth) and 5 spread out. Returns (root, bad paths)."""
    root = tmp_path_factory.mktemp("refill") / "tree"
    shutil.copytree(small_tree, root)
    files = sorted(os.path.join(dp, f) for dp, _, fs in os.walk(root) for f in fs)
    bad = files[20:28] + files[50:110:12]
    for i, path in enumerate(bad):
        with open(path, "wb") as f:
            f.write(b"\xff\xd8\xff\xe0" + bytes((i * 37 + k) % 251 for k in range(3000)) + b"\xff\xd9")
    return str(root), set(bad)


def read(loader):
    """One epoch: [(indices of the valid rows, split, batch_in_split, batch_in_epoch)], skips."""
    out = []
    for _, _ in loader:
        info = loader.last_batch_info()
        out.append((info["indices"][:info["valid"]].tolist(), info["split"], info["batch_in_split"],
                    info["batch_in_epoch"]))
    return out, loader.skipped()


def check_epoch(batches, skipped, n_files, bad, split_of):
    got = [i for b in batches for i in b[0]]
    assert len(got) == len(set(got)), "a sample arrived twice"
    assert len(got) == n_files - len(bad)
    assert sorted(p for _, p, _ in skipped) == sorted(bad), "each bad file reported once"
    # Full but the last holding samples of each split.
    by_split = {}
    for b in batches:
        by_split.setdefault(split_of(b), []).append(b)
    for split, bs in by_split.items():
        bs.sort(key=lambda b: b[3])
        sizes = [len(b[0]) for b in bs if b[0]]
        assert all(s == BATCH for s in sizes[:-1]), (split, sizes)
    return got


def make(ferry, root, **kw):
    return ferry.Loader(data=root, pipeline=SMALL_U8, batch_size=BATCH, seed=3, drop_last=False, threads=2,
                        batches_per_split=PER_SPLIT, bad_samples="refill", **kw)


def test_refill_policy_is_checked(ferry, small_tree):
    with pytest.raises(ValueError, match="bad_samples"):
        ferry.Loader(data=small_tree, batch_size=4, bad_samples="repeat")


def test_refill_local_point_to_point_and_dispatcher_agree(ferry, hostile_tree, daemons):
    root, bad = hostile_tree
    n = 120
    local, local_skipped = read(make(ferry, root))
    # In-process, the refill group is batches_per_split batches of the epoch.
    check_epoch(local, local_skipped, n, bad, lambda b: b[3] // PER_SPLIT)
    # Without refill, the same epoch has short batches in the middle of its splits.
    skip = [len(b[0]) for b in read(ferry.Loader(data=root, pipeline=SMALL_U8, batch_size=BATCH, seed=3,
                                                 drop_last=False, threads=2))[0]]
    assert any(s < BATCH for i, s in enumerate(skip[:-1]) if (i + 1) % PER_SPLIT), skip

    through = make(ferry, root, dispatcher=daemons.dispatcher, job_name="refill", deterministic=True)
    remote, remote_skipped = read(through)
    check_epoch(remote, remote_skipped, n, bad, lambda b: b[1])
    assert [b[0] for b in remote if b[0]] == [b[0] for b in local if b[0]], \
        "the dispatcher's batches are the in-process ones"

    p2p, p2p_skipped = read(make(ferry, root, workers=[daemons.workers[0]]))
    assert [b[0] for b in p2p if b[0]] == [b[0] for b in local if b[0]], "point to point too"
    assert sorted(p for _, p, _ in p2p_skipped) == sorted(bad)


def test_refill_resumes_mid_epoch_through_a_dispatcher(ferry, hostile_tree, daemons):
    root, bad = hostile_tree
    whole, _ = read(make(ferry, root, dispatcher=daemons.dispatcher, job_name="whole", deterministic=True))
    first = make(ferry, root, dispatcher=daemons.dispatcher, job_name="parts", deterministic=True)
    it = iter(first)
    got = []
    for _ in range(4):  # into the middle of the second split
        next(it)
        got.append(first.last_batch_info()["indices"][:first.last_batch_info()["valid"]].tolist())
    state = first.state_dict()
    assert state["bad_samples"] == "refill"
    del it
    first.close()
    second = make(ferry, root, dispatcher=daemons.dispatcher, job_name="parts", deterministic=True)
    second.load_state_dict(state)
    rest, _ = read(second)
    got += [b[0] for b in rest]
    assert [b for b in got if b] == [b[0] for b in whole if b[0]]
    # A state of the other policy is refused, clearly.
    other = ferry.Loader(data=root, pipeline=SMALL_U8, batch_size=BATCH, seed=3, drop_last=False,
                         batches_per_split=PER_SPLIT, dispatcher=daemons.dispatcher, job_name="parts",
                         deterministic=True)
    with pytest.raises(ValueError, match="bad_samples"):
        other.load_state_dict(state)


def test_refill_is_exact_through_a_killed_worker(ferry, hostile_tree, daemons):
    """A worker killed mid-epoch: its splits are made again, from their start, by the
    other; the batches are still the in-process ones, each good sample once."""
    root, bad = hostile_tree
    local, _ = read(make(ferry, root))
    loader = make(ferry, root, dispatcher=daemons.dispatcher, job_name="killed", deterministic=True, prefetch=1)
    got = []
    for k, _ in enumerate(loader):
        info = loader.last_batch_info()
        got.append(info["indices"][:info["valid"]].tolist())
        if k == 3:
            daemons.kill_worker(0)
    assert [b for b in got if b] == [b[0] for b in local if b[0]]


def test_refill_batches_emptied_by_a_run_of_bad_files(ferry, hostile_tree, daemons):
    """In listing order with batches of 2, the run of 8 bad files empties whole batches
    in the middle of splits: they go out with no rows (the batch count holds), and the
    good samples are still each once, the same through the dispatcher as in-process."""
    root, bad = hostile_tree
    kw = dict(data=root, pipeline=SMALL_U8, batch_size=2, seed=3, shuffle=False, drop_last=False,
              batches_per_split=PER_SPLIT, bad_samples="refill")
    local, _ = read(ferry.Loader(threads=2, **kw))
    remote, skipped = read(ferry.Loader(dispatcher=daemons.dispatcher, job_name="emptied", deterministic=True, **kw))
    assert [b[0] for b in remote if b[0]] == [b[0] for b in local if b[0]]
    # Batches 10 and 13 are emptied mid-split (the client yields no empty batch, but the
    # epoch ends only once every batch of every split has arrived, those included).
    assert [b[3] for b in local].count(10) == 0 and 9 in [b[3] for b in local]
    got = [i for b in remote for i in b[0]]
    assert len(got) == len(set(got)) == 120 - len(bad)
    assert sorted(p for _, p, _ in skipped) == sorted(bad)
