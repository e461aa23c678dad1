#!/usr/bin/python3
"""Per-op timings: Ferry's ops (ferry-ops-bench) against torchvision's, in one run, on one core.

    /usr/bin/python3 bench/op_bench.py [--ops-bench PATH] [--data DIR | --image PHOTO.jpg]
        [--min-time 0.2] [--repetitions 3] [--cpu N] [--filter REGEX] [--markdown FILE]

Both sides time the same photo (the first JPEG of the corpus, in sorted order, unless
--image), resized to 224x224 (400x300 for RandomResizedCrop), one call per iteration:
  ferry        ferry-ops-bench --benchmark_format=json (bench/ops_bench.cc): MakeOp(...)->Apply
               on a fresh copy of the image with a fresh SampleRng per call; the copy's own
               time (copy/<WxH>, measured beside it) is subtracted.
  torchvision  the equivalent transform (torchvision.transforms, as a recipe builds it) on the
               PIL image, on a float tensor for RandomErasing and on a 64x3x224x224 batch for
               MixUp/CutMix (tests/python/reference/transforms.py), timed with timeit.
Each figure is the median of --repetitions windows of at least --min-time seconds, in CPU
time (Google Benchmark's process CPU time; time.process_time here), with this process and the
tool pinned to one CPU and torch.set_num_threads(1). Random ops average over their draws.
The ratio is torchvision / ferry: above 1, Ferry is faster. Rows where Ferry is slower are
marked; they are findings, not noise, when both runs agree.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare  # noqa: E402  (bench/compare.py: the machine line, the number format)
from recipe_bench import load_reference_mixing  # noqa: E402

MEAN = [0.485, 0.456, 0.406]
STD = [0.229, 0.224, 0.225]
BATCH = 64
NUM_CLASSES = 8


def first_jpeg(root):
    """The first JPEG under `root`, directories and files in sorted order (as ops_bench.cc walks)."""
    for entry in sorted(os.listdir(root)):
        path = os.path.join(root, entry)
        if os.path.isdir(path):
            found = first_jpeg(path)
            if found:
                return found
        elif entry.lower().endswith((".jpg", ".jpeg")):
            return path
    return None


def torchvision_cases(photo):
    """{ferry benchmark name: (torchvision call, what it is)} on the same photo and sizes."""
    import torch
    import torchvision.transforms as T
    import torchvision.transforms.functional as F
    from PIL import Image

    rgb = Image.open(photo).convert("RGB")
    # BOX: area averaging, as ops_bench.cc's cv::INTER_AREA.
    small = rgb.resize((224, 224), Image.Resampling.BOX)
    large = rgb.resize((400, 300), Image.Resampling.BOX)
    bilinear, bicubic = T.InterpolationMode.BILINEAR, T.InterpolationMode.BICUBIC
    tensor = F.normalize(F.to_tensor(small), MEAN, STD)
    batch = tensor.unsqueeze(0).repeat(BATCH, 1, 1, 1)
    batch += torch.arange(BATCH, dtype=batch.dtype).view(BATCH, 1, 1, 1) * 1e-3  # rows differ, as ops_bench.cc's
    target = torch.arange(BATCH) % NUM_CLASSES
    random_mixup, random_cutmix = load_reference_mixing()
    mixup = random_mixup(NUM_CLASSES, p=1.0, alpha=0.8)
    cutmix = random_cutmix(NUM_CLASSES, p=1.0, alpha=1.0)
    choice = T.RandomChoice([mixup, cutmix])

    def on(t, img):
        return lambda: t(img)

    return {
        "op/random_resized_crop_bilinear": (on(T.RandomResizedCrop(224, interpolation=bilinear), large),
                                            "RandomResizedCrop(224, bilinear), 400x300 in"),
        "op/random_resized_crop_bicubic": (on(T.RandomResizedCrop(224, interpolation=bicubic), large),
                                           "RandomResizedCrop(224, bicubic), 400x300 in"),
        "op/hflip": (lambda: F.hflip(small), "F.hflip"),
        "op/rand_augment": (on(T.RandAugment(num_ops=2, magnitude=9), small), "RandAugment(2, 9)"),
        "op/trivial_augment_wide": (on(T.TrivialAugmentWide(), small), "TrivialAugmentWide()"),
        "op/auto_augment": (on(T.AutoAugment(T.AutoAugmentPolicy.IMAGENET), small), "AutoAugment(IMAGENET)"),
        "op/augmix": (on(T.AugMix(), small), "AugMix()"),
        "op/color_jitter": (on(T.ColorJitter(0.4, 0.4, 0.4), small), "ColorJitter(0.4, 0.4, 0.4)"),
        "op/color_jitter_hue": (on(T.ColorJitter(0.4, 0.4, 0.4, 0.1), small), "ColorJitter(0.4, 0.4, 0.4, 0.1)"),
        "op/gaussian_blur": (on(T.GaussianBlur(5), small), "GaussianBlur(5, sigma=(0.1, 2))"),
        "op/random_rotation": (on(T.RandomRotation(30, interpolation=bilinear), small),
                               "RandomRotation(30, bilinear)"),
        "op/random_affine": (on(T.RandomAffine(30, translate=(0.1, 0.1), scale=(0.75, 1.25), shear=10), small),
                             "RandomAffine(30, (0.1, 0.1), (0.75, 1.25), 10)"),
        "op/random_perspective": (on(T.RandomPerspective(p=1.0), small), "RandomPerspective(p=1)"),
        "op/random_equalize": (on(T.RandomEqualize(p=1.0), small), "RandomEqualize(p=1)"),
        "op/random_autocontrast": (on(T.RandomAutocontrast(p=1.0), small), "RandomAutocontrast(p=1)"),
        "op/random_posterize": (on(T.RandomPosterize(4, p=1.0), small), "RandomPosterize(4, p=1)"),
        "op/random_solarize": (on(T.RandomSolarize(128, p=1.0), small), "RandomSolarize(128, p=1)"),
        "op/random_invert": (on(T.RandomInvert(p=1.0), small), "RandomInvert(p=1)"),
        "op/random_adjust_sharpness": (on(T.RandomAdjustSharpness(2.0, p=1.0), small),
                                       "RandomAdjustSharpness(2, p=1)"),
        "op/random_grayscale": (on(T.RandomGrayscale(p=1.0), small), "RandomGrayscale(p=1)"),
        # Ferry's normalize is the fused uint8 -> float32 write: torchvision's ToTensor + Normalize.
        "normalize": (lambda: F.normalize(F.to_tensor(small), MEAN, STD), "ToTensor + Normalize (PIL in)"),
        # The recipes' default inplace=False: the clone is part of what torchvision pays.
        "random_erasing": (on(T.RandomErasing(p=1.0), tensor), "RandomErasing(p=1), 3x224x224 float (clones)"),
        # As the reference collate calls them (inplace=False: a clone of the batch).
        "mixup_cutmix/choice": (lambda: choice(batch, target), "RandomChoice(RandomMixup 0.8, RandomCutmix 1.0)"),
        "mixup_cutmix/mixup": (lambda: mixup(batch, target), "RandomMixup(alpha=0.8, p=1)"),
        "mixup_cutmix/cutmix": (lambda: cutmix(batch, target), "RandomCutmix(alpha=1.0, p=1)"),
    }


def time_call(fn, min_time, repetitions):
    """Median CPU seconds per call over `repetitions` windows of >= min_time each."""
    fn()  # first-call costs (lazy imports, allocator) stay out of the figure
    number = 1
    while True:  # as timeit.autorange, but to min_time and in CPU time
        t0 = time.process_time()
        for _ in range(number):
            fn()
        elapsed = time.process_time() - t0
        if elapsed >= min_time:
            break
        number = number * 2 if elapsed <= 0 else max(number * 2, int(number * min_time / elapsed * 1.1) + 1)
    runs = [elapsed / number]
    for _ in range(repetitions - 1):
        t0 = time.process_time()
        for _ in range(number):
            fn()
        runs.append((time.process_time() - t0) / number)
    return statistics.median(runs)


def run_ferry(args, photo):
    """{benchmark name: median CPU seconds per iteration}, or raises compare.StepError."""
    cmd = [args.ops_bench, f"--image={photo}", "--benchmark_format=json",
           f"--benchmark_min_time={args.min_time}", f"--benchmark_repetitions={args.repetitions}",
           "--benchmark_report_aggregates_only=true"]
    if args.filter:
        # The copies are always needed: they are subtracted.
        cmd.append(f"--benchmark_filter=^copy/|{args.filter}")
    print(f"[ferry] {' '.join(cmd)}", flush=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise compare.StepError(f"ferry-ops-bench did not run: {e}")
    if proc.returncode != 0:
        raise compare.StepError(f"ferry-ops-bench: exit status {proc.returncode}: {proc.stderr[-2000:]}")
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError as e:
        raise compare.StepError(f"ferry-ops-bench: output is not JSON ({e}): {proc.stdout[:500]!r}")
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    out = {}
    for b in report.get("benchmarks", []):
        if b.get("error_occurred"):
            out[b["run_name"].removesuffix("/process_time")] = b.get("error_message", "error")
            continue
        if b.get("aggregate_name", "median" if args.repetitions == 1 else None) != "median":
            continue
        name = b["run_name"].removesuffix("/process_time")
        out[name] = b["cpu_time"] * scale[b.get("time_unit", "ns")]
    return out


def build_rows(ferry, tv, tv_what):
    """Table rows: (op, ferry us, torchvision us, ratio, note)."""
    copies = {"op/random_resized_crop_bilinear": "copy/400x300", "op/random_resized_crop_bicubic": "copy/400x300"}
    rows = []
    for name, what in tv_what.items():
        f = ferry.get(name)
        note = what
        if isinstance(f, str):  # the tool's error for this op
            note, f = f"ferry error: {f}", None
        elif f is not None and name.startswith("op/"):
            copy = ferry.get(copies.get(name, "copy/224x224"))
            f = f - copy if isinstance(copy, float) else None
        t = tv.get(name)
        if name.startswith("mixup_cutmix/"):
            rows.append((f"{name} (batch of {BATCH})", f, t, compare.ratio(t, f), note))
            rows.append((f"{name} (per sample)", f and f / BATCH, t and t / BATCH, compare.ratio(t, f), ""))
        else:
            rows.append((name.removeprefix("op/"), f, t, compare.ratio(t, f), note))
    return rows


def us(x):
    return compare.fmt(None if x is None else x * 1e6, 1)


def print_table(rows, ferry, info, args, photo):
    print()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['date']}; one core (CPU {args.cpu})")
    print(f"photo: {photo}; median of {args.repetitions} windows of >= {args.min_time} s, CPU time")
    print(f"{'op':<34}{'ferry us':>11}{'tv us':>11}{'tv/ferry':>10}  torchvision")
    for op, f, t, r, note in rows:
        flag = "  <-- ferry slower" if r is not None and r < 1 else ""
        print(f"{op:<34}{us(f):>11}{us(t):>11}{compare.fmt(r, 2):>10}  {note}{flag}")
    print(f"copy subtracted from ferry's image ops: 224x224 {us(ferry.get('copy/224x224'))} us, "
          f"400x300 {us(ferry.get('copy/400x300'))} us")


def write_markdown(path, rows, ferry, info, args, photo):
    out = ["| op | ferry us | torchvision us | torchvision / ferry | torchvision call |",
           "|---|---:|---:|---:|---|"]
    out += [f"| {op} | {us(f)} | {us(t)} | {compare.fmt(r, 2)} | {note} |" for op, f, t, r, note in rows]
    out += ["",
            f"Machine: {info['cpu']}, {info['cores']} cores, one core used (CPU {args.cpu}); {info['date']}; "
            f"Python {info['python']}.  ",
            f"Photo `{photo}` at 224x224 (400x300 into RandomResizedCrop); median of {args.repetitions} windows "
            f">= {args.min_time} s each, CPU time. Ferry's image ops less the copy of their input "
            f"(224x224 {us(ferry.get('copy/224x224'))} us, 400x300 {us(ferry.get('copy/400x300'))} us).",
            ""]
    with open(path, "w") as f:
        f.write("\n".join(out))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops-bench", default=os.path.join(ROOT, "build", "bench", "ferry-ops-bench"))
    p.add_argument("--data", default=os.environ.get("FERRY_SAMPLE_DATA", os.path.join(ROOT, "data", "sample")),
                   help="ImageFolder whose first JPEG is timed (default: $FERRY_SAMPLE_DATA, else data/sample)")
    p.add_argument("--image", help="time this photo instead")
    p.add_argument("--min-time", type=float, default=0.2, help="seconds per timed window")
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--cpu", type=int, default=None, help="the CPU to run on (default: the last usable)")
    p.add_argument("--filter", help="regex of benchmark names to run (e.g. 'augment|mixup')")
    p.add_argument("--markdown", metavar="FILE", help="also write the table as markdown")
    args = p.parse_args(argv)
    if args.min_time <= 0 or args.repetitions < 1:
        p.error("--min-time must be positive and --repetitions >= 1")
    usable = sorted(os.sched_getaffinity(0))
    if args.cpu is None:
        args.cpu = usable[-1]  # CPU 0 takes most interrupts on a shared box
    elif args.cpu not in usable:
        p.error(f"--cpu {args.cpu}: not one of the usable CPUs {usable}")
    return args


def main(argv):
    args = parse_args(argv)
    photo = args.image or (first_jpeg(args.data) if os.path.isdir(args.data) else None)
    if not photo or not os.path.isfile(photo):
        print(f"op_bench.py: no photo to time (--image, or a JPEG under --data {args.data})", file=sys.stderr)
        return 2
    info = compare.machine_info()  # before pinning: the machine's cores, not the one used
    os.sched_setaffinity(0, {args.cpu})  # one core, for this process and the tool it starts
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(0)
    status = 0
    try:
        ferry = run_ferry(args, photo)
    except compare.StepError as e:
        print(f"op_bench.py: {e}\nthe ferry column reads n/a", file=sys.stderr)
        ferry, status = {}, 1
    cases = torchvision_cases(photo)
    if args.filter:
        cases = {k: v for k, v in cases.items() if re.search(args.filter, k)}
    tv = {}
    for name, (fn, _) in cases.items():
        tv[name] = time_call(fn, args.min_time, args.repetitions)
        print(f"[torchvision] {name}: {tv[name] * 1e6:.1f} us", flush=True)
    rows = build_rows(ferry, tv, {k: what for k, (_, what) in cases.items()})
    print_table(rows, ferry, info, args, photo)
    if args.markdown:
        write_markdown(args.markdown, rows, ferry, info, args, photo)
        print(f"wrote {args.markdown}")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
