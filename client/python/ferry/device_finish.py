"""The float32 of a normalizing pipeline made on the trainer's GPU (or any torch device)
from the uint8 batch that crossed the wire: the normalize, RandomErasing and
MixUp/CutMix, from the same draws the workers' and the host's code make (the plan that
ferry._ferry.Pipeline.plan returns: Pipeline::PlanOnTrainer, which draws from the same
streams as FinishOnTrainer but touches no pixel), applied with torch ops on the batch's
device.

Equal to the host's finish (Pipeline.finish) within float tolerance: every erased value,
pasted CutMix box and target is the same bit for bit; the normalize (x * scale + bias) and
MixUp's blend (x * lam + x_partner * (1 - lam)) are the same float32 products, which a
device may fuse into multiply-adds, so they may differ in the last bit: at most 1e-6
relative, as tests/python/test_wire.py checks on the CPU."""
import numpy as np
import torch


def finish(images, plan, valid):
    """uint8 N x H x W x C (a tensor on the device) -> float32 N x C x H x W on the same
    device, by `plan` (for these N rows, the first `valid` real). Runs on the current
    stream; the plan's small arrays are copied to the device without blocking."""
    n, _, _, c = images.shape
    dev = images.device
    scale = torch.tensor(plan["scale"][:c], dtype=torch.float32).view(1, c, 1, 1).to(dev, non_blocking=True)
    bias = torch.tensor(plan["bias"][:c], dtype=torch.float32).view(1, c, 1, 1).to(dev, non_blocking=True)
    out = torch.addcmul(bias, images.permute(0, 3, 1, 2).float(), scale).contiguous()
    if valid < n:
        out[valid:] = 0  # padding rows are zeros, as in a worker's float32 batch
    for row, (top, left, h, w), fill in zip(plan["erase_rows"].tolist(), plan["erase_boxes"].tolist(),
                                            plan["erase_fills"]):
        f = torch.from_numpy(fill).to(dev, non_blocking=True)
        out[row, :, top:top + h, left:left + w] = f.view(c, 1, 1) if f.numel() == c else f.view(c, h, w)
    if plan["mixed"] and valid > 0:
        rows = torch.arange(valid, device=dev)
        partner = valid - 1 - rows if plan["flip_partner"] else (rows - 1) % valid
        if plan["cutmix"]:
            x1, y1, x2, y2 = plan["box"]
            if x2 > x1 and y2 > y1 and valid > 1:
                out[:valid, :, y1:y2, x1:x2] = out[partner, :, y1:y2, x1:x2]  # gathered before written
        else:
            lam = float(np.float32(plan["lam"]))  # the float32 weights the host's code uses
            rest = float(np.float32(1.0 - plan["lam"]))
            mixed = out[:valid] * lam + out[partner] * rest
            if plan["flip_partner"] and valid % 2:
                mixed[valid // 2] = out[valid // 2]  # the middle row has no partner: left as it is
            out[:valid] = mixed
    return out
