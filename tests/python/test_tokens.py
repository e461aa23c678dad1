"""Captions tokenized on the workers with SentencePiece (issue 23): targets=("tokens",).

A model is trained here, with the Python sentencepiece package, on the shards' own
captions. Each image carries its sample number in its pixels (test_captions' code),
and every row's tokens must be the package's ids for that sample's caption, cut or
padded to the job's length: in process, and through a dispatcher with two workers,
each sample once per epoch.
"""
import io
import json
import os
import tarfile

import numpy as np
import pytest
from PIL import Image

spm = pytest.importorskip("sentencepiece")

from test_captions import CELL, _add, _photos, read_code  # noqa: E402

PIPELINE = {"ops": [{"op": "resize", "size": [64, 64]}]}
WORDS = ["a", "dog", "cat", "on", "the", "sofa", "red", "car", "near", "café", "naïve", "river", "running",
         "under", "blue", "sky", "two", "birds", "über", "straße"]
LENGTH = 10


def caption(n):
    rng = np.random.RandomState(n)
    k = 1 if n % 7 == 0 else rng.randint(2, 14)  # some short (padded), some long (cut)
    return " ".join(WORDS[i] for i in rng.randint(0, len(WORDS), size=k)) + ("\n" if n % 3 == 0 else "")


def make_shards(sample_data, root, shards=3, per_shard=8):
    photos = _photos(sample_data)
    n = 0
    for s in range(shards):
        with tarfile.open(os.path.join(root, "tok-%03d.tar" % s), "w") as tar:
            for _ in range(per_shard):
                px = np.array(Image.open(photos[n % len(photos)]).convert("RGB").resize((128, 128)))
                for bit in range(16):
                    y, x = divmod(bit, 4)
                    px[y * CELL:(y + 1) * CELL, x * CELL:(x + 1) * CELL] = 255 if (n >> bit) & 1 else 0
                buf = io.BytesIO()
                Image.fromarray(px).save(buf, format="JPEG", quality=95)
                _add(tar, "t%05d.jpg" % n, buf.getvalue())
                _add(tar, "t%05d.txt" % n, caption(n).encode())
                _add(tar, "t%05d.json" % n, json.dumps({"i": n}).encode())
                n += 1
    return n


def train_model(root, total):
    corpus = os.path.join(root, "corpus.txt")
    with open(corpus, "w") as f:
        for n in range(total):
            f.write(caption(n).strip() + "\n")
        f.write(" ".join(WORDS) + "\n")
    prefix = os.path.join(root, "spm")
    spm.SentencePieceTrainer.train(input=corpus, model_prefix=prefix, vocab_size=60, model_type="bpe",
                                   unk_id=0, bos_id=1, eos_id=2, pad_id=3, minloglevel=2)
    return prefix + ".model"


def expected(sp, text, bos, eos):
    ids = sp.encode(text, add_bos=bos, add_eos=eos)[:LENGTH]
    return ids + [sp.pad_id()] * (LENGTH - len(ids)), len(ids)


def check_rows(sp, images, targets, seen, bos=True, eos=True):
    for img, t in zip(images, targets):
        n = read_code(img)
        assert t["text"] == caption(n)
        ids, length = expected(sp, caption(n), bos, eos)
        assert t["tokens"].dtype.is_floating_point is False and str(t["tokens"].dtype) == "torch.int32"
        assert t["tokens"].tolist() == ids, (n, caption(n), t["tokens"].tolist(), ids)
        assert t["tokens_length"] == length
        seen.append(n)


@pytest.fixture
def shards(sample_data, tmp_path):
    total = make_shards(sample_data, str(tmp_path))
    return str(tmp_path / "tok-{000..002}.tar"), total, train_model(str(tmp_path), total)


def test_tokens_match_the_python_package_in_process(ferry, shards):
    data, total, model = shards
    sp = spm.SentencePieceProcessor(model_file=model)
    assert any(len(sp.encode(caption(n))) + 2 > LENGTH for n in range(total))  # some are cut
    assert any(len(sp.encode(caption(n))) + 2 < LENGTH for n in range(total))  # some are padded
    for bos, eos in ((True, True), (False, False)):
        loader = ferry.Loader(data=data, pipeline=PIPELINE, batch_size=5, epochs=1, threads=2, drop_last=False,
                              targets=("text", "tokens"),
                              tokenizer={"model": model, "length": LENGTH, "add_bos": bos, "add_eos": eos})
        seen = []
        for images, targets in loader:
            check_rows(sp, images, targets, seen, bos, eos)
        assert sorted(seen) == list(range(total))


def test_padded_form_and_pad_id(ferry, shards):
    data, total, model = shards
    sp = spm.SentencePieceProcessor(model_file=model)
    loader = ferry.Loader(data=data, pipeline=PIPELINE, batch_size=8, epochs=1, drop_last=False,
                          targets=("tokens",), targets_format="padded", tokenizer={"model": model, "length": LENGTH,
                                                                                   "pad_id": 59})
    rows = 0
    for images, t in loader:
        assert t["tokens"].shape == (images.shape[0], LENGTH) and str(t["tokens"].dtype) == "torch.int32"
        for r in range(images.shape[0]):
            ids = sp.encode(caption(read_code(images[r])))[:LENGTH]
            assert int(t["tokens_length"][r]) == len(ids)
            assert t["tokens"][r].tolist() == ids + [59] * (LENGTH - len(ids))
            rows += 1
    assert rows == total


def test_tokens_through_a_dispatcher_with_two_workers(ferry, shards, daemons):
    data, total, model = shards
    sp = spm.SentencePieceProcessor(model_file=model)
    loader = ferry.Loader(data=data, pipeline=PIPELINE, batch_size=3, epochs=2, dispatcher=daemons.dispatcher,
                          job_name="tokens", drop_last=False, targets=("text", "tokens"), batches_per_split=1,
                          tokenizer={"model": model, "length": LENGTH, "add_bos": True, "add_eos": True})
    for epoch in range(2):
        seen = []
        for images, targets in loader:
            check_rows(sp, images, targets, seen)
        assert sorted(seen) == list(range(total)), epoch


def test_bad_tokenizers_are_refused_by_name(ferry, shards, tmp_path):
    data, _, model = shards
    with pytest.raises(ValueError, match="tokenizer"):
        ferry.Loader(data=data, batch_size=4, targets=("tokens",))
    with pytest.raises(ValueError, match="tokenizer"):
        ferry.Loader(data=data, batch_size=4, targets=("text",), tokenizer={"model": model, "length": 4})
    not_a_model = tmp_path / "not.model"
    not_a_model.write_bytes(b"\x0a\x05hello" * 10)
    for bad, why in ((str(tmp_path / "missing.model"), "missing.model"), (str(not_a_model), "not a SentencePiece")):
        with pytest.raises(Exception, match=why):
            next(iter(ferry.Loader(data=data, pipeline=PIPELINE, batch_size=4, targets=("tokens",),
                                   tokenizer={"model": bad, "length": 4})))
    with pytest.raises(Exception, match="length"):
        next(iter(ferry.Loader(data=data, pipeline=PIPELINE, batch_size=4, targets=("tokens",),
                               tokenizer={"model": model, "length": 0})))
