"""Batch-level MixUp and CutMix as torchvision's references/classification/transforms.py
defines them (RandomMixup, RandomCutmix): applied to a collated (batch, target) with
probability p, mixing each row with the previous one (batch.roll(1, 0)), lambda from
Beta(alpha, alpha) (a 2-parameter Dirichlet), CutMix's lambda corrected to the pasted
area. Written for Ferry's tests from that documented behaviour."""
import math

import torch
from torchvision.transforms import functional as F


class RandomMixup(torch.nn.Module):
    def __init__(self, num_classes, p=0.5, alpha=1.0, inplace=False):
        super().__init__()
        if num_classes < 1 or alpha <= 0:
            raise ValueError("num_classes must be >= 1 and alpha > 0")
        self.num_classes, self.p, self.alpha, self.inplace = num_classes, p, alpha, inplace

    def forward(self, batch, target):
        if not self.inplace:
            batch, target = batch.clone(), target.clone()
        if target.ndim == 1:
            target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(dtype=batch.dtype)
        if torch.rand(1).item() >= self.p:
            return batch, target
        rolled_batch, rolled_target = batch.roll(1, 0), target.roll(1, 0)
        lam = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        batch = batch * lam + rolled_batch * (1.0 - lam)
        target = target * lam + rolled_target * (1.0 - lam)
        return batch, target


class RandomCutmix(torch.nn.Module):
    def __init__(self, num_classes, p=0.5, alpha=1.0, inplace=False):
        super().__init__()
        if num_classes < 1 or alpha <= 0:
            raise ValueError("num_classes must be >= 1 and alpha > 0")
        self.num_classes, self.p, self.alpha, self.inplace = num_classes, p, alpha, inplace

    def forward(self, batch, target):
        if not self.inplace:
            batch, target = batch.clone(), target.clone()
        if target.ndim == 1:
            target = torch.nn.functional.one_hot(target, num_classes=self.num_classes).to(dtype=batch.dtype)
        if torch.rand(1).item() >= self.p:
            return batch, target
        rolled_batch, rolled_target = batch.roll(1, 0), target.roll(1, 0)
        lam = float(torch._sample_dirichlet(torch.tensor([self.alpha, self.alpha]))[0])
        _, h, w = F.get_dimensions(batch)
        rx, ry = int(torch.randint(w, (1,))), int(torch.randint(h, (1,)))
        r = 0.5 * math.sqrt(1.0 - lam)
        rw, rh = int(r * w), int(r * h)
        x1, y1, x2, y2 = max(rx - rw, 0), max(ry - rh, 0), min(rx + rw, w), min(ry + rh, h)
        batch[:, :, y1:y2, x1:x2] = rolled_batch[:, :, y1:y2, x1:x2]
        lam = float(1.0 - (x2 - x1) * (y2 - y1) / (w * h))
        target = target * lam + rolled_target * (1.0 - lam)
        return batch, target
