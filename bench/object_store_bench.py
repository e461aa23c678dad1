#!/usr/bin/python3
"""Images per second of one Ferry worker reading a dataset from object storage, with
--latency-ms added to every request, against the same worker reading the same files
from local disk: an ImageFolder layout (one object per image), WebDataset shards (one
Range request per member), and the shards read by a worker with --cache-dir (the
listing, which streams each shard whole, keeps it; members are read from that copy).
Ratios in one run, rounds interleaved; the seconds to each epoch's first batch apart.

The store: moto in server mode (tests/s3/s3_server.py, from the virtual environment of
tests/s3/setup.sh) behind the tests' proxy (tests/s3/fault_proxy.py) adding the latency,
both pinned to CPU B; the worker (`ferry-worker --threads 1`) pinned to CPU A, the
trainer (a point-to-point ferry.Loader) on CPU B. The store's own ceiling, requests per
CPU-second of moto and the proxy together, is measured in the same run and printed:
where a worker decodes faster than the store can serve on its one CPU, the store is the
limit, not the worker's reads.

With --s3torchconnector PYTHON (a Python with s3torchconnector, torch and torchvision),
Amazon's S3 connector for PyTorch reads the same shards through the same proxy
(S3IterableDataset over the shard objects, members decoded with PIL and transformed by
torchvision's RandomResizedCrop + flip + ToTensor + Normalize, one process on CPU A).

    /usr/bin/python3 bench/object_store_bench.py --data data/sample --build build
        [--images 1200] [--latency-ms 50] [--rounds 3] [--s3torchconnector /path/python]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "s3"))
from shards import write_shards  # noqa: E402  (the tests' shard writer: the same shards)

RANDAUG = {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 224}, {"op": "hflip", "p": 0.5},
                                    {"op": "rand_augment", "num_ops": 2, "magnitude": 9},
                                    {"op": "normalize", "mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}],
           "output": {"dtype": "float32", "layout": "NCHW"}}

S3TC = r'''
import io, sys, tarfile, time, torch, torchvision.transforms as T
from PIL import Image
from s3torchconnector import S3IterableDataset, S3ClientConfig
torch.set_num_threads(1)
endpoint, n, urls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
tf = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
                T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
def members(reader):
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        for m in tar:
            if m.name.endswith(".jpg"):
                yield tf(Image.open(io.BytesIO(tar.extractfile(m).read())).convert("RGB"))
ds = S3IterableDataset.from_objects(urls, region="us-east-1", endpoint=endpoint,
                                    s3client_config=S3ClientConfig(force_path_style=True))
t0, got = None, 0
for reader in ds:
    for x in members(reader):
        if t0 is None:
            t0 = time.perf_counter()  # from the first image, as the others
            continue
        got += 1
print(got / (time.perf_counter() - t0))
'''


def sample_files(data, n):
    classes = sorted(c for c in os.listdir(data) if os.path.isdir(os.path.join(data, c)))
    per = (n + len(classes) - 1) // len(classes)
    out = []
    for c in classes:
        out += [(c, f) for f in sorted(os.listdir(os.path.join(data, c)))[:per]]
    return out[:n]


def build(data, n, work):
    tree = os.path.join(work, "tree")
    shards = os.path.join(work, "shards")
    os.makedirs(shards)
    files = sample_files(data, n)
    for c, f in files:
        os.makedirs(os.path.join(tree, c), exist_ok=True)
        shutil.copy(os.path.join(data, c, f), os.path.join(tree, c, f))
    return tree, shards, write_shards(tree, shards, per_shard=100)


def cpu_seconds(pid):
    """User + system CPU seconds of a process and its children (moto runs as one)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for p in [pid] + children(pid):
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


def children(pid):
    out = []
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            for c in f.read().split():
                out += [int(c)] + children(int(c))
    except FileNotFoundError:
        pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--build", default="build")
    ap.add_argument("--images", type=int, default=1200)
    ap.add_argument("--latency-ms", type=float, default=50)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pipelines", default="imagenet-train,randaugment")
    ap.add_argument("--s3torchconnector", default="", help="a Python with s3torchconnector, torch, torchvision")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("needs two CPUs")
    cpu_a, cpu_b = cpus[0], cpus[1]
    os.sched_setaffinity(0, {cpu_b})
    sys.path.insert(0, os.path.join(a.build, "python"))
    import ferry

    work = tempfile.mkdtemp(prefix="ferry-osb-")
    procs = []
    try:
        tree, shards, names = build(a.data, a.images, work)
        s3py = subprocess.run(["bash", os.path.join(ROOT, "tests", "s3", "setup.sh"),
                               os.path.join(a.build, "s3-venv")], capture_output=True, text=True, check=True)
        s3py = s3py.stdout.strip()
        store = subprocess.Popen(["taskset", "-c", str(cpu_b), s3py, os.path.join(ROOT, "tests", "s3", "s3_server.py"),
                                  "--no-auth", "--log", os.path.join(work, "moto.log"), "--upload", tree + ":bench/tree",
                                  "--upload", shards + ":bench/shards"], stdout=subprocess.PIPE, text=True)
        procs.append(store)
        info = json.loads(store.stdout.readline())
        proxy = subprocess.Popen(["taskset", "-c", str(cpu_b), "/usr/bin/python3",
                                  os.path.join(ROOT, "tests", "s3", "fault_proxy.py"), "--upstream", info["endpoint"],
                                  "--latency-ms", str(a.latency_ms), "--log", os.path.join(work, "proxy.log")],
                                 stdout=subprocess.PIPE, text=True)
        procs.append(proxy)
        endpoint = json.loads(proxy.stdout.readline())["endpoint"]
        env = dict(os.environ, AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID=info["access_key"],
                   AWS_SECRET_ACCESS_KEY=info["secret_key"], AWS_REGION="us-east-1")
        def start_worker(*extra):
            w = subprocess.Popen(["taskset", "-c", str(cpu_a), os.path.join(a.build, "server", "ferry-worker"),
                                  "--listen", "127.0.0.1:0", "--threads", "1", "--data-root", work,
                                  "--data-root", "s3://bench/"] + list(extra), stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True, env=env)
            procs.append(w)
            return w.stdout.readline().split()[-1]
        address = start_worker()
        # Another worker with a cache: a shard's listing (which reads it whole) keeps it.
        cached_address = start_worker("--cache-dir", os.path.join(work, "cache"))

        last = "%03d" % (len(names) - 1)
        ways = {"ImageFolder, disk": (tree, address), "ImageFolder, bucket": ("s3://bench/tree/", address),
                "shards, disk": (os.path.join(shards, "shard-{000..%s}.tar" % last), address),
                "shards, bucket": ("s3://bench/shards/shard-{000..%s}.tar" % last, address),
                "shards, bucket, --cache-dir": ("s3://bench/shards/shard-{000..%s}.tar" % last, cached_address)}
        first_batch = {}

        def epoch(way, pipeline, seed):
            """Images/s over an epoch, from the first batch on (the time to it kept apart)."""
            data, worker = ways[way]
            t_start = time.perf_counter()
            loader = ferry.Loader(data=data, pipeline=RANDAUG if pipeline == "randaugment" else pipeline,
                                  batch_size=50, seed=seed, epochs=1, workers=[worker], prefetch=4)
            it = iter(loader)
            next(it)
            t0, n = time.perf_counter(), 0
            first_batch.setdefault(way, []).append(t0 - t_start)
            for x, _ in it:
                n += x.shape[0]
            rate = n / (time.perf_counter() - t0)
            loader.close()
            return rate

        results = {p: {w: [] for w in ways} for p in a.pipelines.split(",")}
        store_cpu = {}
        for p in results:
            epoch("ImageFolder, disk", p, 99)  # warm: page cache, the worker's pools
        for r in range(a.rounds):
            for p in results:
                for w in ways:
                    before = cpu_seconds(store.pid) + cpu_seconds(proxy.pid)
                    results[p][w].append(epoch(w, p, r))
                    store_cpu.setdefault(w, []).append(cpu_seconds(store.pid) + cpu_seconds(proxy.pid) - before)
        # The store's ceiling: requests per CPU-second of moto and the proxy together (one
        # CPU is all they have), over the bucket ImageFolder epochs (a request a sample).
        n_req = (a.images - 50) * len(results) * a.rounds
        ceiling = n_req / max(1e-9, sum(store_cpu["ImageFolder, bucket"]))
        s3tc = None
        if a.s3torchconnector:
            urls = ["s3://bench/shards/" + n for n in names]
            runs = []
            for _ in range(a.rounds):
                out = subprocess.run(["taskset", "-c", str(cpu_a), a.s3torchconnector, "-c", S3TC, endpoint,
                                      str(a.images)] + urls, capture_output=True, text=True, env=env)
                if out.returncode != 0:
                    s3tc = "failed: " + out.stderr.strip().splitlines()[-1]
                    break
                runs.append(float(out.stdout.strip().splitlines()[-1]))
            else:
                s3tc = statistics.median(runs)

        med = {p: {w: statistics.median(v) for w, v in ws.items()} for p, ws in results.items()}
        print("One ferry-worker (--threads 1, CPU %d); the store (moto + a proxy adding %g ms a request) on CPU %d; "
              "%d images, %d shards; median of %d rounds" % (cpu_a, a.latency_ms, cpu_b, a.images, len(names),
                                                             a.rounds))
        print()
        print("| pipeline | " + " | ".join(ways) + " | ImageFolder bucket/disk | shards bucket/disk | "
              "shards bucket with --cache-dir/disk |")
        print("|---|" + "---:|" * (len(ways) + 3))
        for p, m in med.items():
            print("| %s | %s | %.2f | %.2f | %.2f |" % (
                p, " | ".join("%.0f" % m[w] for w in ways), m["ImageFolder, bucket"] / m["ImageFolder, disk"],
                m["shards, bucket"] / m["shards, disk"], m["shards, bucket, --cache-dir"] / m["shards, disk"]))
        print()
        print("seconds to the first batch (median; the first round of a cached worker includes the listing that "
              "fills its cache): " + ", ".join("%s %.2f" % (w, statistics.median(v)) for w, v in first_batch.items())
              + "; first round: " + ", ".join("%s %.2f" % (w, v[0]) for w, v in first_batch.items()))
        print()
        print("the store's ceiling on its one CPU: %.0f requests/s (moto + the proxy: %.2f ms of CPU a request)"
              % (ceiling, 1e3 / ceiling))
        print("per round (images/s): " + json.dumps(results))
        if s3tc is not None:
            if isinstance(s3tc, float):
                ferry_shards = med[list(med)[0]]["shards, bucket"]
                print("s3torchconnector (same shards, same proxy; PIL + torchvision imagenet-train, one process): "
                      "%.0f images/s; Ferry (imagenet-train, shards from the bucket) / s3torchconnector = %.2f"
                      % (s3tc, ferry_shards / s3tc))
            else:
                print("s3torchconnector: " + s3tc)
        if a.json:
            with open(a.json, "w") as f:
                json.dump({"median": med, "rounds": results, "store_ceiling_gets_per_s": ceiling,
                       "first_batch_s": first_batch,
                           "s3torchconnector": s3tc, "latency_ms": a.latency_ms, "images": a.images}, f, indent=1)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
