"""Image-text data from WebDataset shards (issue 23): .jpg + .txt + .json samples.

Each image is a real photograph with its sample number painted in as a 4 x 4 grid of
black and white cells (16 bits), and its caption and JSON name the same number: after
the pipeline, the number read back from the pixels must be the one in the caption and
in the JSON, and every sample must come once per epoch, in process (shards named by a
brace pattern) and through a dispatcher with two workers, one of them killed mid-epoch.
"""
import io
import json
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

PIPELINE = {"ops": [{"op": "resize", "size": [64, 64]}]}
CELL = 12  # pixels of a code cell in the 128 x 128 source


def _photos(sample_data):
    out = []
    for c in sorted(os.listdir(sample_data)):
        d = os.path.join(sample_data, c)
        if os.path.isdir(d):
            out += [os.path.join(d, f) for f in sorted(os.listdir(d))[:2]]
    return out


def _add(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def make_shards(sample_data, root, shards=3, per_shard=8):
    photos = _photos(sample_data)
    n = 0
    for s in range(shards):
        with tarfile.open(os.path.join(root, "shard-%03d.tar" % s), "w") as tar:
            for _ in range(per_shard):
                img = Image.open(photos[n % len(photos)]).convert("RGB").resize((128, 128))
                px = np.array(img)
                for bit in range(16):
                    y, x = divmod(bit, 4)
                    px[y * CELL:(y + 1) * CELL, x * CELL:(x + 1) * CELL] = 255 if (n >> bit) & 1 else 0
                buf = io.BytesIO()
                Image.fromarray(px).save(buf, format="JPEG", quality=95)
                key = "s%05d" % n
                _add(tar, key + ".jpg", buf.getvalue())
                _add(tar, key + ".txt", ("sample %d, a photograph" % n).encode())
                _add(tar, key + ".json", json.dumps({"i": n, "photo": os.path.basename(photos[n % len(photos)])}).encode())
                n += 1
    return n


def read_code(image):
    """The number painted into a 64 x 64 output (cells of 6 pixels)."""
    img = image.numpy().astype(np.int32).mean(axis=2)
    c = CELL // 2
    n = 0
    for bit in range(16):
        y, x = divmod(bit, 4)
        if img[y * c + c // 2, x * c + c // 2] > 127:
            n |= 1 << bit
    return n


def check(images, targets, seen):
    assert len(targets) == images.shape[0]
    for img, t in zip(images, targets):
        n = read_code(img)
        assert t["text"] == "sample %d, a photograph" % n, (n, t["text"])
        assert t["meta"]["i"] == n, (n, t["meta"])
        if "key" in t:
            assert t["key"] == "s%05d" % n, (n, t["key"])  # WebDataset's key of the sample
        seen.append(n)


def test_captions_arrive_with_their_images_in_process(ferry, sample_data, tmp_path):
    total = make_shards(sample_data, str(tmp_path))
    loader = ferry.Loader(data=str(tmp_path / "shard-{000..002}.tar"), pipeline=PIPELINE, batch_size=5, epochs=2,
                          threads=2, drop_last=False, targets=("text", "meta", "key"))
    for epoch in range(2):
        seen = []
        for images, targets in loader:
            check(images, targets, seen)
        assert sorted(seen) == list(range(total)), epoch


def test_captions_through_a_dispatcher_with_a_worker_killed_mid_epoch(ferry, sample_data, tmp_path, daemons):
    root = tmp_path / "shards"
    root.mkdir()
    total = make_shards(sample_data, str(root))
    loader = ferry.Loader(data=str(root), pipeline=PIPELINE, batch_size=2, epochs=2, dispatcher=daemons.dispatcher,
                          job_name="captions", drop_last=False, targets=("text", "meta"), batches_per_split=1,
                          prefetch=1)
    for epoch in range(2):
        seen = []
        for k, (images, targets) in enumerate(loader):
            check(images, targets, seen)
            if epoch == 0 and k == 2:
                daemons.kill_worker(0)
        assert sorted(seen) == list(range(total)), "epoch %d: %s" % (epoch, sorted(seen))


def test_any_dataset_gives_its_keys(ferry, small_tree):
    """targets=("key",) needs no annotations: an ImageFolder's keys are its files' paths
    without their extensions, each row its own."""
    import os
    paths = [p for p, _ in zip(*ferry.list_dataset(small_tree)[:2])]
    loader = ferry.Loader(data=small_tree, pipeline=PIPELINE, batch_size=7, epochs=1, shuffle=False, drop_last=False,
                          targets=("key",))
    keys = [t["key"] for _, targets in loader for t in targets]
    assert keys == [os.path.splitext(p)[0] for p in paths]


def test_a_caption_job_may_use_any_pipeline(ferry, sample_data, tmp_path):
    """Captions do not move: a pipeline that could not carry boxes (rand_augment) is fine."""
    make_shards(sample_data, str(tmp_path), shards=1, per_shard=4)
    loader = ferry.Loader(data=str(tmp_path / "shard-000.tar"), batch_size=4, epochs=1, targets=("text",),
                          pipeline={"ops": [{"op": "rand_augment"}, {"op": "resize", "size": [32, 32]}]})
    (images, targets), = list(loader)
    assert sorted(t["text"] for t in targets) == ["sample %d, a photograph" % i for i in range(4)]
    with pytest.raises(Exception, match="rand_augment"):
        next(iter(ferry.Loader(data=str(tmp_path / "shard-000.tar"), batch_size=4, epochs=1, targets=("boxes",),
                               pipeline={"ops": [{"op": "rand_augment"}, {"op": "resize", "size": [32, 32]}]})))
