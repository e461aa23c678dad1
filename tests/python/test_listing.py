"""Ferry's ImageFolder listing must equal torchvision.datasets.ImageFolder's:
the same samples, in the same order, with the same labels."""
import os
import subprocess

import pytest
from torchvision.datasets import ImageFolder


def ferry_listing(ferry_bench, root):
    out = subprocess.run([ferry_bench, "list", "--data", root], check=True,
                         capture_output=True, text=True)
    rows = []
    for line in out.stdout.splitlines():
        idx, label, path = line.split("\t", 2)
        rows.append((os.path.normpath(path), int(label)))
    return rows, out.stderr


def torchvision_listing(root):
    ds = ImageFolder(root, loader=lambda p: p)
    return [(os.path.normpath(p), int(c)) for p, c in ds.samples], ds.classes


def test_sample_dataset_matches_torchvision(ferry_bench, sample_data):
    ours, _ = ferry_listing(ferry_bench, sample_data)
    theirs, _ = torchvision_listing(sample_data)
    assert len(ours) == len(theirs) > 1000
    assert ours == theirs


def _touch(path, data=b"\xff\xd8\xff\xd9"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


def test_tricky_tree_matches_torchvision(ferry_bench, tmp_path):
    root = str(tmp_path / "root")
    files = [
        "b_class/z.jpg", "b_class/A.JPG", "b_class/a.jpeg", "b_class/m.Png",
        "b_class/sub/x.webp", "b_class/sub-dir/y.bmp", "b_class/sub/deeper/k.tif",
        "a_class/1.ppm", "a_class/10.pgm", "a_class/2.tiff",
        "C_upper/only.jpg", "a_class/notes.txt", "a_class/archive.tar", "b_class/.hidden.jpg",
        "é_class/ü.jpg",
    ]
    for f in files:
        _touch(os.path.join(root, f))
    os.makedirs(os.path.join(root, "b_class", "folder.jpg"))  # a directory named like an image
    _touch(os.path.join(root, "b_class", "folder.jpg", "inner.png"))
    os.symlink("/nonexistent/target.jpg", os.path.join(root, "a_class", "dangling.jpg"))

    ours, stderr = ferry_listing(ferry_bench, root)
    theirs, classes = torchvision_listing(root)
    assert ours == theirs
    assert "folder.jpg" in stderr and "directory" in stderr


def test_one_epoch_of_the_sample_set_delivers_everything(ferry_bench, sample_data, tmp_path):
    errors = tmp_path / "errors.tsv"
    out = subprocess.run([ferry_bench, "pipeline", "--data", sample_data, "--epochs", "1",
                          "--errors", str(errors), "--threads", "2", "--batch-size", "64"],
                         check=True, capture_output=True, text=True)
    last = out.stdout.strip().splitlines()[-1]
    n = len(torchvision_listing(sample_data)[0])
    assert last == f"samples={n} skipped=0"
    assert errors.read_text() == ""
