#!/usr/bin/python3
"""A few training steps of a small torchvision ResNet on CPU, fed by ferry.Loader, with
each step's time split into data wait (blocked in the loader) and compute (forward,
backward, optimizer): the breakdown a profiler shows as DataLoader next() vs the
model's ops. At the end it says whether the run is input-bound.

  PYTHONPATH=build/python /usr/bin/python3 client/examples/train_resnet.py --data data/sample
  # through a dispatcher job (e.g. under ferry-local):
  build/server/ferry-local --workers 2 -- /usr/bin/python3 client/examples/train_resnet.py \\
      --data "$PWD/data/sample" --dispatcher '{dispatcher}' --job resnet
"""
import argparse
import os
import sys
import time

import torch
import torchvision

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "build", "python"))  # a build tree; PYTHONPATH wins if set first
import ferry  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="ImageFolder root (or .tsv list, .tar shards)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--size", type=int, default=112, help="training crop size")
    ap.add_argument("--threads", type=int, default=1, help="decode threads (local mode)")
    ap.add_argument("--dispatcher", help="HOST:PORT of ferry-dispatcher (remote mode)")
    ap.add_argument("--job", default="train-resnet", help="dispatcher job name")
    ap.add_argument("--input-bound-threshold", type=float, default=0.10,
                    help="call the run input-bound when data wait exceeds this fraction of step time")
    args = ap.parse_args()

    torch.manual_seed(0)
    pipeline = {"decode": "rgb",
                "ops": [{"op": "random_resized_crop", "size": args.size}, {"op": "hflip", "p": 0.5},
                        {"op": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
                "output": {"dtype": "float32", "layout": "NCHW"}}
    remote = {"dispatcher": args.dispatcher, "job_name": args.job} if args.dispatcher else {}
    loader = ferry.Loader(data=os.path.abspath(args.data), pipeline=pipeline, batch_size=args.batch_size,
                          threads=args.threads, epochs=None, **remote)
    classes = len(ferry.list_dataset(args.data)[2]) or 1000
    model = torchvision.models.resnet18(num_classes=classes)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    model.train()
    print("resnet18, %d classes, batch %d at %dx%d, %s, %d torch thread(s)" %
          (classes, args.batch_size, args.size, args.size,
           "dispatcher %s job %s" % (args.dispatcher, args.job) if args.dispatcher else "local ferry.Loader",
           torch.get_num_threads()))

    it = iter(loader)
    waits, computes = [], []
    step = 0
    while step < args.steps:
        t0 = time.perf_counter()
        try:
            images, labels = next(it)
        except StopIteration:  # an epoch ended: the next pass is the next epoch
            it = iter(loader)
            continue
        t1 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), labels)
        loss.backward()
        opt.step()
        t2 = time.perf_counter()
        waits.append(t1 - t0)
        computes.append(t2 - t1)
        print("step %3d  data wait %7.1f ms  compute %7.1f ms  loss %.3f" %
              (step, 1e3 * (t1 - t0), 1e3 * (t2 - t1), loss.item()), flush=True)
        step += 1

    # The first step includes the pipeline's start (listing, first decode): report it
    # apart from the steady state.
    steady_w, steady_c = waits[1:] or waits, computes[1:] or computes
    wait, compute = sum(steady_w), sum(steady_c)
    frac = wait / (wait + compute)
    s = loader.stats()
    print("first step: data wait %.1f ms (pipeline start)" % (1e3 * waits[0]))
    print("steady state over %d steps: data wait %.1f ms/step, compute %.1f ms/step: data wait is %.1f%% of step time"
          % (len(steady_w), 1e3 * wait / len(steady_w), 1e3 * compute / len(steady_c), 100 * frac))
    print("loader: %d batches, %d samples, %d skipped files, %.1f img/s delivered" %
          (s["batches"], s["samples"], s["skipped"], s["throughput"]))
    if frac > args.input_bound_threshold:
        print("verdict: INPUT-BOUND: the model waits on data %.0f%% of the time; add decode threads or workers" %
              (100 * frac))
    else:
        print("verdict: not input-bound: the loader keeps up (data wait %.1f%% of step time)" % (100 * frac))
    loader.close()


if __name__ == "__main__":
    main()
