#!/usr/bin/python3
"""Ferry against torchvision's DataLoader on a DeiT-style training recipe, per CPU-second.

    /usr/bin/python3 bench/recipe_bench.py [--data DIR] [--ferry-bench PATH] [--ferry-python DIR]
        [--seconds 10] [--batch-size 64] [--cpu N] [--spec-out FILE] [--markdown FILE] [--skip STEP]

The recipe (DeiT's, as torchvision's reference scripts write it):
    RandomResizedCrop(224, bicubic), RandomHorizontalFlip, RandAugment(2, 9),
    ColorJitter(0.4, 0.4, 0.4), ToTensor, Normalize(ImageNet), RandomErasing(p=0.25),
    collate: RandomChoice([RandomMixup(alpha=0.8, p=1), RandomCutmix(alpha=1.0, p=1)])
    (tests/python/reference/transforms.py), num_classes = the corpus's classes, batch 64.

Steps, each alone, over a timed window of --seconds (compare.py's helpers run them):
  deit-torchvision   ImageFolder + that Compose + DataLoader(num_workers=0,
                     collate_fn=the MixUp/CutMix collate), in this process, 1 torch thread.
  deit-ferry-1t/2t   `ferry-bench pipeline --pipeline SPEC.json --threads N`, where the spec
                     is ferry.pipeline_from_transform(the same Compose) plus the op
                     ferry.mixing.mix_op(the same collate_fn) finds.
  torchvision        compare.py's plain recipe (RandomResizedCrop, flip, ToTensor, Normalize).
  ferry-1t/2t        `ferry-bench pipeline --pipeline imagenet-train`: the same plain recipe,
                     printed next to it so that a regression of the base pipeline shows.

One core: the torchvision steps and the 1-thread Ferry steps run pinned to one CPU (--cpu;
sched_setaffinity, inherited by the tool), so every thread the Ferry process has (prefetch,
I/O) shares that core too. The 2-thread steps get every usable CPU and are read for scaling
(img/s), not efficiency. The headline ratio is deit-ferry-1t / deit-torchvision in images per
CPU-second; the target is >= 3.0x.

A step that cannot run is reported as such, with the reason, and its cells read n/a; the
exit status is then 1.
"""

import argparse
import contextlib
import importlib.util
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import compare  # noqa: E402  (bench/compare.py: the step runners, the machine line)

TARGET = 3.0
MIXING_ALPHA = {"mixup_alpha": 0.8, "cutmix_alpha": 1.0}
IMAGENET_MEAN = [0.485, 0.456, 0.406]
IMAGENET_STD = [0.229, 0.224, 0.225]
STEPS = ("deit-ferry-1t", "deit-ferry-2t", "ferry-1t", "ferry-2t", "deit-torchvision", "torchvision")


@contextlib.contextmanager
def pinned(cpus):
    """Runs the body with this process (and the tools it starts) on `cpus`."""
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def load_reference_mixing():
    """RandomMixup / RandomCutmix of tests/python/reference/transforms.py (torchvision's
    reference scripts' classes), loaded by path: the module's name would shadow others."""
    path = os.path.join(ROOT, "tests", "python", "reference", "transforms.py")
    spec = importlib.util.spec_from_file_location("reference_transforms", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.RandomMixup, module.RandomCutmix


def make_collate(mixing):
    """The reference scripts' collate: mixing applied to the default-collated batch. Written
    as they write it, so that ferry.mixing.mix_op recognises it as it would in a script."""
    from torch.utils.data import default_collate

    def collate_fn(batch):
        return mixing(*default_collate(batch))
    return collate_fn


def deit_recipe(num_classes):
    """(the transform Compose, the MixUp/CutMix collate_fn) of the DeiT recipe."""
    import torchvision.transforms as T
    random_mixup, random_cutmix = load_reference_mixing()
    transform = T.Compose([
        T.RandomResizedCrop(224, interpolation=T.InterpolationMode.BICUBIC),
        T.RandomHorizontalFlip(),
        T.RandAugment(num_ops=2, magnitude=9),
        T.ColorJitter(0.4, 0.4, 0.4),
        T.ToTensor(),
        T.Normalize(mean=IMAGENET_MEAN, std=IMAGENET_STD),
        T.RandomErasing(p=0.25),
    ])
    mixing = T.RandomChoice([random_mixup(num_classes, p=1.0, alpha=MIXING_ALPHA["mixup_alpha"]),
                             random_cutmix(num_classes, p=1.0, alpha=MIXING_ALPHA["cutmix_alpha"])])
    return transform, make_collate(mixing)


def ferry_spec(ferry_python, transform, collate_fn):
    """The Ferry spec of the recipe, as the drop-in derives it: ValueError when it cannot."""
    sys.path.insert(0, ferry_python)
    import ferry
    import ferry.mixing
    spec = ferry.pipeline_from_transform(transform)
    op, why = ferry.mixing.mix_op(collate_fn)  # (op dict, None) or (None, why not)
    if op is None:
        raise ValueError(f"ferry.mixing.mix_op does not recognise the collate_fn: {why}")
    spec["ops"].append(op)
    return spec


def class_count(data):
    return sum(1 for e in os.scandir(data) if e.is_dir())


def run_steps(args, spec_path, transform, collate_fn):
    """{step: (img/s, img per CPU-s)} and {step: why it could not run}."""
    one_core = {args.cpu}
    all_cores = os.sched_getaffinity(0)
    plan = {
        # The C++ tools first, as compare.py does: a broken tool shows before the slow steps.
        "deit-ferry-1t": (one_core, lambda: compare.run_pipeline(args, 1, spec_path, "deit-ferry-1t")),
        "deit-ferry-2t": (all_cores, lambda: compare.run_pipeline(args, 2, spec_path, "deit-ferry-2t")),
        "ferry-1t": (one_core, lambda: compare.run_pipeline(args, 1)),
        "ferry-2t": (all_cores, lambda: compare.run_pipeline(args, 2)),
        "deit-torchvision": (one_core, lambda: compare.run_torchvision(args, transform, collate_fn,
                                                                       "deit-torchvision")),
        "torchvision": (one_core, lambda: compare.run_torchvision(args)),
    }
    results, failed = {}, {}
    for name in STEPS:
        if name in args.skip:
            failed[name] = "skipped (--skip)"
            continue
        if spec_path is None and name.startswith("deit-ferry"):
            failed[name] = f"no Ferry spec: {args.spec_error}"
            continue
        if len(all_cores) < 2 and name.endswith("-2t"):
            failed[name] = "one usable CPU: a 2-thread run would not show scaling"
            continue
        cpus, step = plan[name]
        try:
            with pinned(cpus):
                results[name] = step()
        except compare.StepError as e:
            failed[name] = str(e).splitlines()[0]
            print(f"recipe_bench.py: {name} could not run: {e}", file=sys.stderr, flush=True)
    return results, failed


def build_rows(results):
    """One row per recipe: its figures and ratios (None where a step did not run)."""
    rows = []
    for recipe, tv, f1, f2 in (("DeiT (RRC bicubic, flip, RandAugment(2, 9), ColorJitter, Normalize, "
                                "RandomErasing, MixUp/CutMix)", "deit-torchvision", "deit-ferry-1t", "deit-ferry-2t"),
                               ("imagenet-train (RRC, flip, Normalize)", "torchvision", "ferry-1t", "ferry-2t")):
        t, a, b = (results.get(k, (None, None)) for k in (tv, f1, f2))
        rows.append({
            "recipe": recipe,
            "tv_ipc": t[1], "f1_ipc": a[1], "efficiency": compare.ratio(a[1], t[1]),
            "tv_ips": t[0], "f1_ips": a[0], "f2_ips": b[0], "f2_ipc": b[1], "scaling": compare.ratio(b[0], a[0]),
        })
    return rows


COLUMNS = (("torchvision img/CPU-s", "tv_ipc", 1), ("ferry-1t img/CPU-s", "f1_ipc", 1),
           ("ferry-1t / torchvision", "efficiency", 2), ("torchvision img/s", "tv_ips", 1),
           ("ferry-1t img/s", "f1_ips", 1), ("ferry-2t img/s", "f2_ips", 1), ("ferry-2t img/CPU-s", "f2_ipc", 1),
           ("ferry-2t / ferry-1t img/s", "scaling", 2))


def verdict(rows):
    r = rows[0]["efficiency"]
    if r is None:
        return f"DeiT target >= {TARGET:.1f}x: not measured (a step did not run)"
    return f"DeiT target >= {TARGET:.1f}x: {'met' if r >= TARGET else 'NOT met'} ({r:.2f}x)"


def print_text(args, info, rows, failed):
    print()
    print(f"machine: {info['cpu']}, {info['cores']} cores, {info['date']}")
    print(f"corpus: {args.data}, window {args.seconds} s per step, batch {args.batch_size}, "
          f"one-core steps on CPU {args.cpu}")
    for r in rows:
        print(r["recipe"])
        for label, key, digits in COLUMNS:
            print(f"  {label:<28}{compare.fmt(r[key], digits):>10}")
    print(verdict(rows))
    for name, why in failed.items():
        print(f"  {name}: not run: {why}")


def write_markdown(path, args, info, rows, failed, spec_path):
    out = [
        "| recipe | " + " | ".join(label for label, _, _ in COLUMNS) + " |",
        "|---|" + "---:|" * len(COLUMNS),
        *["| " + r["recipe"] + " | " + " | ".join(compare.fmt(r[k], d) for _, k, d in COLUMNS) + " |" for r in rows],
        "",
        f"{verdict(rows)}.  ",
        f"Machine: {info['cpu']}, {info['cores']} cores; {info['date']}; Python {info['python']}.  ",
        f"Corpus `{args.data}`, {args.seconds} s window per step, batch {args.batch_size}; torchvision and "
        f"ferry-1t pinned to one CPU, ferry-2t on all usable CPUs. Ferry spec: `{spec_path}`.",
        "",
    ]
    out += [f"- {name}: not run: {why}" for name, why in failed.items()]
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default=os.environ.get("FERRY_SAMPLE_DATA", os.path.join(ROOT, "data", "sample")),
                   help="ImageFolder root (default: $FERRY_SAMPLE_DATA, else data/sample)")
    p.add_argument("--ferry-bench", default=os.path.join(ROOT, "build", "bench", "ferry-bench"))
    p.add_argument("--ferry-python", default=os.environ.get("FERRY_PYTHON_DIR", os.path.join(ROOT, "build", "python")),
                   help="directory holding the ferry package (default: $FERRY_PYTHON_DIR, else build/python)")
    p.add_argument("--seconds", type=float, default=10, help="timed window per step")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--cpu", type=int, default=None, help="the CPU of the one-core steps (default: the last usable)")
    p.add_argument("--spec-out", metavar="FILE", help="where to write the Ferry spec (default: a temporary file)")
    p.add_argument("--markdown", metavar="FILE", help="also write the table as markdown")
    p.add_argument("--skip", action="append", default=[], choices=STEPS, help="leave a step out (repeatable)")
    args = p.parse_args(argv)
    if args.seconds <= 0 or args.batch_size <= 0:
        p.error("--seconds and --batch-size must be positive")
    if not os.path.isdir(args.data):
        p.error(f"--data {args.data}: not a directory")
    needs_bench = any(s not in args.skip for s in STEPS if "ferry" in s)
    if needs_bench and not (os.path.isfile(args.ferry_bench) and os.access(args.ferry_bench, os.X_OK)):
        p.error(f"--ferry-bench {args.ferry_bench}: not an executable file")
    usable = sorted(os.sched_getaffinity(0))
    if args.cpu is None:
        args.cpu = usable[-1]  # CPU 0 takes most interrupts on a shared box
    elif args.cpu not in usable:
        p.error(f"--cpu {args.cpu}: not one of the usable CPUs {usable}")
    if args.seconds == int(args.seconds):
        args.seconds = int(args.seconds)
    return args


def main(argv):
    args = parse_args(argv)
    info = compare.machine_info()
    num_classes = class_count(args.data)
    transform, collate_fn = deit_recipe(num_classes)
    print(f"[recipe] {num_classes} classes in {args.data}", flush=True)
    spec_path, args.spec_error = None, None
    try:
        spec = ferry_spec(args.ferry_python, transform, collate_fn)
    except (ImportError, ValueError) as e:
        args.spec_error = f"{type(e).__name__}: {e}"
        print(f"recipe_bench.py: the DeiT recipe has no Ferry spec: {args.spec_error}", file=sys.stderr)
    else:
        if args.spec_out:
            spec_path = args.spec_out
        else:
            fd, spec_path = tempfile.mkstemp(prefix="ferry-deit-", suffix=".json")
            os.close(fd)
        with open(spec_path, "w") as f:
            json.dump(spec, f, indent=1)
        print(f"[recipe] Ferry spec ({spec_path}): {json.dumps(spec)}", flush=True)
    results, failed = run_steps(args, spec_path, transform, collate_fn)
    rows = build_rows(results)
    print_text(args, info, rows, failed)
    if args.markdown:
        write_markdown(args.markdown, args, info, rows, failed, spec_path)
        print(f"wrote {args.markdown}")
    return 1 if any(not why.startswith("skipped") for why in failed.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
