"""Today's training recipes through a script written like torchvision's reference
classification script (tests/python/reference/train.py: preset objects wrapping a
Compose, ImageFolder, RandomSampler / DistributedSampler, pin_memory=True, a MixUp/CutMix
collate_fn over default_collate, an evaluation beside training), switched to Ferry by
changing only the line that imports DataLoader. Each recipe yields batches and trains;
the MixUp/CutMix collate runs natively (soft targets); the evaluation counts every
validation sample exactly once, also across DDP ranks, and leaves the training
loader's order as it is."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "reference", "train.py")
TORCH_LINE = "from torch.utils.data import DataLoader\n"
FERRY_LINE = "from ferry import DataLoader\n"

RECIPES = {
    "plain": [],
    "ta_wide_erasing_mixup_cutmix_176": ["--auto-augment", "ta_wide", "--random-erase", "0.1", "--mixup-alpha", "0.2",
                                         "--cutmix-alpha", "1.0", "--train-crop-size", "176", "--val-resize-size",
                                         "232", "--label-smoothing", "0.1"],
    "rand_augment": ["--auto-augment", "ra"],
    "auto_augment_imagenet": ["--auto-augment", "imagenet"],
    "augmix": ["--auto-augment", "augmix"],
    "bicubic_color_jitter": ["--interpolation", "bicubic", "--color-jitter", "0.4"],
    "eval_232": ["--test-only", "--val-resize-size", "232"],
}


@pytest.fixture(scope="module")
def ferry_script(tmp_path_factory):
    """The reference-style script with its one DataLoader line switched to Ferry's."""
    with open(SCRIPT) as f:
        lines = f.readlines()
    assert lines.count(TORCH_LINE) == 1, "the script imports DataLoader in one line"
    switched = [FERRY_LINE if line == TORCH_LINE else line for line in lines]
    assert sum(a != b for a, b in zip(lines, switched)) == 1
    path = tmp_path_factory.mktemp("recipes") / "train_ferry.py"
    path.write_text("".join(switched))
    # The script imports its presets and transforms from its own folder.
    for name in ("presets.py", "transforms.py"):
        (path.parent / name).write_text(open(os.path.join(HERE, "reference", name)).read())
    return str(path)


def run(ferry, script, args, tmp_path, tag, env=None, world=1):
    pythonpath = os.path.dirname(os.path.dirname(ferry.__file__))
    reports, procs = [], []
    port = None
    if world > 1:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    for r in range(world):
        report = str(tmp_path / ("%s-%d.json" % (tag, r)))
        e = dict(os.environ, PYTHONPATH=pythonpath, **(env or {}))
        if world > 1:
            e.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), LOCAL_RANK=str(r),
                     WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
        procs.append(subprocess.Popen([sys.executable, script, *args, "--report", report], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        reports.append(report)
    out = []
    for r, p in enumerate(procs):
        log, _ = p.communicate(timeout=300)
        assert p.returncode == 0, "%s rank %d failed:\n%s" % (tag, r, log)
        with open(reports[r]) as f:
            out.append(json.load(f))
    return out


@pytest.mark.parametrize("recipe", sorted(RECIPES))
def test_a_recipe_runs_on_ferry_with_one_line_changed(ferry, ferry_script, small_tree, tmp_path, recipe):
    args = ["--data-path", small_tree, "--batch-size", "8", "--workers", "2"] + RECIPES[recipe]
    (report,) = run(ferry, ferry_script, args, tmp_path, recipe)
    n = report["val_samples"]
    assert len(report["evaluations"]) == 1 and report["evaluations"][0]["samples"] == n == 120
    assert sorted(report["evaluations"][0]["indices"]) == list(range(n)), "each validation sample once, in order"
    if recipe == "eval_232":
        return
    (epoch,) = report["epochs"]
    crop = 176 if "176" in recipe else 224
    assert epoch["steps"] == 15 and all(s == [8, 3, crop, crop] for s in epoch["shapes"])
    assert all(loss == loss and loss < 50 for loss in epoch["losses"]), "finite losses: it trained"
    assert sorted(epoch["indices"]) == list(range(120)), "a training epoch holds every sample once"
    if "mixup" in recipe:
        assert epoch["targets"] == ["soft"], "MixUp/CutMix ran natively: soft targets"
        assert all(abs(s - 1) < 1e-5 for s in report["soft_row_sums"])
    else:
        assert epoch["targets"] == ["hard"]


def test_the_script_is_torchs_own_without_the_switch(ferry, small_tree, tmp_path):
    """The unswitched script runs torch's DataLoader on the same recipe (it is a real
    torch script), with the same batch shapes and target kinds as Ferry's."""
    args = ["--data-path", small_tree, "--batch-size", "8", "--workers", "0"] + \
        RECIPES["ta_wide_erasing_mixup_cutmix_176"]
    (report,) = run(ferry, SCRIPT, args, tmp_path, "torch")
    (epoch,) = report["epochs"]
    assert epoch["steps"] == 15 and epoch["targets"] == ["soft"] and epoch["shapes"][0] == [8, 3, 176, 176]
    assert report["evaluations"][0]["samples"] == 120


def test_ddp_ranks_train_and_evaluate_each_sample_once(ferry, ferry_script, small_tree, tmp_path):
    """2 DDP ranks (DistributedSampler): equal training steps, every validation sample
    counted once across the ranks (no padded duplicates), and the training loader's
    order the same as in a run without evaluation."""
    base = ["--data-path", small_tree, "--batch-size", "16", "--workers", "1", "--epochs", "2",
            "--train-crop-size", "64", "--val-resize-size", "72", "--val-crop-size", "64"]
    with_eval = run(ferry, ferry_script, base, tmp_path, "ddp-eval", world=2)
    without = run(ferry, ferry_script, base + ["--no-eval"], tmp_path, "ddp-noeval", world=2)
    for e in range(2):
        assert [r["epochs"][e]["steps"] for r in with_eval] == [4, 4], "120 / 2 ranks / 16, padded: equal steps"
        counted = [i for r in with_eval for i in r["evaluations"][e]["indices"]]
        assert sorted(counted) == list(range(120)), "each validation sample once across ranks"
        assert sum(r["evaluations"][e]["samples"] for r in with_eval) == 120
        for a, b in zip(with_eval, without):
            assert a["epochs"][e]["indices"] == b["epochs"][e]["indices"], "evaluation leaves training as it is"
