import os
import shutil
import signal
import subprocess
import sys

import pytest


def pytest_configure(config):
    # tests/run_all.sh runs the suites on two processes (pytest-xdist, --dist loadgroup)
    # and then the tests marked serial alone: those whose verdict rests on timing that a
    # second busy process would distort.
    config.addinivalue_line("markers", "serial: runs alone, after the parallel run (tests/run_all.sh)")
    config.addinivalue_line("markers", "xdist_group(name): the tests of one group run on one process, in turn")


def _bench():
    path = os.environ.get("FERRY_BENCH") or shutil.which("ferry-bench")
    if not path or not os.path.exists(path):
        pytest.fail("FERRY_BENCH must point to the ferry-bench executable (tests/run_all.sh sets it)")
    return path


@pytest.fixture(scope="session")
def ferry_bench():
    return _bench()


@pytest.fixture(scope="session")
def sample_data():
    path = os.environ.get("FERRY_SAMPLE_DATA")
    if not path or not os.path.isdir(path):
        pytest.fail("FERRY_SAMPLE_DATA must point to the sample ImageFolder (bench/setup.sh builds it)")
    return path


@pytest.fixture(scope="session")
def ferry():
    """The ferry package, from FERRY_PYTHON_DIR (tests/run_all.sh sets it) or build/python."""
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("FERRY_PYTHON_DIR") or os.path.join(here, "..", "..", "build", "python")
    if not os.path.isdir(os.path.join(path, "ferry")):
        pytest.fail("no ferry package in %s (build with -DFERRY_BUILD_PYTHON=ON)" % path)
    sys.path.insert(0, os.path.abspath(path))
    import ferry as module
    return module


@pytest.fixture(scope="session")
def small_tree(sample_data, tmp_path_factory):
    """A small ImageFolder of real JPEGs from the sample set: 3 classes x 40 files."""
    root = tmp_path_factory.mktemp("small") / "tree"
    classes = sorted(c for c in os.listdir(sample_data) if os.path.isdir(os.path.join(sample_data, c)))[:3]
    for c in classes:
        os.makedirs(root / c)
        for f in sorted(os.listdir(os.path.join(sample_data, c)))[:40]:
            shutil.copy(os.path.join(sample_data, c, f), root / c / f)
    return str(root)


@pytest.fixture(scope="session")
def ferry_local():
    path = os.environ.get("FERRY_LOCAL") or os.path.join(os.path.dirname(_bench()), "..", "server", "ferry-local")
    if not os.path.exists(path):
        pytest.fail("FERRY_LOCAL must point to the ferry-local executable")
    return os.path.abspath(path)


class Daemons:
    """ferry-dispatcher and ferry-worker processes on loopback."""

    def __init__(self, bindir, tmp, workers=2, worker_args=(), dispatcher_args=()):
        self.procs = []
        self.logs = []  # each daemon's stderr, a file: shown when a test fails
        self.tmp = tmp
        os.makedirs(str(tmp), exist_ok=True)
        self.dispatcher = self._start([os.path.join(bindir, "ferry-dispatcher"), "--listen", "127.0.0.1:0",
                                       "--work-dir", str(tmp), "--heartbeat-interval-ms", "100",
                                       "--heartbeat-timeout-ms", "1000", "--log-level", "debug"]
                                      + list(dispatcher_args))
        self.bindir = bindir
        self.worker_args = list(worker_args)
        self.workers = [self.start_worker() for _ in range(workers)]

    def start_worker(self, args=None):
        """Another ferry-worker of the dispatcher (its index: len(self.workers) - 1 after)."""
        return self._start([os.path.join(self.bindir, "ferry-worker"), "--listen", "127.0.0.1:0", "--threads", "1",
                            "--dispatcher", self.dispatcher] + (self.worker_args if args is None else list(args)))

    def _start(self, argv):
        if "--allow-user-code" in argv and "--python" not in argv:
            # The workers' Python is the trainer's, as the README asks of a deployment
            # (the same image): the tests' interpreter, whichever it is.
            argv = argv + ["--python", sys.executable]
        log = os.path.join(str(self.tmp), "%s-%d.log" % (os.path.basename(argv[0]), len(self.procs)))
        with open(log, "w") as err:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True)
        self.procs.append(p)
        self.logs.append(log)
        line = p.stdout.readline()
        assert line.startswith("listening on "), line
        return line.split()[-1]

    def kill_worker(self, i):
        self.procs[1 + i].kill()

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()

    def tails(self, chars=6000):
        """The end of each daemon's log, for a failing test's report."""
        out = []
        for path in self.logs:
            with open(path, errors="replace") as f:
                out.append("--- %s\n%s" % (os.path.basename(path), f.read()[-chars:]))
        return "\n".join(out)


@pytest.fixture
def daemons(ferry_local, tmp_path):
    """A ferry-dispatcher (1 s heartbeat timeout) and 2 ferry-workers."""
    d = Daemons(os.path.dirname(ferry_local), tmp_path)
    yield d
    d.close()
    print(d.tails())  # pytest shows a test's teardown output only when it fails
