"""The drop-in with code of the script's own (issue 24): a script with an ImageFolder,
a Compose of torchvision ops plus one Python function of its own, and a custom
collate function switches to Ferry by changing its DataLoader line only; Ferry runs
the leading steps natively and the rest, with the collate, in the workers' Python, and
says so once at start."""
import json
import os
import subprocess
import sys
import textwrap

from conftest import Daemons

SCRIPT = textwrap.dedent('''
    import json, sys
    import torch, torchvision
    import torchvision.transforms as T
    import ferry

    def stamp(x):
        """The script's own step: marks pixel (0, 0) of each channel, after ToTensor."""
        x = x.clone()
        x[:, 0, 0] = 0.75
        return x

    def collate(batch):
        """The script's own collate: images, labels, and how many rows."""
        return {"images": torch.stack([b[0] for b in batch]), "labels": torch.tensor([b[1] for b in batch]),
                "rows": len(batch)}

    transform = T.Compose([T.RandomResizedCrop(48), T.RandomHorizontalFlip(), T.ToTensor(), stamp,
                           T.Normalize([0.5, 0.5, 0.5], [0.25, 0.25, 0.25])])
    dataset = torchvision.datasets.ImageFolder(sys.argv[1], transform=transform)
    subset = torch.utils.data.Subset(dataset, list(range(0, len(dataset), 25)))
    torch.manual_seed(0)
    loader = LOADER(subset, batch_size=10, shuffle=True, num_workers=2, collate_fn=collate)
    out = []
    for epoch in range(2):
        labels, rows, shapes, stamped = [], 0, set(), True
        for b in loader:
            labels += b["labels"].tolist()
            rows += b["rows"]
            shapes.add((tuple(b["images"].shape[1:]), str(b["images"].dtype)))
            stamped = stamped and bool((b["images"][:, :, 0, 0] == 1.0).all())
        out.append({"labels": sorted(labels), "rows": rows, "shapes": sorted(shapes), "stamped": stamped})
    want = sorted(dataset.targets[i] for i in subset.indices)
    print(json.dumps({"epochs": out, "want": want}))
''')


def run(script_dir, loader, data, env=None):
    path = os.path.join(script_dir, "train_%s.py" % loader.split(".")[0])
    with open(path, "w") as f:
        f.write(SCRIPT.replace("LOADER", loader))
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([sys.executable, path, data], capture_output=True, text=True, timeout=300, env=e)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1]), p.stderr


def check(summary):
    for epoch in summary["epochs"]:
        assert epoch["labels"] == summary["want"]  # every sample once, with its label
        assert epoch["rows"] == len(summary["want"])
        assert epoch["shapes"] == [[[3, 48, 48], "torch.float32"]]
        assert epoch["stamped"]  # (0.75 - 0.5) / 0.25: the script's step, then Normalize


def test_one_line_switches_a_script_with_its_own_step_and_collate(ferry, ferry_local, sample_data, tmp_path):
    pythonpath = os.path.dirname(os.path.dirname(os.path.abspath(ferry.__file__)))
    env = {"PYTHONPATH": pythonpath}
    torch_run, _ = run(str(tmp_path), "torch.utils.data.DataLoader", sample_data, env)
    check(torch_run)
    local, log = run(str(tmp_path), "ferry.DataLoader", sample_data, env)
    check(local)
    assert ("natively: decode, RandomResizedCrop, RandomHorizontalFlip, ToTensor; in Python on the workers: stamp, "
            "Normalize (from stamp on: Ferry has no native op for stamp); collate_fn collate in Python on the "
            "workers") in log
    assert log.count("ferry.DataLoader: natively") == 1
    # The same script against a dispatcher and two workers (the operator's variables).
    d = Daemons(os.path.dirname(ferry_local), tmp_path / "d", workers=2, worker_args=["--allow-user-code"])
    try:
        remote, log = run(str(tmp_path), "ferry.DataLoader", sample_data,
                          dict(env, FERRY_DISPATCHER=d.dispatcher, FERRY_JOB_NAME="own-steps"))
        check(remote)
        assert "in Python on the workers: stamp, Normalize" in log
    finally:
        d.close()
    logs = d.tails()
    assert "job own-steps." in logs  # the workers served it
