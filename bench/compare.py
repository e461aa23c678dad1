#!/usr/bin/python3
"""Compares Ferry with torchvision and with a bare JPEG decode on one corpus.

    /usr/bin/python3 bench/compare.py --data DIR --ferry-bench PATH
        [--seconds 10] [--batch-size 64] [--markdown FILE]

The headline number is images per CPU-second: how much training input one core's
worth of work produces. Each step runs alone (never two at once, so that they do not
share the cores) over a timed window of --seconds:

  torchvision   ImageFolder + RandomResizedCrop(224), RandomHorizontalFlip, ToTensor,
                Normalize, in a DataLoader(num_workers=0, shuffle=True) in this process,
                with torch.set_num_threads(1). CPU time is time.process_time() over the
                window, after a few warm-up batches.
  bare decode   `ferry-bench decode-baseline`: full-size tjDecompress2 of every image,
                nothing else. A ceiling for any loader that decodes the whole image.
  ferry-1t/2t   `ferry-bench pipeline --pipeline imagenet-train --threads N`.

The C++ tools measure themselves; the last line of their stdout must be
    decode img/s=<float> img_per_cpu_s=<float>
    pipeline img/s=<float> img_per_cpu_s=<float> threads=<N>
and anything else is an error (non-zero exit), never a silently missing number.

Ratios printed: ferry-1t / torchvision and ferry-1t / bare decode in images per
CPU-second (efficiency), and ferry-2t / ferry-1t in images per second (scaling).
"""

import argparse
import datetime
import os
import platform
import re
import resource
import subprocess
import sys
import time

WARMUP_BATCHES = 3
FLOAT = r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)"
DECODE_RE = re.compile(rf"^decode img/s={FLOAT} img_per_cpu_s={FLOAT}$")
PIPELINE_RE = re.compile(rf"^pipeline img/s={FLOAT} img_per_cpu_s={FLOAT} threads=([0-9]+)$")
STEPS = ("torchvision", "decode", "ferry-1t", "ferry-2t")


class StepError(Exception):
    """A step failed or printed something we cannot read."""


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info():
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cpu": cpu_model(),
        "cores": f"{usable} usable of {os.cpu_count()}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
    }


def run_tool(name, cmd, pattern, timeout_s):
    """Runs one C++ tool and returns the match of its last stdout line."""
    print(f"[{name}] {' '.join(cmd)}", flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise StepError(f"{name}: no result after {timeout_s:.0f} s: {' '.join(cmd)}")
    except OSError as e:
        raise StepError(f"{name}: cannot run {cmd[0]}: {e}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise StepError(f"{name}: exit status {proc.returncode}\n"
                        f"--- stderr (tail) ---\n{proc.stderr[-2000:]}")
    lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
    last = lines[-1] if lines else "<no output>"
    m = pattern.match(last)
    if not m:
        raise StepError(f"{name}: cannot parse the last line of stdout: {last!r}\n"
                        f"expected it to match {pattern.pattern}")
    child_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    print(f"[{name}] {last}   (whole process: {child_cpu:.1f} CPU-s incl. start-up)", flush=True)
    return m


def run_decode(args):
    cmd = [args.ferry_bench, "decode-baseline", "--data", args.data,
           "--seconds", str(args.seconds)]
    m = run_tool("decode", cmd, DECODE_RE, tool_timeout(args))
    return float(m.group(1)), float(m.group(2))


def run_pipeline(args, threads, pipeline="imagenet-train", name=None):
    """(img/s, img per CPU-s) of `ferry-bench pipeline`; `pipeline` is a preset name,
    inline JSON or a .json file (recipe_bench.py runs its own spec through here)."""
    name = name or f"ferry-{threads}t"
    cmd = [args.ferry_bench, "pipeline", "--data", args.data, "--pipeline", pipeline,
           "--threads", str(threads), "--seconds", str(args.seconds),
           "--batch-size", str(args.batch_size)]
    m = run_tool(name, cmd, PIPELINE_RE, tool_timeout(args))
    if int(m.group(3)) != threads:
        raise StepError(f"{name}: asked for {threads} threads, tool reports threads={m.group(3)}")
    return float(m.group(1)), float(m.group(2))


def tool_timeout(args):
    # Start-up (listing the corpus, warm-up) plus the window, with a wide margin.
    return 120 + 5 * args.seconds


def run_torchvision(args, transform=None, collate_fn=None, name="torchvision"):
    """(img/s, img per CPU-s) of torchvision's DataLoader; `transform` defaults to the
    plain recipe above, `collate_fn` to default_collate (recipe_bench.py passes its
    DeiT recipe and MixUp/CutMix collate)."""
    print(f"[{name}] in-process DataLoader(num_workers=0), 1 torch thread", flush=True)
    import torch
    import torchvision
    import torchvision.transforms as T

    torch.set_num_threads(1)
    torch.manual_seed(0)
    if transform is None:
        transform = T.Compose([
            T.RandomResizedCrop(224),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]),
        ])
    dataset = torchvision.datasets.ImageFolder(args.data, transform=transform)
    if len(dataset) == 0:
        raise StepError(f"{name}: no images in {args.data}")
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch_size, shuffle=True,
                                         num_workers=0, collate_fn=collate_fn)

    def batches():
        while True:  # as many epochs as the window needs
            yield from loader

    it = batches()
    for _ in range(WARMUP_BATCHES):
        next(it)
    images = 0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    while time.perf_counter() - wall0 < args.seconds:
        x, _ = next(it)
        images += x.shape[0]
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    print(f"[{name}] {images} images in {wall:.2f} s, {cpu:.2f} CPU-s "
          f"(torch {torch.__version__}, torchvision {torchvision.__version__})", flush=True)
    return images / wall, images / cpu


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def fmt(x, digits=1):
    return "n/a" if x is None else f"{x:.{digits}f}"


def build_report(results):
    rows = [(name, *results.get(name, (None, None))) for name in STEPS]
    ips = {name: v[0] for name, v in results.items()}
    ipc = {name: v[1] for name, v in results.items()}
    ratios = [
        ("ferry-1t / torchvision (img per CPU-s)", ratio(ipc.get("ferry-1t"), ipc.get("torchvision"))),
        ("ferry-1t / bare decode (img per CPU-s)", ratio(ipc.get("ferry-1t"), ipc.get("decode"))),
        ("ferry-2t / ferry-1t (img/s)", ratio(ips.get("ferry-2t"), ips.get("ferry-1t"))),
    ]
    return rows, ratios


def print_text(args, info, rows, ratios):
    print()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['date']}")
    print(f"corpus: {args.data}, window {args.seconds} s, batch {args.batch_size}")
    print(f"{'step':<14}{'img/s':>10}{'img/CPU-s':>12}")
    for name, a, b in rows:
        print(f"{name:<14}{fmt(a):>10}{fmt(b):>12}")
    for label, r in ratios:
        print(f"{label:<40}{fmt(r, 2):>8}")


def write_markdown(path, args, info, rows, ratios):
    out = [
        "| step | img/s | img per CPU-s |",
        "|---|---:|---:|",
        *[f"| {name} | {fmt(a)} | {fmt(b)} |" for name, a, b in rows],
        "",
        "| ratio | value |",
        "|---|---:|",
        *[f"| {label} | {fmt(r, 2)} |" for label, r in ratios],
        "",
        f"Machine: {info['cpu']}, {info['cores']} cores; {info['date']}; "
        f"Python {info['python']}.  ",
        f"Corpus `{args.data}`, {args.seconds} s window per step, batch {args.batch_size}.",
        "",
    ]
    with open(path, "w") as f:
        f.write("\n".join(out))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="ImageFolder root (DIR/<class>/<image>)")
    p.add_argument("--ferry-bench", required=True, help="path to the ferry-bench executable")
    p.add_argument("--seconds", type=float, default=10, help="timed window per step")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--markdown", metavar="FILE", help="also write the table as markdown")
    p.add_argument("--skip", action="append", default=[], choices=STEPS,
                   help="leave a step out (repeatable); its cells read n/a")
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.batch_size <= 0:
        p.error("--seconds and --batch-size must be positive")
    if not os.path.isdir(args.data):
        p.error(f"--data {args.data}: not a directory")
    needs_bench = any(s not in args.skip for s in ("decode", "ferry-1t", "ferry-2t"))
    if needs_bench and not (os.path.isfile(args.ferry_bench) and os.access(args.ferry_bench, os.X_OK)):
        p.error(f"--ferry-bench {args.ferry_bench}: not an executable file")
    # Print "10", not "10.0", when handing whole seconds to the tools.
    if args.seconds == int(args.seconds):
        args.seconds = int(args.seconds)
    return args


def main(argv):
    args = parse_args(argv)
    info = machine_info()
    steps = {
        "decode": lambda: run_decode(args),
        "ferry-1t": lambda: run_pipeline(args, 1),
        "ferry-2t": lambda: run_pipeline(args, 2),
        "torchvision": lambda: run_torchvision(args),
    }
    results = {}
    try:
        # The C++ tools first: a tool that prints nothing readable fails the run early.
        for name in ("decode", "ferry-1t", "ferry-2t", "torchvision"):
            if name not in args.skip:
                results[name] = steps[name]()
    except StepError as e:
        print(f"compare.py: {e}", file=sys.stderr)
        return 1
    rows, ratios = build_report(results)
    print_text(args, info, rows, ratios)
    if args.markdown:
        write_markdown(args.markdown, args, info, rows, ratios)
        print(f"wrote {args.markdown}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
