"""The daemons' command lines, as an operator uses them (issue 12, "daemons as operators
expect"): --version; every flag also from a FERRY_<FLAG> environment variable and from a
--config file, the command line winning over the file and the file over the
environment (CLI11's order); --log-level (or FERRY_LOG_LEVEL); a wrong flag prints usage
and exits 2."""
import os
import re
import subprocess

import pytest

DAEMONS = ["ferry-dispatcher", "ferry-worker", "ferry-local"]


def binary(ferry_local, name):
    return os.path.join(os.path.dirname(ferry_local), name)


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRY_")}
    env.update(extra)
    return env


def start(argv, env, tmp_path, name):
    """A daemon whose first stdout line says where it listens; its stderr in a file."""
    err = open(str(tmp_path / (name + ".err")), "w")
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True, env=env)
    line = p.stdout.readline()
    return p, line, str(tmp_path / (name + ".err"))


def stop(p):
    p.terminate()
    try:
        p.wait(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()


@pytest.mark.parametrize("name", DAEMONS)
def test_version_and_usage(ferry_local, name):
    out = subprocess.run([binary(ferry_local, name), "--version"], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert re.match(r"^%s \d+\.\d+\.\d+ \(commit \S+\)$" % name, out.stdout.strip()), out.stdout
    required = {"ferry-dispatcher": ["--listen", "127.0.0.1:0", "--work-dir", "/nonexistent"],
                "ferry-worker": ["--listen", "127.0.0.1:0"], "ferry-local": []}[name]
    bad = subprocess.run([binary(ferry_local, name), *required, "--no-such-flag"], capture_output=True, text=True,
                         timeout=30)
    assert bad.returncode == 2
    assert "--no-such-flag" in bad.stderr and "Options:" in bad.stderr, bad.stderr
    helped = subprocess.run([binary(ferry_local, name), "--help"], capture_output=True, text=True, timeout=30)
    assert helped.returncode == 0 and "--config" in helped.stdout and "Env:FERRY_" in helped.stdout


def test_flags_from_the_environment_and_a_config_file(ferry_local, tmp_path):
    dispatcher = binary(ferry_local, "ferry-dispatcher")
    # Only the environment: FERRY_LISTEN, FERRY_WORK_DIR, FERRY_LOG_LEVEL.
    env = clean_env(FERRY_LISTEN="127.0.0.1:0", FERRY_WORK_DIR=str(tmp_path / "env-journal"), FERRY_LOG_LEVEL="warn")
    p, line, err = start([dispatcher], env, tmp_path, "env")
    try:
        assert line.startswith("listening on 127.0.0.1:"), line
    finally:
        stop(p)
    assert os.path.isdir(tmp_path / "env-journal")
    with open(err) as f:
        log = f.read()
    assert "serving on" not in log, "info lines at --log-level warn: " + log

    # A config file over the environment, and the command line over both.
    config = tmp_path / "ferry.toml"
    config.write_text('listen = "127.0.0.1:0"\nwork-dir = "%s"\nheartbeat-interval-ms = 150\n'
                      'log-level = "debug"\n' % (tmp_path / "file-journal"))
    env = clean_env(FERRY_LISTEN="127.0.0.1:1", FERRY_WORK_DIR=str(tmp_path / "not-this"))  # the file wins
    p, line, err = start([dispatcher, "--config", str(config), "--log-level", "info"], env, tmp_path, "file")
    try:
        assert line.startswith("listening on 127.0.0.1:"), line
        address = line.split()[-1]
        assert not address.endswith(":1")
        # A worker that finds its dispatcher in FERRY_DISPATCHER, as a pod spec sets it.
        worker = binary(ferry_local, "ferry-worker")
        w, wline, werr = start([worker, "--listen", "127.0.0.1:0", "--threads", "1"],
                               clean_env(FERRY_DISPATCHER=address), tmp_path, "worker")
        try:
            assert wline.startswith("listening on"), wline
            import time
            deadline = time.time() + 20
            while time.time() < deadline:
                with open(werr) as f:
                    if "registered with dispatcher " + address in f.read():
                        break
                time.sleep(0.05)
            else:
                pytest.fail("the worker did not register with FERRY_DISPATCHER's dispatcher")
        finally:
            stop(w)
    finally:
        stop(p)
    assert os.path.isdir(tmp_path / "file-journal") and not os.path.exists(tmp_path / "not-this"), \
        "work-dir came from the file"
    with open(err) as f:
        log = f.read()
    assert " info: " in log and " debug: " not in log, "the command line's --log-level beats the file's: " + log

    # A bad value in the environment is refused like a bad flag.
    bad = subprocess.run([dispatcher, "--listen", "127.0.0.1:0", "--work-dir", str(tmp_path / "x")],
                         capture_output=True, text=True, timeout=30,
                         env=clean_env(FERRY_HEARTBEAT_INTERVAL_MS="often"))
    assert bad.returncode == 2 and "often" in bad.stderr, bad.stderr


def wait_for_line(path, needle, proc, timeout=20):
    import time
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(path) as f:
            text = f.read()
        if needle in text or proc.poll() is not None:
            return text
        time.sleep(0.05)
    with open(path) as f:
        return f.read()


def test_data_roots_comma_separated_from_the_environment_the_flag_and_ferry_launch(ferry_local, tmp_path):
    """Several --data-root in one value are comma-separated, in FERRY_DATA_ROOT as on the
    command line, and a URL root's colons stay whole (they once split a ferry-launch
    value, and the daemons took the variable as one folder)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    want = "%s, %s, s3://bucket/train, https://store.example:8443/shards" % (os.path.realpath(a),
                                                                            os.path.realpath(b))
    value = "%s,%s,s3://bucket/train/,https://store.example:8443/shards/" % (a, b)
    worker = binary(ferry_local, "ferry-worker")
    dispatcher = binary(ferry_local, "ferry-dispatcher")
    runs = [("worker-env", [worker, "--listen", "127.0.0.1:0", "--threads", "1"], {"FERRY_DATA_ROOT": value},
             "jobs may read only under: "),
            ("worker-flag", [worker, "--listen", "127.0.0.1:0", "--threads", "1", "--data-root", value], {},
             "jobs may read only under: "),
            ("dispatcher-env", [dispatcher, "--listen", "127.0.0.1:0", "--work-dir", str(tmp_path / "j")],
             {"FERRY_DATA_ROOT": value}, "new jobs may name only paths under: ")]
    for name, argv, extra, said in runs:
        p, line, err = start(argv, clean_env(**extra), tmp_path, name)
        try:
            assert line.startswith("listening on"), (name, line, open(err).read())
            log = wait_for_line(err, said + want, p)
            assert said + want in log, (name, log)
        finally:
            stop(p)
    # One root of the list that is no folder: the daemon says which, and does not start.
    bad = subprocess.run([worker, "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=30,
                         env=clean_env(FERRY_DATA_ROOT="%s,%s" % (a, tmp_path / "missing")))
    assert bad.returncode != 0 and str(tmp_path / "missing") in bad.stderr, bad.stderr
    # ferry-launch reads the variable the same way (its parser, without launching).
    launch = os.path.join(os.path.dirname(ferry_local), "ferry-launch")
    probe = ("import runpy, sys; sys.argv = ['ferry-launch', '--data-root', 'c,d']; "
             "m = runpy.run_path(%r); print(m['parse']().data_root); "
             "sys.argv = ['ferry-launch']; print(m['parse']().data_root)" % launch)
    out = subprocess.run(["/usr/bin/python3", "-c", probe], capture_output=True, text=True, timeout=30,
                         env=clean_env(FERRY_DATA_ROOT=value))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [str(["c", "d"]), str(value.split(","))], out.stdout


def ferry_ctl(ferry_local):
    """ferry-ctl beside ferry-local (an installed wheel's ferry/bin), or in the build's client/."""
    beside = os.path.join(os.path.dirname(ferry_local), "ferry-ctl")
    if os.path.exists(beside):
        return beside
    return os.path.join(os.path.dirname(os.path.dirname(ferry_local)), "client", "ferry-ctl")


def test_ferry_ctl_status_shows_jobs_and_workers(ferry, ferry_local, small_tree, tmp_path):
    """ferry-ctl status on a running cluster: the job (consumers, epoch, splits) and the
    worker (address, leases), as tables and as JSON; with a token, only with the token."""
    import json
    (tmp_path / "token").write_text("s3cret\n")
    env = clean_env()
    d, line, _ = start([binary(ferry_local, "ferry-dispatcher"), "--listen", "127.0.0.1:0", "--work-dir",
                        str(tmp_path / "journal"), "--token-file", str(tmp_path / "token")], env, tmp_path, "d")
    dispatcher = line.split()[-1]
    w, wline, _ = start([binary(ferry_local, "ferry-worker"), "--listen", "127.0.0.1:0", "--threads", "1",
                         "--dispatcher", dispatcher, "--token-file", str(tmp_path / "token")], env, tmp_path, "w")
    worker = wline.split()[-1]
    ctl = ferry_ctl(ferry_local)
    try:
        loader = ferry.Loader(data=small_tree, pipeline={"decode": "rgb", "ops": [{"op": "center_crop", "size": 16}],
                                                          "output": {"dtype": "uint8", "layout": "NHWC"}},
                              batch_size=8, dispatcher=dispatcher, job_name="ctl-job", batches_per_split=2, epochs=2,
                              token_file=str(tmp_path / "token"))
        it = iter(loader)
        for _ in range(3):
            next(it)
        out = subprocess.run([ctl, "status", "--dispatcher", dispatcher, "--token-file", str(tmp_path / "token")],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert "JOBS (1)" in out.stdout and "WORKERS (1)" in out.stdout, out.stdout
        job_line = [l for l in out.stdout.splitlines() if l.startswith("ctl-job ")]
        assert job_line and "120" in job_line[0] and "0/2" in job_line[0] and small_tree in job_line[0], out.stdout
        assert worker in out.stdout and "serving" in out.stdout, out.stdout

        out = subprocess.run([ctl, "status", "--json", "--token-file", str(tmp_path / "token")], capture_output=True,
                             text=True, timeout=30, env=clean_env(FERRY_DISPATCHER=dispatcher))
        assert out.returncode == 0, out.stderr
        s = json.loads(out.stdout)
        assert s["journal_writable"] is True
        [job] = s["jobs"]
        assert job["name"] == "ctl-job" and job["num_samples"] == 120 and len(job["consumers"]) == 1
        assert job["splits_per_epoch"] == 8 and job["epochs"] == 2 and not job["finished"]
        assert job["splits"]["done"] + job["splits"]["leased"] + job["splits"]["pending"] <= 16
        assert job["splits"]["done"] >= 1
        [wk] = s["workers"]
        assert wk["address"] == worker and wk["state"] == "serving"
        assert wk["leases"] == job["splits"]["leased"]
        loader.close()

        refused = subprocess.run([ctl, "status", "--dispatcher", dispatcher], capture_output=True, text=True,
                                 timeout=30, env=clean_env())
        assert refused.returncode == 1 and "token" in refused.stderr, refused.stderr
    finally:
        stop(w)
        stop(d)
    gone = subprocess.run([ctl, "status", "--dispatcher", dispatcher, "--timeout", "1"], capture_output=True,
                          text=True, timeout=30, env=clean_env())
    assert gone.returncode == 1 and dispatcher in gone.stderr, gone.stderr


def test_ferry_ctl_drain_takes_a_worker_out_of_service(ferry, ferry_local, small_tree, tmp_path):
    """ferry-ctl drain WORKER on a running job: the worker takes no new leases at once,
    serves what it holds, leaves and exits by itself (0); the job goes on with the other
    worker and every sample of both epochs arrives exactly once. An unknown worker is
    refused with a clear error."""
    import json
    import time
    env = clean_env()
    d, line, _ = start([binary(ferry_local, "ferry-dispatcher"), "--listen", "127.0.0.1:0", "--work-dir",
                        str(tmp_path / "journal"), "--heartbeat-interval-ms", "100"], env, tmp_path, "d")
    dispatcher = line.split()[-1]
    workers = []
    for i in range(2):
        w, wline, _ = start([binary(ferry_local, "ferry-worker"), "--listen", "127.0.0.1:0", "--threads", "1",
                             "--dispatcher", dispatcher, "--drain-timeout", "20"], env, tmp_path, "w%d" % i)
        workers.append((w, wline.split()[-1]))
    ctl = ferry_ctl(ferry_local)
    try:
        loader = ferry.Loader(data=small_tree, pipeline={"decode": "rgb", "ops": [{"op": "center_crop", "size": 16}],
                                                          "output": {"dtype": "uint8", "layout": "NHWC"}},
                              batch_size=4, dispatcher=dispatcher, job_name="drained", batches_per_split=1, epochs=2)
        seen = []
        it = iter(loader)
        for _ in range(5):
            next(it)
            seen.extend(loader.last_batch_info()["indices"].tolist())
        (victim, victim_address), (survivor, _) = workers
        out = subprocess.run([ctl, "drain", victim_address, "--dispatcher", dispatcher, "--json"],
                             capture_output=True, text=True, timeout=30, env=env)
        assert out.returncode == 0, out.stderr
        states = {w["address"]: w["state"] for w in json.loads(out.stdout)["workers"]}
        assert states[victim_address] == "draining", states
        # The rest of both epochs, while the drained worker finishes and exits.
        for _ in it:
            seen.extend(loader.last_batch_info()["indices"].tolist())
        for _ in loader:
            seen.extend(loader.last_batch_info()["indices"].tolist())
        loader.close()
        assert sorted(seen) == sorted(list(range(120)) * 2), "each sample of each epoch exactly once"
        assert victim.wait(timeout=30) == 0, "the drained worker exits by itself"
        assert survivor.poll() is None, "the other worker serves on"
        err = open(str(tmp_path / "w0.err")).read()
        assert "drained by an operator" in err, err
        deadline = time.time() + 10
        while True:
            out = subprocess.run([ctl, "status", "--dispatcher", dispatcher, "--json"], capture_output=True, text=True,
                                 timeout=30, env=env)
            addresses = [w["address"] for w in json.loads(out.stdout)["workers"]]
            if victim_address not in addresses or time.time() > deadline:
                break
            time.sleep(0.1)
        assert victim_address not in addresses, "the drained worker left"

        nobody = subprocess.run([ctl, "drain", "10.9.9.9:1", "--dispatcher", dispatcher], capture_output=True,
                                text=True, timeout=30, env=env)
        assert nobody.returncode == 1 and "no worker 10.9.9.9:1" in nobody.stderr, nobody.stderr
        usage = subprocess.run([ctl, "drain", "--dispatcher", dispatcher], capture_output=True, text=True, timeout=30,
                               env=env)
        assert usage.returncode == 2, usage.stderr
    finally:
        for w, _ in workers:
            stop(w)
        stop(d)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_json_logs(ferry_local, tmp_path, how):
    """--log-format json (or FERRY_LOG_FORMAT=json): every stderr line is one JSON object
    with ts, program, level and msg, quotes and newlines escaped; a bad format is usage."""
    import json
    env = clean_env(FERRY_LOG_FORMAT="json") if how == "env" else clean_env()
    argv = [binary(ferry_local, "ferry-dispatcher"), "--listen", "127.0.0.1:0", "--work-dir",
            str(tmp_path / 'a "quoted"\ndir')]
    if how == "flag":
        argv += ["--log-format", "json"]
    d, line, err = start(argv, env, tmp_path, "d")
    assert line.startswith("listening on "), line
    stop(d)
    lines = [l for l in open(err).read().splitlines() if l]
    assert lines, "the dispatcher logged nothing"
    records = [json.loads(l) for l in lines]
    for r in records:
        assert set(r) == {"ts", "program", "level", "msg"}, r
        assert r["program"] == "ferry-dispatcher" and r["level"] in ("debug", "info", "warn", "error"), r
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", r["ts"]), r
    assert any('a "quoted"\ndir' in r["msg"] for r in records), records
    bad = subprocess.run([binary(ferry_local, "ferry-worker"), "--log-format", "xml"], capture_output=True, text=True,
                         timeout=30, env=clean_env())
    assert bad.returncode == 2 and "--log-format" in bad.stderr, bad.stderr
