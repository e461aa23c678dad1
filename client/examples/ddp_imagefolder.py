"""A DistributedDataParallel training script on an ImageFolder, as one is written for
torch.utils.data.DataLoader with a DistributedSampler, fed by Ferry instead: the import
and one line differ (see the README). Launch one process per rank with torchrun's
environment (MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE):

    for r in 0 1; do MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 RANK=$r LOCAL_RANK=$r \\
      WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 PYTHONPATH=build/python \\
      /usr/bin/python3 client/examples/ddp_imagefolder.py --data data/sample & done; wait

Ferry decodes in-process (each rank its share of every epoch), or, with
FERRY_DISPATCHER=host:port and FERRY_JOB_NAME=name in the environment, on the
dispatcher's workers. --report FILE writes, per epoch, the steps this rank took and the
targets it saw.
"""
import argparse
import json

import torch
import torch.distributed as dist
import torch.nn.functional as F
import torchvision.transforms as T
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler
from torchvision.datasets import ImageFolder

import ferry


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--report", default="")
    a = ap.parse_args()

    dist.init_process_group("gloo")
    transform = T.Compose([T.RandomResizedCrop(a.size), T.RandomHorizontalFlip(), T.ToTensor(),
                           T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    dataset = ImageFolder(a.data, transform=transform)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0, drop_last=True)
    loader = ferry.DataLoader(dataset, batch_size=a.batch_size, sampler=sampler, num_workers=a.workers, drop_last=True)

    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
        torch.nn.Linear(8, len(dataset.classes))))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    report = {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "len": len(loader), "epochs": {}}
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        steps, targets, total = 0, [], 0.0
        for images, labels in loader:
            loss = F.cross_entropy(model(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
            targets += labels.tolist()
            total += loss.item()
        if dist.get_rank() == 0:
            print("epoch %d: %d steps, mean loss %.3f" % (epoch, steps, total / max(1, steps)), flush=True)
        report["epochs"][str(epoch)] = {"steps": steps, "targets": targets}
    if a.report:
        with open(a.report, "w") as f:
            json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
