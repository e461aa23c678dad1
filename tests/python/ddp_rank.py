"""One rank of a DistributedDataParallel training job fed by Ferry, launched as
torchrun would (MASTER_ADDR, MASTER_PORT, RANK, LOCAL_RANK, WORLD_SIZE in the
environment) by test_ddp.py. Trains a small model on CPU with the gloo backend, and
writes a JSON report: per epoch, the steps taken and the sample indices seen.

  --stop-after N      stop after N steps, save the loader's state_dict to
                      STATE_DIR/rank-<r>.pt, and exit (a checkpoint)
  --resume            load every rank-*.pt of STATE_DIR (the old ranks' states,
                      whatever their number) before training
  --progress FILE     rewrite FILE with rank 0's step count after every step
"""
import argparse
import faulthandler
import glob
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import ferry

SIZE = 16
PIPELINE = {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": SIZE}, {"op": "hflip", "p": 0.5}],
            "output": {"dtype": "uint8", "layout": "NHWC"}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--dispatcher", required=True)
    ap.add_argument("--job", required=True)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--pad", action="store_true", help="drop_last=False: pad the last batches")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--step-delay", type=float, default=0.0, help="seconds of extra work per step")
    ap.add_argument("--stop-after", type=int, default=0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--state-dir", default="")
    ap.add_argument("--progress", default="")
    ap.add_argument("--local-threads", type=int, default=0, help="hybrid: this rank's own worker threads")
    ap.add_argument("--report", required=True)
    a = ap.parse_args()
    faulthandler.register(signal.SIGUSR1)  # test_ddp.py asks for every thread's stack on a hang

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    loader = ferry.Loader(data=a.data, pipeline=PIPELINE, batch_size=a.batch_size, epochs=a.epochs,
                          drop_last=not a.pad, dispatcher=a.dispatcher, job_name=a.job,
                          deterministic=a.deterministic, batches_per_split=2, threads=1,
                          local_threads=a.local_threads)
    assert (loader.rank, loader.world_size) == (rank, world), "rank and world size come from torch.distributed"
    if a.resume:
        states = [torch.load(f) for f in sorted(glob.glob(os.path.join(a.state_dir, "rank-*.pt")))]
        loader.load_state_dict(states)
    model = DistributedDataParallel(torch.nn.Linear(SIZE * SIZE * 3, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    report = {"rank": rank, "world_size": world, "len": len(loader), "first_epoch": loader.epoch, "epochs": {}}
    steps = 0
    for epoch in range(loader.epoch, a.epochs):
        mine = report["epochs"].setdefault(str(epoch), {"steps": 0, "indices": [], "padding": 0})
        for x, y in loader:
            x = x.reshape(x.shape[0], -1).float() / 255.0
            out = model(x)
            valid = (y >= 0).sum().clamp(min=1)
            loss = F.cross_entropy(out, y, ignore_index=-1, reduction="sum") / valid
            opt.zero_grad()
            loss.backward()  # an all-reduce: a rank with a step more than the others would hang here
            opt.step()
            if a.step_delay:
                time.sleep(a.step_delay)
            idx = loader.last_batch_info()["indices"].tolist()
            mine["steps"] += 1
            mine["indices"] += [i for i in idx if i >= 0]
            mine["padding"] += sum(1 for i in idx if i < 0)
            steps += 1
            print("epoch %d step %d: %d samples (%s)" % (epoch, mine["steps"], len(idx), time.strftime("%H:%M:%S")),
                  flush=True)
            if a.progress and rank == 0:
                with open(a.progress + ".tmp", "w") as f:
                    f.write(str(steps))
                os.replace(a.progress + ".tmp", a.progress)
            if a.stop_after and steps == a.stop_after:
                torch.save(loader.state_dict(), os.path.join(a.state_dir, "rank-%d.pt" % rank))
                break
        if a.stop_after and steps == a.stop_after:
            break
    loader.close()
    dist.barrier()
    report["stats"] = loader.stats()
    report["local_batches"] = loader.local_batches()
    with open(a.report, "w") as f:
        json.dump(report, f)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
