#!/usr/bin/env python3
"""Ferry against the loaders a team would pick instead, on the same photographs, the
same recipe and the same cores, in one run (issue 26): the per-core, in-process
scenario. Each peer runs in its own process, pinned with taskset to 1 or 2 cores, in
its own idiom for the imagenet-train recipe (decode, RandomResizedCrop 224, flip,
normalize to float32 CHW; and the uint8 form without the normalize):

  torchvision  DataLoader (PIL; num_workers=0, or 2 worker processes)      Debian's torch
  tf.data      decode_and_crop_jpeg, resize, flip, normalize               tensorflow-cpu
  DALI (CPU)   readers.file, decoders.image_random_crop, resize,
               crop_mirror_normalize, device_id=None                       nvidia-dali-cuda120
  SPDL         demux_image, decode_packets through an FFmpeg filter        spdl
  Ferry        ferry.Loader, local mode                                    this build

A peer that cannot run here (an import that needs a GPU driver, a missing wheel) is
listed with the reason; no figure is made up. Run by bench/peers/run.sh (which makes
the peers' virtual environment); by hand:

    /usr/bin/python3 bench/peers/peers.py --venv VENV [--data data/sample] [--seconds 10]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEERS = [("Ferry", "peer_ferry.py", "system"), ("torchvision DataLoader", "peer_torchvision.py", "system"),
         ("tf.data", "peer_tfdata.py", "venv"), ("DALI (CPU)", "peer_dali.py", "venv"),
         ("SPDL", "peer_spdl.py", "venv")]


def run_peer(script, python, a, files, threads, dtype):
    cpus = "0" if threads == 1 else "0-%d" % (threads - 1)
    argv = ["taskset", "-c", cpus, python, os.path.join(HERE, script), "--files", files, "--threads", str(threads),
            "--dtype", dtype, "--seconds", str(a.seconds), "--build", a.build]
    env = dict(os.environ, OMP_NUM_THREADS="1", TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=HERE)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=a.seconds * 6 + 180, env=env)
    except subprocess.TimeoutExpired:
        return {"error": "did not finish within %d s" % (a.seconds * 6 + 180)}
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        return {"error": "exited %d: %s" % (p.returncode, (p.stderr.strip().splitlines() or ["no output"])[-1][:300])}
    return json.loads(lines[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--venv", required=True, help="the peers' virtual environment (bench/peers/run.sh makes it)")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "sample"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--dtypes", default="float32,uint8")
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args()
    paths = sorted(os.path.join(r, f) for r, _, fs in os.walk(a.data) for f in fs if f.lower().endswith(".jpg"))
    files = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    files.write("\n".join(paths) + "\n")
    files.close()
    pythons = {"system": "/usr/bin/python3", "venv": os.path.join(a.venv, "bin", "python")}
    results = []
    for dtype in a.dtypes.split(","):
        for threads in [int(t) for t in a.threads.split(",")]:
            rows = []
            for name, script, which in PEERS:
                r = run_peer(script, pythons[which], a, files.name, threads, dtype)
                r.update(peer=name, threads=threads, dtype=dtype)
                rows.append(r)
                results.append(r)
                print(json.dumps({k: v for k, v in r.items() if k != "trace"}), file=sys.stderr, flush=True)
            ferry = rows[0]
            print("\n### Per core, in-process: imagenet-train, %s, %d thread%s (%d photographs of %s)\n"
                  % (dtype, threads, "s" if threads > 1 else "", len(paths), os.path.relpath(a.data, ROOT)))
            print("| loader | images/s | images per CPU-second | Ferry's images per CPU-second / its |")
            print("|---|---:|---:|---:|")
            for r in rows:
                if "error" in r:
                    print("| %s | could not run here: %s | | |" % (r["peer"], r["error"].replace("|", "/")))
                    continue
                per_cpu = r["images"] / r["cpu_s"]
                ratio = "" if r is ferry or "error" in ferry else "%.2f" % ((ferry["images"] / ferry["cpu_s"]) / per_cpu)
                print("| %s | %.0f | %.0f | %s |" % (r["peer"], r["images"] / r["wall_s"], per_cpu, ratio))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
