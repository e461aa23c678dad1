"""The guarantees hold for datasets with targets (issue 23) as for ImageFolder: an exact
mid-epoch resume, ranks with equal steps that split each epoch between them, and
refill around a corrupt image, each with every box still bounding its colour's pixels
(test_detection's painted COCO photos and rule)."""
import os

import torch

from test_detection import TARGETS, check_targets, make_coco

PIPELINE = {"ops": [{"op": "random_resized_crop", "size": 160, "scale": [0.4, 1.0]}, {"op": "hflip"}]}


def rows(loader):
    """Every real row of one pass: (image, its targets)."""
    out = []
    for images, targets in loader:
        for img, t in zip(images, targets):
            if t["image_id"] >= 0:
                out.append((img.clone(), {k: (v.clone() if torch.is_tensor(v) else v) for k, v in t.items()}))
    return out


def same(a, b):
    return len(a) == len(b) and all(
        torch.equal(x, y) and tx["image_id"] == ty["image_id"] and torch.equal(tx["boxes"], ty["boxes"]) and
        torch.equal(tx["labels"], ty["labels"]) and torch.equal(tx["masks"], ty["masks"])
        for (x, tx), (y, ty) in zip(a, b))


def test_an_interrupted_epoch_resumes_exactly(ferry, sample_data, tmp_path):
    data, ids = make_coco(sample_data, str(tmp_path), n=8)

    def make():
        return ferry.Loader(data=data, pipeline=PIPELINE, batch_size=3, seed=21, epochs=2, threads=2,
                            drop_last=False, targets=TARGETS)
    uninterrupted = make()
    whole = rows(uninterrupted) + rows(uninterrupted)
    first = make()
    got = []
    it = iter(first)
    for _ in range(2):  # two of the epoch's three batches, then a checkpoint
        images, targets = next(it)
        got += [(img.clone(), t) for img, t in zip(images, targets)]
    state = first.state_dict()
    del it, first
    second = make()
    second.load_state_dict(state)
    got += rows(second) + rows(second)
    assert same(got, whole), "the resumed run differs from the uninterrupted one"
    for img, t in got:
        check_targets(img, t, "image %d" % t["image_id"])


def test_ranks_take_equal_steps_and_split_each_epoch(ferry, sample_data, tmp_path):
    data, ids = make_coco(sample_data, str(tmp_path), n=8)
    seen, steps = [], []
    for rank in range(2):
        loader = ferry.Loader(data=data, pipeline=PIPELINE, batch_size=2, seed=5, epochs=1, rank=rank, world_size=2,
                              targets=TARGETS)
        batches = list(loader)
        steps.append(len(batches))
        for images, targets in batches:
            for img, t in zip(images, targets):
                seen.append(t["image_id"])
                check_targets(img, t, "rank %d image %d" % (rank, t["image_id"]))
    assert steps[0] == steps[1] == 2
    assert sorted(seen) == sorted(ids)


def test_refill_replaces_a_corrupt_image_and_its_targets_follow(ferry, sample_data, tmp_path):
    data, ids = make_coco(sample_data, str(tmp_path), n=7)
    bad = os.path.join(data["images"], "img_03.jpg")
    with open(bad, "r+b") as f:
        f.truncate(300)  # a JPEG cut short
    loader = ferry.Loader(data=data, pipeline=PIPELINE, batch_size=3, seed=2, epochs=1, drop_last=False,
                          bad_samples="refill", targets=TARGETS)
    got = []
    for images, targets in loader:
        assert images.shape[0] == len(targets)
        for img, t in zip(images, targets):
            got.append(t["image_id"])
            check_targets(img, t, "image %d" % t["image_id"])
    assert sorted(got) == sorted(i for i in ids if i != ids[3]), got
    assert any("img_03.jpg" in str(path) for _, path, _ in loader.skipped()), loader.skipped()
