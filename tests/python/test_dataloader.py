"""ferry.DataLoader as a drop-in for torch.utils.data.DataLoader: it reads what
dataset.samples names (ImageFolder, Subset), takes a DistributedSampler's rank, world
size, seed and shuffle and follows its set_epoch(), translates the transform faithfully
or raises naming what it cannot honour, and sizes its threads to the rank's CPUs."""
import os

import pytest
import torch
import torchvision.transforms as T
from torch.utils.data import DistributedSampler, RandomSampler, SequentialSampler, Subset, WeightedRandomSampler
from torchvision.datasets import ImageFolder

SMALL = T.Compose([T.Resize(40), T.CenterCrop(32), T.ToTensor()])


def labels_and_indices(loader):
    out = []
    for _, y in loader:
        out.append((y.tolist(), loader.last_batch_info()["indices"].tolist()))
    return out


def test_an_image_folder_is_read_from_its_root(ferry, small_tree):
    ds = ImageFolder(small_tree, transform=SMALL)
    loader = ferry.DataLoader(ds, batch_size=8, threads=1)
    assert loader.data == small_tree and len(loader) == 15


def test_a_subset_reads_its_samples_in_its_order(ferry, small_tree, tmp_path, monkeypatch):
    monkeypatch.setenv("FERRY_LIST_DIR", str(tmp_path))
    ds = ImageFolder(small_tree, transform=SMALL)
    picks = list(range(119, 0, -3))  # 40 samples, backwards
    sub = Subset(ds, picks)
    loader = ferry.DataLoader(sub, batch_size=8, threads=1)
    assert loader.data.endswith(".tsv") and os.path.dirname(loader.data) == str(tmp_path)
    assert len(loader) == 5
    got = [(y, i) for ys, ids in labels_and_indices(loader) for y, i in zip(ys, ids)]
    assert [i for _, i in got] == list(range(40))  # indices into the Subset, as Subset[i] counts
    assert [y for y, _ in got] == [ds.samples[p][1] for p in picks]
    # The same images as torchvision's pipeline would give for those samples (the
    # resize is Ferry's: close, not bit-equal).
    x, _ = next(iter(ferry.DataLoader(sub, batch_size=4, threads=1)))
    want = torch.stack([sub[i][0] for i in range(4)])
    assert x.shape == want.shape == (4, 3, 32, 32) and (x - want).abs().mean() < 0.03
    # A Subset of a Subset, and the same listing again: the same file.
    again = ferry.DataLoader(Subset(Subset(ds, list(range(120))), picks), batch_size=8, threads=1)
    assert again.data == loader.data


def test_a_distributed_sampler_gives_rank_world_seed_and_shuffle(ferry, small_tree):
    ds = ImageFolder(small_tree, transform=SMALL)
    seen = []
    for r in range(3):
        sampler = DistributedSampler(ds, num_replicas=3, rank=r, shuffle=True, seed=7)
        loader = ferry.DataLoader(ds, batch_size=8, sampler=sampler, drop_last=True, threads=1, epochs=2)
        assert (loader.rank, loader.world_size, loader.seed, loader.shuffle) == (r, 3, 7, True)
        assert len(loader) == 5  # 120 // (3 x 8)
        epochs = []
        for e in range(2):
            sampler.set_epoch(e)
            epochs.append([i for _, ids in labels_and_indices(loader) for i in ids])
            assert len(epochs[-1]) == 40
        seen.append(epochs)
    for e in range(2):
        union = sorted(i for r in range(3) for i in seen[r][e])
        assert union == list(range(120)), "epoch %d: the ranks' shares are the epoch once" % e
    assert seen[0][0] != seen[0][1], "set_epoch gives another order"


def test_without_a_distributed_sampler_every_process_reads_the_whole_dataset(ferry, small_tree, monkeypatch):
    """As torch's DataLoader: inside a DDP job (RANK/WORLD_SIZE, as torchrun sets them)
    only a DistributedSampler, or rank=/world_size=, shards; a loader without one (an
    evaluation on rank 0 alone) reads every sample, with seed=None and no collective."""
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    ds = ImageFolder(small_tree, transform=SMALL)
    for sampler in (None, SequentialSampler(ds), RandomSampler(ds)):
        loader = ferry.DataLoader(ds, batch_size=8, sampler=sampler, threads=1, epochs=1)
        assert (loader.rank, loader.world_size) == (0, 1) and len(loader) == 15
        indices = sorted(i for _, ids in labels_and_indices(loader) for i in ids)
        assert indices == list(range(120)), sampler
    sharded = ferry.DataLoader(ds, batch_size=8, sampler=DistributedSampler(ds, num_replicas=2, rank=1, seed=3),
                               threads=1)
    assert (sharded.rank, sharded.world_size) == (1, 2) and len(sharded) == 8
    explicit = ferry.DataLoader(ds, batch_size=8, rank=1, world_size=2, seed=3, threads=1)
    assert (explicit.rank, explicit.world_size) == (1, 2)


def test_a_dataset_whose_root_does_not_list_reads_its_samples_natively(ferry, small_tree, tmp_path, monkeypatch):
    """An ImageFolder-like dataset whose root Ferry cannot list (gone, moved, a file):
    its samples are read from a list of them, natively, not the dataset whole in Python."""
    monkeypatch.setenv("FERRY_LIST_DIR", str(tmp_path))
    ds = ImageFolder(small_tree, transform=SMALL)
    ds.root = str(tmp_path / "no-such-root")
    loader = ferry.DataLoader(ds, batch_size=8, threads=1, epochs=1)
    assert loader.placement_note is None and loader.data.endswith(".tsv"), loader.placement_note
    assert sorted(i for _, ids in labels_and_indices(loader) for i in ids) == list(range(120))


def test_set_epoch_skips_ahead_at_a_boundary_and_refuses_to_go_back(ferry, small_tree):
    ds = ImageFolder(small_tree, transform=SMALL)
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=3)
    a = ferry.DataLoader(ds, batch_size=8, sampler=sampler, threads=1)
    sampler.set_epoch(2)
    first = labels_and_indices(a)
    assert a.epoch == 3
    b = ferry.DataLoader(ds, batch_size=8, shuffle=True, seed=3, threads=1, epochs=3)
    want = [labels_and_indices(b) for _ in range(3)][2]
    assert first == want, "set_epoch(2) then a pass is the third epoch of the same run"
    sampler.set_epoch(1)
    with pytest.raises(ValueError, match="set_epoch"):
        iter(a)


def test_a_script_that_caps_its_epochs_steps_moves_on_with_set_epoch(ferry, small_tree):
    """`for i, b in enumerate(loader): if i == steps: break`, then sampler.set_epoch(e + 1),
    as a script with a fixed number of steps an epoch does: the next pass is the next
    epoch, whole, as torch's DataLoader gives it (the rest of the epoch left unread)."""
    ds = ImageFolder(small_tree, transform=SMALL)
    sampler = DistributedSampler(ds, num_replicas=1, rank=0, shuffle=True, seed=4)
    capped = ferry.DataLoader(ds, batch_size=8, sampler=sampler, threads=1)
    full = ferry.DataLoader(ds, batch_size=8, shuffle=True, seed=4, threads=1, epochs=3)
    want = [labels_and_indices(full) for _ in range(3)]
    for epoch in range(3):
        sampler.set_epoch(epoch)
        got = []
        for i, (_, y) in enumerate(capped):
            if i == 4:
                break
            got.append((y.tolist(), capped.last_batch_info()["indices"].tolist()))
        assert got == want[epoch][:4], epoch
    sampler.set_epoch(3)
    assert len(list(capped)) == 15 and capped.epoch == 4


def test_samplers_and_refusals(ferry, small_tree):
    ds = ImageFolder(small_tree, transform=SMALL)
    assert ferry.DataLoader(ds, batch_size=8, sampler=RandomSampler(ds), threads=1).shuffle
    assert not ferry.DataLoader(ds, batch_size=8, sampler=SequentialSampler(ds), threads=1).shuffle
    assert not ferry.DataLoader(ds, batch_size=8, threads=1).shuffle  # as torch: shuffle defaults to False
    with pytest.raises(ValueError, match="WeightedRandomSampler"):
        ferry.DataLoader(ds, batch_size=8, sampler=WeightedRandomSampler([1.0] * 120, 120))
    with pytest.raises(ValueError, match="replacement"):
        ferry.DataLoader(ds, batch_size=8, sampler=RandomSampler(ds, replacement=True))
    with pytest.raises(ValueError, match="mutually exclusive"):
        ferry.DataLoader(ds, batch_size=8, sampler=SequentialSampler(ds), shuffle=True)
    for kw in ({"batch_sampler": object()}, {"worker_init_fn": print}, {"timeout": 5}):
        with pytest.raises(ValueError, match=next(iter(kw))):
            ferry.DataLoader(ds, batch_size=8, **kw)
    other = ImageFolder(small_tree, transform=SMALL)
    with pytest.raises(ValueError, match="another dataset"):
        ferry.DataLoader(ds, batch_size=8, sampler=DistributedSampler(other, num_replicas=2, rank=0))
    # Accepted, as a DataLoader's.
    ferry.DataLoader(ds, batch_size=8, persistent_workers=True, prefetch_factor=4, pin_memory=False,
                     collate_fn=None, threads=1)


@pytest.mark.parametrize("transform,named", [
    (T.Compose([T.RandomResizedCrop(32, interpolation=T.InterpolationMode.LANCZOS), T.ToTensor()]),
     "interpolation=LANCZOS"),
    (T.Compose([T.Resize(40), T.ToTensor()]), "size varies"),
    (T.Compose([T.RandomResizedCrop(32)]), "ToTensor"),
    (T.Compose([T.ToTensor()]), "crop"),
    (T.Compose([T.RandomResizedCrop(32), T.PILToTensor(), T.Normalize([0.5] * 3, [0.5] * 3)]), "Normalize"),
    (T.Compose([T.RandomResizedCrop(32), T.ToTensor(), T.ColorJitter(0.4)]), "float tensor"),
    (T.Compose([T.RandomResizedCrop(32), T.RandomErasing(), T.ToTensor()]), "RandomErasing"),
])
def test_a_transform_it_cannot_honour_is_an_error_naming_it(ferry, small_tree, transform, named):
    with pytest.raises(ValueError, match=named):
        ferry.DataLoader(ImageFolder(small_tree, transform=transform), batch_size=8, threads=1)


def test_no_transform_is_an_error_unless_a_pipeline_is_given(ferry, small_tree):
    with pytest.raises(ValueError, match="no transform"):
        ferry.DataLoader(ImageFolder(small_tree), batch_size=8)
    pipeline = {"decode": "rgb", "ops": [{"op": "center_crop", "size": 32}]}
    x, _ = next(iter(ferry.DataLoader(ImageFolder(small_tree), batch_size=8, pipeline=pipeline, threads=1)))
    assert x.dtype == torch.uint8 and x.shape == (8, 32, 32, 3)


def test_jitter_and_what_it_becomes(ferry):
    spec = ferry.pipeline_from_transform(T.Compose([
        T.RandomResizedCrop(32, scale=(0.5, 1.0)), T.RandomHorizontalFlip(0.3),
        T.ColorJitter(brightness=0.4, contrast=(0.6, 1.4), saturation=0.2, hue=0.1), T.ToTensor(),
        T.Normalize([0.5, 0.4, 0.3], [0.2, 0.2, 0.2])]))
    assert spec["ops"] == [
        {"op": "random_resized_crop", "size": [32, 32], "scale": [0.5, 1.0], "ratio": [3 / 4, 4 / 3],
         "interpolation": "bilinear"},
        {"op": "hflip", "p": 0.3},
        {"op": "color_jitter", "brightness": [0.6, 1.4], "contrast": [0.6, 1.4], "saturation": [0.8, 1.2],
         "hue": [-0.1, 0.1]},
        {"op": "normalize", "mean": [0.5, 0.4, 0.3], "std": [0.2, 0.2, 0.2]}]
    assert spec["output"] == {"dtype": "float32", "layout": "NCHW"}


def test_pil_to_tensor_gives_uint8_chw_as_torchvision(ferry, small_tree):
    u8 = ferry.DataLoader(ImageFolder(small_tree, transform=T.Compose([T.Resize(40), T.CenterCrop(32),
                                                                       T.PILToTensor()])), batch_size=8, threads=1)
    f32 = ferry.DataLoader(ImageFolder(small_tree, transform=SMALL), batch_size=8, threads=1)
    x, _ = next(iter(u8))
    y, _ = next(iter(f32))
    assert x.dtype == torch.uint8 and x.shape == (8, 3, 32, 32)
    assert torch.allclose(x.float() / 255, y, atol=1e-6)
    conv = ferry.pipeline_from_transform(T.Compose([T.CenterCrop(32), T.PILToTensor(),
                                                    T.ConvertImageDtype(torch.float32)]))
    assert conv["output"]["dtype"] == "float32"


def test_threads_follow_the_cpus_and_local_ranks(ferry, monkeypatch):
    cpus = ferry.available_cpus()
    assert 1 <= cpus <= len(os.sched_getaffinity(0))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert ferry.default_threads() == max(1, cpus // 8)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert ferry.default_threads(num_workers=1) == 1
    assert ferry.default_threads(num_workers=10 * cpus) == cpus


def test_seed_none_follows_torch_and_epochs_have_no_limit(ferry, small_tree):
    torch.manual_seed(1234)
    loader = ferry.DataLoader(ImageFolder(small_tree, transform=SMALL), batch_size=40, shuffle=True)
    assert loader.seed == 1234 and loader.epochs is None
    orders = [[i for _, ids in labels_and_indices(loader) for i in ids] for _ in range(3)]
    assert loader.epoch == 3 and all(sorted(o) == list(range(120)) for o in orders)
    assert orders[0] != orders[1] != orders[2]


class Mixup:
    """timm.data.mixup.Mixup's interface (timm is not installed here): what Ferry reads
    of it, and the flag timm's train.py turns off at --mixup-off-epoch."""
    __module__ = "timm.data.mixup"

    def __init__(self, num_classes):
        self.mixup_alpha, self.cutmix_alpha, self.mix_prob, self.switch_prob = 0.8, 1.0, 1.0, 0.5
        self.label_smoothing, self.num_classes, self.mode = 0.1, num_classes, "batch"
        self.cutmix_minmax, self.correct_lam, self.mixup_enabled = None, True, True

    def __call__(self, x, target):
        raise AssertionError("Ferry runs the mixing natively")


@pytest.mark.parametrize("remote", [False, True])
def test_mixup_turned_off_between_epochs_is_followed(ferry, small_tree, daemons, remote):
    """timm's train.py sets mixup_fn.mixup_enabled = False at --mixup-off-epoch: from the
    next epoch the batches are unmixed (the images as without mixing, the targets one-hot
    with label smoothing, as timm's Mixup then gives), where the op was fixed before."""
    ds = ImageFolder(small_tree, transform=SMALL)
    mixup = Mixup(num_classes=3)

    def collate(batch):
        return mixup(*torch.utils.data.default_collate(batch))

    # Remote, the float32 and the mixing are made on the trainer (the workers send
    # uint8): the job stays the same, the trainer's batch op changes.
    where = {"workers": daemons.workers} if remote else {}
    loader = ferry.DataLoader(ds, batch_size=8, shuffle=True, seed=6, collate_fn=collate, threads=1, **where)
    plain = ferry.DataLoader(ds, batch_size=8, shuffle=True, seed=6, threads=1, **where)
    hi, lo = 1 - 0.1 + 0.1 / 3, 0.1 / 3

    def unmixed(t):
        return bool(torch.all(torch.isclose(t.max(dim=1).values, torch.tensor(hi))) and
                    torch.all(torch.isclose(t.sort(dim=1).values[:, :2], torch.tensor(lo))))

    first = [t for _, t in loader]
    assert len(first) == 15 and not all(unmixed(t) for t in first), "mixed while enabled"
    list(plain)  # epoch 0
    mixup.mixup_enabled = False

    def keyed(dl):  # by each batch's samples: remote batches come in arrival order
        return {tuple(dl.last_batch_info()["indices"].tolist()): (x, y) for x, y in dl}

    second, want = keyed(loader), keyed(plain)
    assert len(second) == 15 and second.keys() == want.keys() and loader.epoch == plain.epoch == 2
    for key, (x, t) in second.items():
        px, py = want[key]
        assert unmixed(t) and torch.equal(t.argmax(dim=1), py)
        assert torch.equal(x, px)


def test_a_collate_fn_it_does_not_know_runs_on_the_trainer(ferry, small_tree):
    """Any collate_fn but MixUp/CutMix is applied on the trainer to each batch's samples
    (image tensor, int label), said once at start, its time measured; never refused."""
    seen = []

    def my_collate(samples):
        seen.append(len(samples))
        images = torch.stack([x for x, _ in samples])
        return images * 2, torch.tensor([y for _, y in samples]) + 100

    with pytest.warns(UserWarning, match="runs on the trainer"):
        loader = ferry.DataLoader(ImageFolder(small_tree, transform=SMALL), batch_size=16, shuffle=False,
                                  collate_fn=my_collate, threads=1)
    plain = ferry.DataLoader(ImageFolder(small_tree, transform=SMALL), batch_size=16, shuffle=False, threads=1)
    got, want = list(loader), list(plain)
    assert seen == [16] * 7 + [8] and len(got) == len(want) == 8
    for (x, y), (px, py) in zip(got, want):
        assert torch.equal(x, px * 2) and torch.equal(y, py + 100)
    assert loader.stats()["collate_s"] > 0 and "collate_s" not in plain.stats()


def test_a_transform_class_of_your_own_runs_the_dataset_in_python(ferry, small_tree):
    """A first step Ferry has no op for (a class of the script's own): nothing before
    it makes images of one size, so the whole dataset runs in the workers' Python
    (here: this machine's), said once and named."""
    class MyCrop:
        def __call__(self, img):
            return img.crop((0, 0, 32, 32))

    loader = ferry.DataLoader(ImageFolder(small_tree, transform=T.Compose([MyCrop(), T.ToTensor()])), batch_size=8,
                              shuffle=False, num_workers=2)
    assert "runs whole in Python" in loader.placement_note and "MyCrop" in loader.placement_note
    # num_workers are Python processes here, as torch's are (capped by this rank's CPUs).
    assert loader.python_processes == min(2, ferry.available_cpus())
    x, y = next(iter(loader))
    assert x.shape == (8, 3, 32, 32) and y.tolist() == [0] * 8


def test_pin_memory_on_a_cuda_host_means_batches_on_the_gpu(ferry, small_tree):
    """The rule (ferry.DataLoader's doc): device= when given; else pin_memory on a CUDA
    host puts batches on pin_memory_device or the current CUDA device, so a script's own
    .to(device) is a no-op; else host tensors. Here, with no CUDA, pin_memory keeps them
    on the host."""
    from ferry.dataloader import batch_device
    assert batch_device(True, "", None, True) == "cuda"
    assert batch_device(True, "cuda:1", None, True) == "cuda:1"
    assert batch_device(True, "cuda:1", "cpu", True) == "cpu"
    assert batch_device(False, "", None, True) is None
    assert batch_device(True, "", None, False) is None
    assert batch_device(False, "", "cuda:0", True) == "cuda:0"
    import torchvision
    dataset = torchvision.datasets.ImageFolder(small_tree, transform=torchvision.transforms.Compose(
        [torchvision.transforms.CenterCrop(32), torchvision.transforms.ToTensor()]))
    if torch.cuda.is_available():
        loader = ferry.DataLoader(dataset, batch_size=8, pin_memory=True)
    else:
        with pytest.warns(UserWarning):  # pin_memory without CUDA does nothing, and says so
            loader = ferry.DataLoader(dataset, batch_size=8, pin_memory=True)
    x, y = next(iter(loader))
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert x.device.type == want and y.device.type == want
