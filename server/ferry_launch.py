#!/usr/bin/python3
"""ferry-launch: Ferry on a SageMaker heterogeneous cluster (or anything that describes
its hosts the same way), one command on every host:

    ferry-launch [--resource-config F] [--data-group NAME] [options] [-- TRAINER...]

It reads the resource config (/opt/ml/input/config/resourceconfig.json, or
--resource-config, or $FERRY_RESOURCE_CONFIG), and takes its role from the instance
group of the current host:
  - data group, first host: ferry-dispatcher (--exit-when-idle) and a ferry-worker;
  - data group, other hosts: a ferry-worker;
  - any other group: the trainer command after `--`, with FERRY_DISPATCHER set to the
    dispatcher's address (ferry.Loader and ferry.DataLoader read it) and its exit code.
Workers register with the dispatcher under the host's address and exit when it says
every job has finished (--exit-when-idle); the dispatcher too. So the data group exits
when training ends, as a SageMaker job needs. SIGTERM is passed on (the daemons drain).

The data group is --data-group, else $FERRY_DATA_GROUP, else the only group whose name
contains "data". Hosts are dialled by name (SageMaker's algo-N resolve); --host-address
NAME=ADDRESS overrides that, one per host, where names do not resolve.
Exit codes: 2 for a bad flag or config (with the reason), else the role's."""
import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

DEFAULT_CONFIG = "/opt/ml/input/config/resourceconfig.json"
SAGEMAKER_DATA = "/opt/ml/input/data"  # where SageMaker mounts the training channels


def fail(msg):
    sys.stderr.write("ferry-launch: %s\n" % msg)
    sys.exit(2)


def parse():
    ap = argparse.ArgumentParser(prog="ferry-launch", description=__doc__.split("\n\n")[0])
    ap.add_argument("--resource-config", default=os.environ.get("FERRY_RESOURCE_CONFIG", DEFAULT_CONFIG))
    ap.add_argument("--data-group", default=os.environ.get("FERRY_DATA_GROUP"))
    ap.add_argument("--port", type=int, default=7000, help="the dispatcher's port")
    ap.add_argument("--worker-port", type=int, default=7100)
    ap.add_argument("--metrics-port", type=int, default=0, help="--metrics on every daemon at this port (0: off)")
    ap.add_argument("--work-dir", default="/opt/ml/ferry", help="the dispatcher's journal")
    ap.add_argument("--bin-dir", default=os.path.dirname(os.path.abspath(__file__)),
                    help="where ferry-dispatcher and ferry-worker are (default: beside ferry-launch)")
    ap.add_argument("--host-address", action="append", default=[], metavar="NAME=ADDRESS")
    ap.add_argument("--token-file", help="passed to the daemons (the trainer reads $FERRY_TOKEN or its own)")
    ap.add_argument("--worker-arg", action="append", default=[], help="more flags for ferry-worker")
    ap.add_argument("--data-root", action="append", default=None, metavar="DIR",
                    help="a folder or URL prefix jobs may read (repeatable; $FERRY_DATA_ROOT, comma-separated as the "
                         "daemons take it; default: SageMaker's "
                         "channels, /opt/ml/input/data, where it exists), for the dispatcher and the worker")
    ap.add_argument("trainer", nargs=argparse.REMAINDER, help="-- TRAINER COMMAND (training hosts)")
    a = ap.parse_args()
    if a.trainer and a.trainer[0] == "--":
        a.trainer = a.trainer[1:]
    if a.data_root is None:
        env = os.environ.get("FERRY_DATA_ROOT")
        if env:
            a.data_root = [env]
        else:
            a.data_root = [SAGEMAKER_DATA] if os.path.isdir(SAGEMAKER_DATA) else []
    # Several in one value are comma-separated, as the daemons take them (not colons: a
    # URL root holds them).
    a.data_root = [d.strip() for v in a.data_root for d in v.split(",") if d.strip()]
    return a


def load_config(path):
    try:
        with open(path) as f:
            c = json.load(f)
    except OSError as e:
        fail("cannot read the resource config %s: %s" % (path, e.strerror))
    except ValueError as e:
        fail("the resource config %s is not JSON: %s" % (path, e))
    for key in ("current_host", "instance_groups"):
        if key not in c:
            fail("the resource config %s has no %s (a heterogeneous cluster's config has instance_groups)" % (path, key))
    return c


def main():
    a = parse()
    c = load_config(a.resource_config)
    groups = {g["instance_group_name"]: g["hosts"] for g in c["instance_groups"]}
    data = a.data_group
    if data is None:
        named = [g for g in groups if "data" in g.lower()]
        if len(named) != 1:
            fail("name the data group with --data-group (groups: %s)" % ", ".join(sorted(groups)))
        data = named[0]
    if data not in groups or not groups[data]:
        fail("no data group %r with hosts (groups: %s)" % (data, ", ".join(sorted(groups))))
    addresses = {}
    for m in a.host_address:
        name, _, address = m.partition("=")
        if not address:
            fail("--host-address wants NAME=ADDRESS, not %r" % m)
        addresses[name] = address
    me = c["current_host"]
    first = groups[data][0]
    dispatcher = "%s:%d" % (addresses.get(first, first), a.port)
    in_data = me in groups[data]
    if not in_data and not a.trainer:
        fail("host %s is not in the data group %s: give the trainer command after --" % (me, data))
    if not in_data:
        env = dict(os.environ, FERRY_DISPATCHER=dispatcher)
        sys.stderr.write("ferry-launch: %s trains; dispatcher %s\n" % (me, dispatcher))
        sys.stderr.flush()
        os.execvpe(a.trainer[0], a.trainer, env)

    common = []
    if a.token_file:
        common += ["--token-file", a.token_file]
    procs = []
    stopping = []

    def stop_all(sig=signal.SIGTERM):
        for p in procs:
            if p.poll() is None:
                p.send_signal(sig)

    def forward(sig, _):
        stopping.append(sig)
        stop_all(sig)

    # Before any daemon starts: a SIGTERM during start-up stops what has started.
    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)

    def die_with_parent():
        # The daemons get SIGTERM if ferry-launch itself dies (SIGKILL, OOM): none is
        # left behind holding the ports.
        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass

    def daemon(name, argv):
        exe = os.path.join(a.bin_dir, name)
        if not os.path.exists(exe):
            stop_all()
            fail("%s not found in %s (--bin-dir)" % (name, a.bin_dir))
        p = subprocess.Popen([exe] + argv + common, stdout=subprocess.PIPE, text=True, preexec_fn=die_with_parent)
        procs.append(p)
        line = p.stdout.readline()
        if stopping:
            for q in procs:
                q.wait()
            sys.exit(128 + stopping[0])
        if not line.startswith("listening on "):
            p.wait()
            stop_all()  # the dispatcher, if the worker is what failed
            for q in procs:
                q.wait()
            fail("%s did not start (exit %s)" % (name, p.returncode))
        sys.stderr.write("ferry-launch: %s %s on %s\n" % (me, name, line.split()[-1]))
        sys.stderr.flush()

    roots = [f for d in a.data_root for f in ("--data-root", d)]

    def metrics(port_offset):
        return ["--metrics", "0.0.0.0:%d" % (a.metrics_port + port_offset)] if a.metrics_port else []

    if me == first:
        os.makedirs(a.work_dir, exist_ok=True)
        daemon("ferry-dispatcher", ["--listen", "0.0.0.0:%d" % a.port, "--work-dir", a.work_dir, "--exit-when-idle"]
               + metrics(0) + roots)
    me_address = addresses.get(me, me)
    # User code runs in the interpreter ferry-launch runs in (the training image's, where
    # the trainer's packages are; with the wheel, the one it was installed into) unless
    # --worker-arg=--python names another: the worker's own default is /usr/bin/python3.
    python = []
    if "--allow-user-code" in a.worker_arg and not any(w == "--python" or w.startswith("--python=")
                                                       for w in a.worker_arg):
        python = ["--python", sys.executable]
    daemon("ferry-worker", ["--listen", "0.0.0.0:%d" % a.worker_port, "--advertise", "%s:%d" % (me_address, a.worker_port),
                            "--dispatcher", dispatcher, "--exit-when-idle"] + metrics(1) + roots + python + a.worker_arg)

    # The data group ends when its daemons do: once training has finished every job.
    # One that fails takes the other down (a worker without its dispatcher would retry
    # forever; a dispatcher without this host's worker is one short).
    rc = 0
    while procs:
        for p in list(procs):
            if p.poll() is not None:
                procs.remove(p)
                if p.returncode != 0 and not stopping and rc == 0:
                    sys.stderr.write("ferry-launch: %s: a daemon failed (exit %d): stopping the other\n"
                                     % (me, p.returncode))
                    stop_all()
                rc = rc or p.returncode
        time.sleep(0.1)
    sys.stderr.write("ferry-launch: %s: training ended, data group exits (%d)\n" % (me, rc))
    return rc


if __name__ == "__main__":
    sys.exit(main())
