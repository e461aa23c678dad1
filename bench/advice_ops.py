#!/usr/bin/python3
"""Does the advice name the op that costs most, with the share the microbenchmarks give it?

    /usr/bin/python3 bench/advice_ops.py [--data data/sample] [--seconds 25]

Runs a DeiT-style job (bicubic RandomResizedCrop 224, flip, RandAugment(2, 9),
ColorJitter 0.4, Normalize, RandomErasing 0.25, MixUp/CutMix: bench/recipe_bench.py's
recipe, translated by Ferry's drop-in) on a real ferry-dispatcher and one ferry-worker
(one thread), consumed as fast as it comes by ferry-consume (so the job is input-bound
and the worker busy), and reads the dispatcher's advice: the job's limited_by (what
ferry-ctl status prints) and each step's share of a sample's time
(ferry_job_op_share{op} in /metrics), which come from the worker's sampled op costs.

Then the same steps' costs from the microbenchmarks, each alone on one core:
  decode               ferry-micro-bench BM_JpegDecoder/2 (the ROI decode at the DCT
                       scale the pipeline picks for a 224 output)
  random_resized_crop  ferry-ops-bench op/random_resized_crop_bicubic (the resample)
  rand_augment, color_jitter   ferry-ops-bench op/...
  output               ferry-ops-bench normalize + 0.25 x random_erasing (p = 0.25)
and their shares of the sum. hflip is no step of its own here (it is carried into
RandAugment's input), and read (the file, from the page cache) is left out of both
sides. Prints both shares for every step, and whether the costliest step is the same
and its shares agree within 10 points (the target).
"""
import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import recipe_bench  # noqa: E402

STEPS = ("decode", "random_resized_crop", "rand_augment", "color_jitter", "output")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=5) as r:
        return r.read().decode()


def advice_shares(args, spec_path):
    """(limited_by, {step: share}) from a running job."""
    work = tempfile.mkdtemp(prefix="ferry-advice-ops-")
    dport, mport = free_port(), free_port()
    dispatcher = "127.0.0.1:%d" % dport
    procs = [subprocess.Popen([args.dispatcher_bin, "--listen", dispatcher, "--work-dir", work + "/journal",
                               "--metrics", "127.0.0.1:%d" % mport], stderr=subprocess.DEVNULL)]
    time.sleep(0.5)
    procs.append(subprocess.Popen([args.worker_bin, "--listen", "127.0.0.1:0", "--threads", "1", "--dispatcher",
                                   dispatcher], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    consumer = subprocess.Popen([args.consume_bin, "--dispatcher", dispatcher, "--job", "deit", "--data", args.data,
                                 "--pipeline", spec_path, "--epochs", "0", "--batch-size", "64"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(args.seconds)
        text = metrics(mport)
        ctl = subprocess.run([args.ctl_bin, "status", "--dispatcher", dispatcher, "--json"], capture_output=True,
                             text=True, timeout=30)
        status = json.loads(ctl.stdout)
    finally:
        for p in [consumer] + procs[::-1]:
            p.terminate()
        for p in [consumer] + procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    shares = {}
    for m in re.finditer(r'^ferry_job_op_share\{ferry_job="deit",op="([^"]+)"\} ([0-9.eE+-]+)$', text, re.M):
        shares[m.group(1)] = float(m.group(2))
    limited = next((j.get("limited_by", "") for j in status.get("jobs", []) if j.get("name") == "deit"), "")
    return limited, shares


def micro_costs(args):
    """{step: seconds per sample} from the microbenchmarks."""
    env = dict(os.environ, FERRY_SAMPLE_DATA=args.data)
    out = {}
    ops = subprocess.run([args.ops_bench, "--benchmark_format=json", "--benchmark_min_time=0.5",
                          "--benchmark_filter=^copy/|op/random_resized_crop_bicubic|op/rand_augment|"
                          "op/color_jitter/|^normalize|^random_erasing"], capture_output=True, text=True, env=env,
                         timeout=600)
    micro = subprocess.run([args.micro_bench, "--benchmark_format=json", "--benchmark_min_time=0.5",
                            "--benchmark_filter=BM_JpegDecoder/2"], capture_output=True, text=True, env=env,
                           timeout=600)
    t = {}
    for report in (ops.stdout, micro.stdout):
        for b in json.loads(report)["benchmarks"]:
            unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3}[b["time_unit"]]
            t[b["run_name"].removesuffix("/process_time")] = b["cpu_time"] * unit
    copy224, copy400 = t["copy/224x224"], t["copy/400x300"]
    out["decode"] = t["BM_JpegDecoder/2"]
    out["random_resized_crop"] = t["op/random_resized_crop_bicubic"] - copy400
    out["rand_augment"] = t["op/rand_augment"] - copy224
    out["color_jitter"] = t["op/color_jitter"] - copy224
    out["output"] = t["normalize"] + 0.25 * t["random_erasing"]
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    build = os.path.join(ROOT, "build")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "sample"))
    ap.add_argument("--seconds", type=float, default=25.0)
    ap.add_argument("--build", default=build)
    args = ap.parse_args(argv)
    b = args.build
    args.dispatcher_bin = os.path.join(b, "server", "ferry-dispatcher")
    args.worker_bin = os.path.join(b, "server", "ferry-worker")
    args.consume_bin = os.path.join(b, "client", "ferry-consume")
    args.ctl_bin = os.path.join(b, "client", "ferry-ctl")
    args.ops_bench = os.path.join(b, "bench", "ferry-ops-bench")
    args.micro_bench = os.path.join(b, "bench", "ferry-micro-bench")
    transform, collate = recipe_bench.deit_recipe(recipe_bench.class_count(args.data))
    spec = recipe_bench.ferry_spec(os.path.join(b, "python"), transform, collate)
    spec_path = os.path.join(tempfile.mkdtemp(prefix="ferry-deit-"), "deit.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    limited, shares = advice_shares(args, spec_path)
    print("advice: limited by %s" % limited)
    if not shares:
        print("advice_ops: the dispatcher reported no op shares (no worker window yet?)")
        return 1
    costs = micro_costs(args)
    # The same steps on both sides, renormalized (read and the steps the microbenchmarks
    # do not time are left out).
    ferry = {s: shares.get(s, 0.0) for s in STEPS}
    total_a, total_m = sum(ferry.values()), sum(costs.values())
    print("%-20s %10s %10s %12s" % ("step", "advice", "micro", "micro us"))
    for s in STEPS:
        print("%-20s %9.1f%% %9.1f%% %12.1f" % (s, 100 * ferry[s] / total_a, 100 * costs[s] / total_m,
                                                1e6 * costs[s]))
    top_a = max(STEPS, key=lambda s: ferry[s])
    top_m = max(STEPS, key=lambda s: costs[s])
    diff = 100 * abs(ferry[top_a] / total_a - costs[top_a] / total_m)
    ok = top_a == top_m and diff <= 10
    print("advice_ops costliest_advice=%s costliest_micro=%s share_diff_points=%.1f within_10=%s"
          % (top_a, top_m, diff, "yes" if ok else "no"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
