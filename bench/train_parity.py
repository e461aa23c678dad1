#!/usr/bin/python3
"""Faithful, not only fast: a short training run reaches the same validation accuracy
with ferry.DataLoader as with torchvision's DataLoader, for the TrivialAugmentWide +
RandomErasing + MixUp/CutMix recipe, within the spread of three seeds.

    /usr/bin/python3 bench/train_parity.py [--data data/sample] [--epochs 8] [--seeds 0 1 2]

The sample corpus (real photographs, 8 classes whose images come from different
source photos) is split by index: 4 of every 5 samples train, the fifth validates.
Train recipe (the reference script's, at 64 px for a CPU): RandomResizedCrop(64),
RandomHorizontalFlip, TrivialAugmentWide, PILToTensor, ConvertImageDtype, Normalize,
RandomErasing(0.1), and a RandomChoice of RandomMixup(0.2)/RandomCutmix(1.0) collate
(tests/python/reference). A small CNN, SGD with momentum, cosine schedule, the same
seed for the model on both sides. Only the training DataLoader line differs: the
validation (Resize 73, CenterCrop 64, torchvision's DataLoader) is the same for both.
Prints each seed's final validation accuracy, the mean and spread (max - min) of each
loader, and whether the means differ by no more than the larger spread.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torchvision
import torchvision.transforms as T
from torch.utils.data import Subset
from torch.utils.data.dataloader import default_collate

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python", "reference"))
import transforms as reference  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def model(num_classes):
    def block(i, o):
        return nn.Sequential(nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU(inplace=True))
    return nn.Sequential(block(3, 32), nn.MaxPool2d(2), block(32, 64), nn.MaxPool2d(2), block(64, 128),
                         nn.MaxPool2d(2), block(128, 128), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(128, num_classes))


def run(args, seed, use_ferry):
    torch.manual_seed(seed)
    train_t = T.Compose([T.RandomResizedCrop(64), T.RandomHorizontalFlip(), T.TrivialAugmentWide(), T.PILToTensor(),
                         T.ConvertImageDtype(torch.float), T.Normalize(MEAN, STD), T.RandomErasing(0.1)])
    val_t = T.Compose([T.Resize(73), T.CenterCrop(64), T.ToTensor(), T.Normalize(MEAN, STD)])
    full = torchvision.datasets.ImageFolder(args.data)
    train_idx = [i for i in range(len(full)) if i % 5 != 4]
    val_idx = [i for i in range(len(full)) if i % 5 == 4]
    train_ds = Subset(torchvision.datasets.ImageFolder(args.data, train_t), train_idx)
    val_ds = Subset(torchvision.datasets.ImageFolder(args.data, val_t), val_idx)
    k = len(full.classes)
    mix = torchvision.transforms.RandomChoice([reference.RandomMixup(k, p=1.0, alpha=0.2),
                                               reference.RandomCutmix(k, p=1.0, alpha=1.0)])

    def collate_fn(batch):
        return mix(*default_collate(batch))

    g = torch.Generator()
    g.manual_seed(seed)
    sampler = torch.utils.data.RandomSampler(train_ds, generator=g)
    if use_ferry:
        import ferry
        loader = ferry.DataLoader(train_ds, batch_size=64, sampler=sampler, num_workers=args.workers,
                                  collate_fn=collate_fn, drop_last=True)
    else:
        loader = torch.utils.data.DataLoader(train_ds, batch_size=64, sampler=sampler, num_workers=args.workers,
                                             collate_fn=collate_fn, drop_last=True)
    val = torch.utils.data.DataLoader(val_ds, batch_size=128, num_workers=args.workers)
    torch.manual_seed(seed)  # the same initial model on both sides
    net = model(k)
    opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    steps = args.epochs * len(loader)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=steps, pct_start=0.2)
    crit = nn.CrossEntropyLoss(label_smoothing=0.1)
    t0 = time.time()
    for epoch in range(args.epochs):
        net.train()
        for images, target in loader:
            loss = crit(net(images), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    net.eval()
    correct = total = 0
    with torch.inference_mode():
        for images, target in val:
            correct += int((net(images).argmax(1) == target).sum())
            total += target.shape[0]
    return correct / total, time.time() - t0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "sample"))
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--ferry-python", default=os.path.join(ROOT, "build", "python"))
    args = ap.parse_args(argv)
    sys.path.insert(0, args.ferry_python)
    torch.set_num_threads(2)
    acc = {"torchvision": [], "ferry": []}
    for seed in args.seeds:
        for name in ("torchvision", "ferry"):
            a, s = run(args, seed, name == "ferry")
            acc[name].append(a)
            print("train_parity seed=%d loader=%s val_acc=%.4f seconds=%.0f" % (seed, name, a, s), flush=True)
    summary = {}
    for name, v in acc.items():
        summary[name] = (sum(v) / len(v), max(v) - min(v))
        print("train_parity loader=%s mean=%.4f spread=%.4f accs=%s" % (name, summary[name][0], summary[name][1],
                                                                      " ".join("%.4f" % x for x in v)))
    gap = abs(summary["ferry"][0] - summary["torchvision"][0])
    bound = max(summary["ferry"][1], summary["torchvision"][1])
    ok = gap <= bound
    print("train_parity mean_gap=%.4f seed_spread=%.4f within_spread=%s" % (gap, bound, "yes" if ok else "no"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
