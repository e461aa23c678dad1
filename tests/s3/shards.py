"""WebDataset shards of an ImageFolder tree, for the object-storage tests and benchmark.

Each sample is key.jpg (the file's bytes) and key.cls (its class index), in the tree's
listing order (classes sorted, files sorted within a class), the key being
"<class>_<file stem>": the same samples, order and labels as the tree read as an
ImageFolder.
"""
import io
import os
import tarfile


def tree_samples(tree):
    classes = sorted(c for c in os.listdir(tree) if os.path.isdir(os.path.join(tree, c)))
    return classes, [(c, f) for c in classes for f in sorted(os.listdir(os.path.join(tree, c)))]


def write_shards(tree, root, per_shard=None, shards=None):
    """Writes root/shard-000.tar ... with `per_shard` samples each (or split into
    `shards` shards); returns the shard file names in order."""
    os.makedirs(root, exist_ok=True)
    classes, samples = tree_samples(tree)
    if per_shard is None:
        per_shard = (len(samples) + shards - 1) // shards
    names = []
    for s in range(0, len(samples), per_shard):
        name = "shard-%03d.tar" % (s // per_shard)
        names.append(name)
        with tarfile.open(os.path.join(root, name), "w") as tar:
            for c, f in samples[s:s + per_shard]:
                key = "%s_%s" % (c, f.split(".")[0])
                tar.add(os.path.join(tree, c, f), arcname=key + ".jpg")
                label = str(classes.index(c)).encode()
                info = tarfile.TarInfo(key + ".cls")
                info.size = len(label)
                tar.addfile(info, io.BytesIO(label))
    return names
