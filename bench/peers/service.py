#!/usr/bin/env python3
"""Service mode (issue 26): tf.data service against Ferry, each a dispatcher and 1 or 2
workers in processes of their own on loopback, each worker pinned to its own core,
feeding one consumer process, the imagenet-train recipe in uint8 (float32 with
--dtype). Per system and worker count: delivered images per second and per worker
core, the consumer's CPU per image, bytes it read per image (its /proc/PID/io), the
time to its first batch; then the same with a worker killed mid-epoch: samples of that
epoch lost and repeated (tf.data service documents at-most-once for
processing_mode="distributed_epoch"; Ferry promises exactly once).

    /usr/bin/python3 bench/peers/service.py --venv VENV [--data data/sample] [--images 1200]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def tf_dispatcher_main(port_file):
    import tensorflow as tf
    # A worker that stops heartbeating is given up after 3 s (Ferry's test setting is 2 s).
    d = tf.data.experimental.service.DispatchServer(
        tf.data.experimental.service.DispatcherConfig(port=0, worker_timeout_ms=3000))
    with open(port_file, "w") as f:
        f.write(d.target)
    d.join()


def tf_worker_main(dispatcher):
    import tensorflow as tf
    address = dispatcher.split("://")[-1]
    w = tf.data.experimental.service.WorkerServer(
        tf.data.experimental.service.WorkerConfig(dispatcher_address=address, port=0, heartbeat_interval_ms=500))
    print("listening on %s" % getattr(w, "_address", "?"), flush=True)
    w.join()


def tf_consumer_main(a):
    import tensorflow as tf
    paths = open(a.files).read().split()
    sys.path.insert(0, HERE)
    from peer_tfdata import recipe  # the per-core run's tf.data recipe
    image_of = recipe(a.dtype)

    def load(path, index):
        return image_of(path), index

    ds = tf.data.Dataset.from_tensor_slices((paths, list(range(len(paths))))).shuffle(len(paths))
    ds = ds.map(load, num_parallel_calls=1).batch(32)
    # No job name: each pass over the dataset is a job of its own, one epoch.
    ds = ds.apply(tf.data.experimental.service.distribute(processing_mode="distributed_epoch",
                                                          service=a.dispatcher))
    consume(a, lambda: iter(ds), lambda b: b[1].numpy().tolist())


def ferry_consumer_main(a):
    sys.path.insert(0, os.path.join(a.build, "python"))
    import ferry
    pipeline = "imagenet-train"
    if a.dtype == "uint8":
        pipeline = {"decode": "rgb", "ops": [{"op": "random_resized_crop", "size": 224}, {"op": "hflip", "p": 0.5}],
                    "output": {"dtype": "uint8", "layout": "NHWC"}}
    loader = ferry.Loader(data=a.data_list, pipeline=pipeline, batch_size=32, epochs=None, drop_last=False,
                          dispatcher=a.dispatcher, job_name="peers", trainer_normalize=False)

    def indices(b):
        info = loader.last_batch_info()
        return info["indices"][: info["valid"]].tolist()

    consume(a, lambda: iter(loader), indices)


def _cpu():
    import resource
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _read_bytes():
    """Bytes received on loopback (/proc/net/dev): the batches this consumer is sent,
    and the small control traffic beside them."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[0])
    return 0


def consume(a, epoch_iter, indices):
    """Reads a.epochs epochs; the first batch's time, then per epoch the indices seen.
    Signals the harness (a line "killpoint") once half of epoch 1 is read."""
    t0 = time.perf_counter()
    first = None
    c0, r0 = _cpu(), _read_bytes()
    epochs = []
    n = 0
    killed = False
    stalled = False
    import queue
    import threading

    def batches_of(it):
        """The epoch's batches, each waited for at most a.stall seconds (a consumer that
        gets nothing for that long ends the epoch where it is, stalled)."""
        q = queue.Queue(maxsize=2)

        def pump():
            try:
                for b in it:
                    # The rows' indices as the batch is yielded (Ferry's last_batch_info
                    # is of the batch yielded last: this thread runs ahead).
                    q.put(("batch", indices(b)))
                q.put(("end", None))
            except Exception as e:  # the system's own error ends the epoch
                q.put(("error", e))

        threading.Thread(target=pump, daemon=True).start()
        while True:
            try:
                kind, b = q.get(timeout=a.stall)
            except queue.Empty:
                yield "stalled"
                return
            if kind != "batch":
                return
            yield b

    for e in range(a.epochs):
        seen = []
        for b in batches_of(epoch_iter()):
            if isinstance(b, str):
                stalled = True
                break
            if first is None:
                first = time.perf_counter() - t0
                c0, r0, t1 = _cpu(), _read_bytes(), time.perf_counter()
            seen += b
            if e == 1 and a.kill and len(seen) >= a.images // 2 and not killed:
                print("killpoint", flush=True)
                sys.stdin.readline()  # the harness killed a worker
                killed = True
        epochs.append({"rows": len(seen), "distinct": len(set(seen)), "stalled": stalled})
        n += len(seen)
        if stalled:
            break
    wall = time.perf_counter() - t1
    print(json.dumps({"first_batch_s": first, "images": n, "wall_s": wall, "cpu_s": _cpu() - c0,
                      "read_bytes": _read_bytes() - r0, "epochs": epochs}), flush=True)
    os._exit(0)  # a stalled system's threads would hold the process


def run_system(system, a, workers, kill):
    """(result dict) of one system with `workers` workers; kill: one dies mid-epoch 1."""
    procs = []
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", OMP_NUM_THREADS="1")
    vpy = os.path.join(a.venv, "bin", "python")
    tmp = tempfile.mkdtemp(prefix="ferry-service-")
    try:
        if system == "tf.data service":
            port_file = os.path.join(tmp, "dispatcher")
            procs.append(subprocess.Popen(["taskset", "-c", "0", vpy, __file__, "--role", "tf-dispatcher",
                                           "--port-file", port_file], env=env))
            while not os.path.exists(port_file) or not open(port_file).read():
                time.sleep(0.1)
            dispatcher = open(port_file).read()
            for i in range(workers):
                w = subprocess.Popen(["taskset", "-c", str(1 - i % 2), vpy, __file__, "--role", "tf-worker",
                                      "--dispatcher", dispatcher], env=env, stdout=subprocess.PIPE, text=True)
                w.stdout.readline()
                procs.append(w)
            consumer = [vpy, __file__, "--role", "tf-consumer", "--dispatcher", dispatcher]
        else:
            bindir = os.path.join(a.build, "server")
            d = subprocess.Popen(["taskset", "-c", "0", os.path.join(bindir, "ferry-dispatcher"), "--listen",
                                  "127.0.0.1:0", "--work-dir", tmp, "--heartbeat-interval-ms", "200",
                                  "--heartbeat-timeout-ms", "2000"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True)
            dispatcher = d.stdout.readline().split()[-1]
            procs.append(d)
            for i in range(workers):
                w = subprocess.Popen(["taskset", "-c", str(1 - i % 2), os.path.join(bindir, "ferry-worker"), "--listen",
                                      "127.0.0.1:0", "--threads", "1", "--dispatcher", dispatcher],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                w.stdout.readline()
                procs.append(w)
            consumer = ["/usr/bin/python3", __file__, "--role", "ferry-consumer", "--dispatcher", dispatcher,
                        "--data-list", a.data_list]
        consumer += ["--files", a.files, "--images", str(a.images), "--epochs", str(a.epochs), "--dtype", a.dtype,
                     "--build", a.build, "--stall", str(a.stall)] + (["--kill"] if kill else [])
        c = subprocess.Popen(["taskset", "-c", "0"] + consumer, env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        out = None
        import threading
        hung = threading.Timer(a.timeout, c.kill)  # a consumer that never ends is reported as such
        hung.start()
        for line in c.stdout:
            if line.startswith("killpoint"):
                procs[-1].send_signal(signal.SIGKILL)
                c.stdin.write("\n")
                c.stdin.flush()
            elif line.startswith("{"):
                out = json.loads(line)
        c.wait()
        hung.cancel()
        if out is None and c.returncode == -signal.SIGKILL:
            return {"error": "the consumer got no end of its epochs within %d s%s" % (
                a.timeout, " after a worker was killed" if kill else "")}
        return out or {"error": "the consumer printed no result (exit %s)" % c.returncode}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", default="harness")
    ap.add_argument("--venv")
    ap.add_argument("--data", default=os.path.join(ROOT, "data", "sample"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--images", type=int, default=1200)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--dtype", default="uint8", choices=("uint8", "float32"))
    ap.add_argument("--port-file")
    ap.add_argument("--dispatcher")
    ap.add_argument("--files")
    ap.add_argument("--data-list")
    ap.add_argument("--kill", action="store_true")
    ap.add_argument("--timeout", type=float, default=300, help="seconds a consumer may take in all")
    ap.add_argument("--stall", type=float, default=30,
                    help="seconds without a batch after which a consumer ends its epoch where it is (stalled)")
    a = ap.parse_args()
    if a.role == "tf-dispatcher":
        return tf_dispatcher_main(a.port_file)
    if a.role == "tf-worker":
        return tf_worker_main(a.dispatcher)
    if a.role == "tf-consumer":
        return tf_consumer_main(a)
    if a.role == "ferry-consumer":
        return ferry_consumer_main(a)
    paths = sorted(os.path.join(r, f) for r, _, fs in os.walk(a.data) for f in fs if f.endswith(".jpg"))
    paths = paths[:: max(1, len(paths) // a.images)][: a.images]
    a.images = len(paths)
    files = tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False)
    files.write("\n".join(paths) + "\n")
    files.close()
    a.files = files.name
    lst = tempfile.NamedTemporaryFile("w", suffix=".tsv", delete=False)
    lst.write("".join("%s\t0\n" % p for p in paths))
    lst.close()
    a.data_list = lst.name
    rows = []
    for system in ("Ferry", "tf.data service"):
        for workers in (1, 2):
            r = run_system(system, a, workers, kill=False)
            r.update(system=system, workers=workers, kill=False)
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
        r = run_system(system, a, 2, kill=True)
        r.update(system=system, workers=2, kill=True)
        rows.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
    print("\n### Service mode: imagenet-train %s, %d photographs, %d epochs, one consumer\n"
          % (a.dtype, a.images, a.epochs))
    print("| system | workers | images/s | per worker core | consumer CPU ms/image | bytes read/image | first batch (s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if r["kill"]:
            continue
        if "error" in r:
            print("| %s | %d | could not run: %s | | | | |" % (r["system"], r["workers"], r["error"]))
            continue
        ips = r["images"] / r["wall_s"]
        print("| %s | %d | %.0f | %.0f | %.3f | %.0f | %.2f |" % (
            r["system"], r["workers"], ips, ips / r["workers"], 1000 * r["cpu_s"] / r["images"],
            r["read_bytes"] / r["images"], r["first_batch_s"]))
    print("\n### A worker killed mid-epoch 1 (2 workers)\n")
    print("| system | epoch | rows | distinct samples | lost | repeated | |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for r in rows:
        if not r["kill"]:
            continue
        if "error" in r:
            print("| %s | - | %s | | | | |" % (r["system"], r["error"]))
            continue
        for e, ep in enumerate(r["epochs"]):
            print("| %s | %d | %d | %d | %d | %d | %s |" % (
                r["system"], e, ep["rows"], ep["distinct"], a.images - ep["distinct"], ep["rows"] - ep["distinct"],
                "no batch for %g s: the epoch ended there" % a.stall if ep["stalled"] else ""))


if __name__ == "__main__":
    main()
