#!/usr/bin/python3
"""The plots of BENCHMARKS.md and the README, from bench/results/summary.json (the
figures of the benchmark runs BENCHMARKS.md quotes; each section there names the
command that printed them, and bench/results/*.txt keeps those outputs).

    /usr/bin/python3 bench/plots.py [--summary bench/results/summary.json] [--out bench/results]

Needs matplotlib (Debian: python3-matplotlib); Ferry itself does not.
"""
import argparse
import json
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

FERRY = "#1f6fb4"
PEER = "#b0b7c0"
ANCHOR = "#d9822b"
LOST = "#c23b22"


def _bars(ax, names, values, colors, fmt="{:,.0f}", xlabel=""):
    y = range(len(names))
    bars = ax.barh(list(y), values, color=colors)
    ax.set_yticks(list(y))
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    top = max(values) if values else 1
    for b, v in zip(bars, values):
        ax.text(b.get_width() + top * 0.01, b.get_y() + b.get_height() / 2, fmt.format(v), va="center", fontsize=9)
    ax.set_xlim(0, top * 1.22)
    ax.spines[["top", "right"]].set_visible(False)


def per_core(s, out):
    pc = s["per_core"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), sharey=False)
    for ax, dtype in zip(axes, ("float32", "uint8")):
        rows = sorted(pc[dtype].items(), key=lambda kv: -kv[1])
        names = [k for k, _ in rows]
        values = [v for _, v in rows]
        colors = [FERRY if n == "Ferry" else PEER for n in names]
        if dtype == "float32" and "bare_decode" in pc:
            names.append("bare libjpeg-turbo decode\n(full size; bench/compare.py)")
            values.append(pc["bare_decode"])
            colors.append(ANCHOR)
        _bars(ax, names, values, colors, xlabel="images per CPU-second (one core)")
        ax.set_title("imagenet-train, %s output" % dtype, fontsize=11)
    fig.suptitle("Per core, in-process: decode + RandomResizedCrop 224 + flip (+ normalize)", fontsize=12)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "per_core.png"), dpi=110)
    plt.close(fig)


def service(s, out):
    sv = s["service"]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    workers = sorted(sv["images_per_s"]["Ferry"].keys())
    x = range(len(workers))
    w = 0.38
    ax = axes[0]
    for i, (name, color) in enumerate((("Ferry", FERRY), ("tf.data service", PEER))):
        vals = [sv["images_per_s"][name][k] for k in workers]
        bars = ax.bar([j + (i - 0.5) * w for j in x], vals, w, color=color, label=name)
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, b.get_height(), "{:,.0f}".format(v), ha="center", va="bottom",
                    fontsize=8)
    ax.set_xticks(list(x))
    ax.set_xticklabels(["%s worker%s" % (k, "" if k == "1" else "s") for k in workers])
    ax.set_ylabel("images/s delivered")
    ax.legend(fontsize=8, frameon=False)
    ax.set_title("throughput (each worker on its own core)", fontsize=10)
    for ax, key, label, fmt in ((axes[1], "consumer_ms_per_image", "consumer CPU ms per image", "{:.3f}"),
                                (axes[2], "first_batch_s", "seconds to the first batch", "{:.2f}")):
        names = ["Ferry", "tf.data service"]
        _bars(ax, names, [sv[key][n] for n in names], [FERRY, PEER], fmt=fmt, xlabel=label)
        ax.set_title(label, fontsize=10)
    for ax in axes:
        ax.spines[["top", "right"]].set_visible(False)
    fig.suptitle("Service mode on loopback, %s batches" % sv.get("dtype", "uint8"), fontsize=12)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "service.png"), dpi=110)
    plt.close(fig)


def failure(s, out):
    f = s["failure"]
    fig, ax = plt.subplots(figsize=(8, 2.8))
    names = list(f["systems"].keys())
    n = f["samples_per_epoch"]
    for i, name in enumerate(names):
        r = f["systems"][name]
        ok = n - r["lost"]
        ax.barh(i, ok, color=FERRY if name == "Ferry" else PEER)
        ax.barh(i, r["lost"], left=ok, color=LOST)
        ax.barh(i, r["repeated"], left=n, color=ANCHOR)
        ax.text(n * 1.01, i, "lost %d, repeated %d" % (r["lost"], r["repeated"]), va="center", fontsize=9)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(names)
    ax.invert_yaxis()
    ax.set_xlim(0, n * 1.45)
    ax.set_xlabel("samples of the epoch a worker was SIGKILLed in (of %d)" % n)
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_title("What a worker's death costs (red: lost)", fontsize=11)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "failure.png"), dpi=110)
    plt.close(fig)


def trainer(s, out):
    t = s["trainer"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.0))
    names = list(t["step_ms"].keys())
    _bars(axes[0], names, [t["step_ms"][n] for n in names],
          [ANCHOR if i == 0 else FERRY if "remote" in n or "offloaded" in n else PEER for i, n in enumerate(names)],
          fmt="{:.1f}", xlabel="step ms (a CPU-bound trainer on one core; median of the runs)")
    axes[0].set_title("the trainer's step", fontsize=10)
    runs = t["overhead_runs"]
    axes[1].plot(range(1, len(runs) + 1), runs, "o-", color=FERRY, label="offloaded / no input, per run")
    axes[1].axhline(t["target"], color=LOST, ls="--", lw=1, label="target %.2f" % t["target"])
    axes[1].axhline(1.0, color="#555", lw=0.8)
    axes[1].set_xticks(range(1, len(runs) + 1))
    axes[1].set_xlabel("run")
    axes[1].set_ylim(min(0.99, min(runs) - 0.01), max(runs + [t["target"]]) + 0.02)
    axes[1].legend(fontsize=8, frameon=False)
    axes[1].set_title("the trainer's cost of remote input: median %.3f" % t["overhead_median"], fontsize=10)
    axes[1].spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "trainer.png"), dpi=110)
    plt.close(fig)


def dispatcher(s, out):
    d = s["dispatcher"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.0))
    sc = d["scale"]
    names = ["1 worker", "%d workers" % sc["workers"], "%d x 1 worker (ideal)" % sc["workers"]]
    _bars(axes[0], names, [sc["single"], sc["aggregate"], sc["single"] * sc["workers"]], [FERRY, FERRY, PEER],
          fmt="{:,.1f}", xlabel="batches/s through one client")
    eff = sc.get("efficiency", sc["aggregate"] / (sc["single"] * sc["workers"]))
    axes[0].set_title("scale-out: efficiency %.3f (as ferry-bench printed it)" % eff, fontsize=10)
    ld = d["load"]
    _bars(axes[1], ["p50", "p99"], [ld["p50_ms"], ld["p99_ms"]], [FERRY, FERRY], fmt="{:.2f} ms",
          xlabel="heartbeat round trip, ms")
    axes[1].set_title("one dispatcher, %d workers, %s leases/s, journal fsynced"
                      % (ld["workers"], "{:,.0f}".format(ld["leases_per_s"])), fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "dispatcher.png"), dpi=110)
    plt.close(fig)


def dispatcher_scale(s, out):
    """ferry-bench dispatcher-load at 1k/4k/10k workers: heartbeats handled and p99."""
    d = s["dispatcher_scale"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.2))
    styles = {"one_job": (FERRY, "o", "1 job"), "thousand_jobs": (ANCHOR, "s", "1,000 jobs, 8 workers each")}
    for key, (color, marker, label) in styles.items():
        # The figures before (one io thread, every reply restating its jobs), dashed.
        for suffix, style, note in (("_before", "--", " (before)"), ("", "-", "")):
            rows = d.get(key + suffix, [])
            if not rows:
                continue
            w = [r["workers"] for r in rows]
            kw = dict(marker=marker, color=color, linestyle=style, label=label + note, alpha=0.45 if suffix else 1.0)
            axes[0].plot(w, [r["handled_pct"] for r in rows], **kw)
            axes[1].plot(w, [r["p99_ms"] for r in rows], **kw)
    axes[0].axhline(90, color=LOST, linestyle="--", linewidth=1, label="target 90%")
    axes[0].set_ylim(0, 105)
    axes[0].set_xlabel("simulated workers (one heartbeat per 100 ms each)")
    axes[0].set_ylabel("% of offered heartbeats handled")
    axes[1].axhline(50, color=LOST, linestyle="--", linewidth=1, label="target 50 ms")
    axes[1].set_yscale("log")
    axes[1].set_xlabel("simulated workers")
    axes[1].set_ylabel("heartbeat round trip p99, ms")
    for ax in axes:
        ax.set_xscale("log")
        ax.set_xticks([1000, 4000, 10000])
        ax.set_xticklabels(["1,000", "4,000", "10,000"])
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(fontsize=8, frameon=False)
    axes[0].set_title("one dispatcher (%s)" % d.get("machine", ""), fontsize=10)
    axes[1].set_title("journal fsynced; dispatcher and load generator share the CPUs", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "dispatcher_scale.png"), dpi=110)
    plt.close(fig)


def user_code(s, out):
    u = s["user_code"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 2.8))
    names = list(u["images_per_cpu_s"].keys())
    _bars(axes[0], names, [u["images_per_cpu_s"][n] for n in names],
          [PEER if "DataLoader" in n else FERRY for n in names], xlabel="images per CPU-second (all processes)")
    axes[0].set_title("a PIL Dataset of the script's own", fontsize=10)
    _bars(axes[1], names, [u["trainer_ms_per_batch"][n] for n in names],
          [PEER if "DataLoader" in n else FERRY for n in names], fmt="{:.2f}",
          xlabel="the trainer process's CPU ms per batch")
    axes[1].set_title("the trainer's own CPU", fontsize=10)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "user_code.png"), dpi=110)
    plt.close(fig)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--summary", default=os.path.join(here, "results", "summary.json"))
    ap.add_argument("--out", default=os.path.join(here, "results"))
    a = ap.parse_args()
    with open(a.summary) as f:
        s = json.load(f)
    os.makedirs(a.out, exist_ok=True)
    for fn in (per_core, service, failure, trainer, dispatcher, dispatcher_scale, user_code):
        key = fn.__name__
        if key in s:
            fn(s, a.out)
            print("wrote", os.path.join(a.out, key + ".png"))


if __name__ == "__main__":
    main()
