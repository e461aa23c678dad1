"""An image-classification training script built the way torchvision's
references/classification/train.py builds its data path: preset objects holding a
Compose, ImageFolder, RandomSampler/SequentialSampler (DistributedSampler under torchrun's
environment), pin_memory=True, a MixUp/CutMix collate_fn over default_collate, and an
evaluation beside training. Ferry's tests run it as it is, and with the one line that
imports DataLoader changed to Ferry's.

    python3 train.py --data-path DIR [--auto-augment ta_wide --random-erase 0.1
        --mixup-alpha 0.2 --cutmix-alpha 1.0 --train-crop-size 176 --val-resize-size 232]

--report FILE writes what the run saw (steps, batch shapes, target kinds, the samples
each evaluation counted) as JSON.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torchvision
from torch.utils.data import DataLoader
from torch.utils.data.dataloader import default_collate
from torchvision.transforms.functional import InterpolationMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import presets  # noqa: E402
import transforms  # noqa: E402


def init_distributed():
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and int(os.environ["WORLD_SIZE"]) > 1:
        dist.init_process_group("gloo")
        return True
    return False


def load_data(traindir, valdir, args, distributed):
    interpolation = InterpolationMode(args.interpolation)
    dataset = torchvision.datasets.ImageFolder(
        traindir,
        presets.ClassificationPresetTrain(crop_size=args.train_crop_size, interpolation=interpolation,
                                          auto_augment_policy=args.auto_augment, random_erase_prob=args.random_erase,
                                          ra_magnitude=args.ra_magnitude, augmix_severity=args.augmix_severity,
                                          color_jitter=args.color_jitter))
    dataset_test = torchvision.datasets.ImageFolder(
        valdir, presets.ClassificationPresetEval(crop_size=args.val_crop_size, resize_size=args.val_resize_size,
                                                 interpolation=interpolation))
    if distributed:
        train_sampler = torch.utils.data.distributed.DistributedSampler(dataset)
        test_sampler = torch.utils.data.distributed.DistributedSampler(dataset_test, shuffle=False)
    else:
        train_sampler = torch.utils.data.RandomSampler(dataset)
        test_sampler = torch.utils.data.SequentialSampler(dataset_test)
    return dataset, dataset_test, train_sampler, test_sampler


def evaluate(model, criterion, data_loader, report):
    model.eval()
    correct, seen, indices = 0, 0, []
    with torch.inference_mode():
        for image, target in data_loader:
            output = model(image)
            criterion(output, target)
            correct += int((output.argmax(1) == target).sum())
            seen += image.shape[0]
            info = getattr(data_loader, "last_batch_info", None)
            if info is not None:
                indices += info()["indices"][:image.shape[0]].tolist()
    report["evaluations"].append({"samples": seen, "correct": correct, "indices": indices})


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data-path", required=True)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop an epoch after this many steps (0: the whole epoch)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--interpolation", default="bilinear")
    p.add_argument("--train-crop-size", type=int, default=224)
    p.add_argument("--val-resize-size", type=int, default=256)
    p.add_argument("--val-crop-size", type=int, default=224)
    p.add_argument("--auto-augment", default=None)
    p.add_argument("--ra-magnitude", type=int, default=9)
    p.add_argument("--augmix-severity", type=int, default=3)
    p.add_argument("--random-erase", type=float, default=0.0)
    p.add_argument("--color-jitter", type=float, default=0.0)
    p.add_argument("--mixup-alpha", type=float, default=0.0)
    p.add_argument("--cutmix-alpha", type=float, default=0.0)
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--test-only", action="store_true")
    p.add_argument("--no-eval", action="store_true")
    p.add_argument("--report", default="")
    args = p.parse_args()

    torch.manual_seed(0)
    distributed = init_distributed()
    dataset, dataset_test, train_sampler, test_sampler = load_data(args.data_path, args.data_path, args, distributed)
    num_classes = len(dataset.classes)

    collate_fn = None
    mixup_transforms = []
    if args.mixup_alpha > 0.0:
        mixup_transforms.append(transforms.RandomMixup(num_classes, p=1.0, alpha=args.mixup_alpha))
    if args.cutmix_alpha > 0.0:
        mixup_transforms.append(transforms.RandomCutmix(num_classes, p=1.0, alpha=args.cutmix_alpha))
    if mixup_transforms:
        mixupcutmix = torchvision.transforms.RandomChoice(mixup_transforms)

        def collate_fn(batch):
            return mixupcutmix(*default_collate(batch))

    data_loader = DataLoader(dataset, batch_size=args.batch_size, sampler=train_sampler, num_workers=args.workers,
                             pin_memory=True, collate_fn=collate_fn)
    data_loader_test = DataLoader(dataset_test, batch_size=args.batch_size, sampler=test_sampler,
                                  num_workers=args.workers, pin_memory=True)

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 5, stride=4), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                torch.nn.Flatten(), torch.nn.Linear(8, num_classes))
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    report = {"rank": dist.get_rank() if distributed else 0, "epochs": [], "evaluations": [],
              "num_classes": num_classes, "val_samples": len(dataset_test)}
    if args.test_only:
        evaluate(model, criterion, data_loader_test, report)
    else:
        for epoch in range(args.epochs):
            if distributed:
                train_sampler.set_epoch(epoch)
            model.train()
            steps, shapes, kinds, losses, train_indices = 0, [], set(), [], []
            t0 = time.time()
            for image, target in data_loader:
                output = model(image)
                loss = criterion(output, target)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                steps += 1
                shapes.append(list(image.shape))
                kinds.add("soft" if target.ndim == 2 else "hard")
                losses.append(float(loss))
                if target.ndim == 2:
                    report.setdefault("soft_row_sums", []).extend(target.sum(1).tolist())
                info = getattr(data_loader, "last_batch_info", None)
                if info is not None:
                    train_indices += info()["indices"].tolist()
                if steps == args.steps:
                    break
            report["epochs"].append({"steps": steps, "shapes": shapes, "targets": sorted(kinds), "losses": losses,
                                     "indices": train_indices, "seconds": time.time() - t0})
            if not args.no_eval:
                evaluate(model, criterion, data_loader_test, report)
    if args.report:
        with open(args.report, "w") as f:
            json.dump(report, f)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
