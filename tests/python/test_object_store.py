"""Data in object storage: an ImageFolder layout in a bucket of a real S3-compatible
server (moto in server mode, checking every request's SigV4 signature against an IAM
user's key and policy; tests/s3/s3_server.py), read by the same code paths as a tree on
disk: the same listing, the same batches, exactly once through a dispatcher with two
workers; a refused object reported by URL; wrong credentials fail fast with the store's
message and no secret; URLs outside --data-root refused before any request."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
import torch

from conftest import Daemons

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "s3"))
from shards import write_shards  # noqa: E402  (the benchmark writes its shards the same way)

DENIED = "class_01/00001.jpg"  # the test user's policy denies GetObject on this one


def make_shards(tree, root, shards=3):
    """WebDataset shards of the tree's samples, in listing order: key.jpg + key.cls."""
    write_shards(tree, root, shards=shards)
    return root


@pytest.fixture(scope="module")
def shards(small_tree, tmp_path_factory):
    return make_shards(small_tree, str(tmp_path_factory.mktemp("shards") / "train"))


@pytest.fixture(scope="module")
def https(shards, tmp_path_factory):
    here = os.path.dirname(os.path.abspath(__file__))
    work = str(tmp_path_factory.mktemp("https"))
    proc = subprocess.Popen(["/usr/bin/python3", os.path.join(here, "..", "s3", "https_server.py"), "--root",
                             os.path.dirname(shards), "--workdir", work], stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("{"), "the HTTPS server did not start: %r" % line
    yield json.loads(line)
    proc.kill()
    proc.wait()


@pytest.fixture(scope="module")
def coco(sample_data, tmp_path_factory):
    from test_detection import make_coco
    root = str(tmp_path_factory.mktemp("coco") / "coco")
    data, ids = make_coco(sample_data, root, n=6)
    return root, data, ids


@pytest.fixture(scope="module")
def voc(sample_data, tmp_path_factory):
    from test_segmentation import make_voc
    root = str(tmp_path_factory.mktemp("voc") / "voc")
    return root, make_voc(sample_data, root)


@pytest.fixture(scope="module")
def s3(small_tree, shards, coco, voc, tmp_path_factory):
    python = os.environ.get("FERRY_S3_PYTHON")
    if not python:
        if os.environ.get("CI"):
            pytest.fail("FERRY_S3_PYTHON must name the Python of tests/s3/setup.sh's environment (tests/run_all.sh "
                        "sets it)")
        pytest.skip("FERRY_S3_PYTHON is not set (bash tests/s3/setup.sh makes the environment)")
    here = os.path.dirname(os.path.abspath(__file__))
    log = str(tmp_path_factory.mktemp("s3") / "moto.log")
    proc = subprocess.Popen([python, os.path.join(here, "..", "s3", "s3_server.py"), "--log", log,
                             "--upload", small_tree + ":photos/tree", "--upload", small_tree + ":other/tree",
                             "--deny", "photos/denied/" + DENIED,
                             "--upload", small_tree + ":photos/denied",
                             "--upload", shards + ":photos/shards",
                             "--upload", coco[0] + ":photos/coco",
                             "--upload", voc[0] + ":photos/voc"],
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("{"), "the S3 server did not start: %r (log %s)" % (line, log)
    info = json.loads(line)
    yield info
    proc.kill()
    proc.wait()


@pytest.fixture
def aws(s3, monkeypatch):
    """The environment the AWS tools read: endpoint and the test user's key."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3["endpoint"])
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3["access_key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3["secret_key"])
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return s3


def put_objects(s3, objects, bucket="photos"):
    """Objects {key: text} into the bucket, by boto3 in the server's environment."""
    code = ("import boto3, json, sys\n"
            "a = json.loads(sys.argv[1])\n"
            "c = boto3.client('s3', endpoint_url=a['endpoint'], region_name='us-east-1', "
            "aws_access_key_id=a['access_key'], aws_secret_access_key=a['secret_key'])\n"
            "for k, v in a['objects'].items(): c.put_object(Bucket=a['bucket'], Key=k, Body=v.encode())\n")
    subprocess.run([os.environ["FERRY_S3_PYTHON"], "-c", code,
                    json.dumps(dict(s3, objects=objects, bucket=bucket))], check=True, timeout=60)


def requests_logged(s3):
    with open(s3["log"]) as f:
        return sum(1 for line in f if '"GET ' in line or '"HEAD ' in line)


def in_fresh_process(code, env=None):
    """Runs `code` in a new interpreter (the store reads its environment once a process)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.environ.get("FERRY_PYTHON_DIR") or os.path.join(here, "..", "..", "build", "python")
    return subprocess.run(["/usr/bin/python3", "-c", "import sys; sys.path.insert(0, %r)\n" % os.path.abspath(path)
                           + code], capture_output=True, text=True, timeout=120, env=env)


def test_a_bucket_lists_as_the_tree_on_disk(aws, small_tree):
    got = in_fresh_process("""
import json, ferry
from ferry import _ferry
print(json.dumps([_ferry.list_dataset("s3://photos/tree/"), _ferry.list_dataset(%r)]))
""" % small_tree, env=dict(os.environ))
    assert got.returncode == 0, got.stderr
    (paths, labels, classes), (dpaths, dlabels, dclasses) = json.loads(got.stdout)
    assert classes == dclasses and labels == dlabels and len(paths) == 120
    assert [p[len("s3://photos/tree/"):] for p in paths] == [os.path.relpath(p, small_tree) for p in dpaths]


def test_a_listing_of_many_pages_is_whole(aws, small_tree):
    """ListObjectsV2 pages followed by their continuation tokens: 7 keys a page (S3's is
    1,000), so the 120 objects come in 18 pages, listed as the tree on disk."""
    got = in_fresh_process("""
import json, ferry
from ferry import _ferry
print(json.dumps([_ferry.list_dataset("s3://photos/tree/"), _ferry.list_dataset(%r)]))
""" % small_tree, env=dict(os.environ, FERRY_S3_LIST_PAGE_KEYS="7"))
    assert got.returncode == 0, got.stderr
    (paths, labels, classes), (dpaths, dlabels, dclasses) = json.loads(got.stdout)
    assert len(paths) == 120 and classes == dclasses and labels == dlabels
    assert [p[len("s3://photos/tree/"):] for p in paths] == [os.path.relpath(p, small_tree) for p in dpaths]
    with open(aws["log"]) as f:
        pages = [l for l in f if "list-type=2" in l and "max-keys=7" in l]
    assert len(pages) >= 18, "%d listing requests of 7 keys" % len(pages)


def test_imagenet_train_through_a_dispatcher_equals_the_disk(aws, ferry, ferry_local, small_tree, tmp_path):
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=2, worker_args=["--data-root", "s3://photos/tree/"],
                dispatcher_args=["--data-root", "s3://photos/tree/"])
    try:
        def remote(data, job):
            return ferry.Loader(data=data, pipeline="imagenet-train", batch_size=10, seed=7, epochs=2,
                                dispatcher=d.dispatcher, job_name=job, deterministic=True)
        def two_epochs(loader):
            out = []
            for _ in range(2):  # each pass is an epoch
                out += [(x.clone(), y.clone(), loader.last_batch_info()["indices"].clone()) for x, y in loader]
            return out
        local = ferry.Loader(data=small_tree, pipeline="imagenet-train", batch_size=10, seed=7, epochs=2, threads=2)
        want = two_epochs(local)
        r = remote("s3://photos/tree/", "from-s3")
        got = two_epochs(r)
        r.close()
        assert len(got) == len(want) == 24
        for epoch in range(2):
            seen = torch.cat([i for _, _, i in got[12 * epoch:12 * (epoch + 1)]]).tolist()
            assert sorted(seen) == list(range(120)), "each sample exactly once in epoch %d" % epoch
        for b, ((x, y, i), (wx, wy, wi)) in enumerate(zip(got, want)):
            assert torch.equal(i, wi) and torch.equal(y, wy) and torch.equal(x, wx), "batch %d" % b
        assert not r.skipped()
    except BaseException:
        print(d.tails())
        raise
    finally:
        d.close()


def test_a_denied_object_is_that_samples_error_alone(aws, ferry):
    got = in_fresh_process("""
import ferry
l = ferry.Loader(data="s3://photos/denied/", pipeline="imagenet-eval", batch_size=10, shuffle=False, threads=2)
n = sum(x.shape[0] for x, _ in l)
print(n)
for s in l.skipped():
    print("SKIPPED", s)
""", env=dict(os.environ))
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0] == "119"
    skipped = [l for l in lines if l.startswith("SKIPPED")]
    assert len(skipped) == 1, lines
    print(skipped[0])
    assert "s3://photos/denied/" + DENIED in skipped[0] and "403" in skipped[0] and "AccessDenied" in skipped[0]


def test_wrong_credentials_fail_fast_with_the_stores_error_and_no_secret(aws, ferry, ferry_local, tmp_path,
                                                                          monkeypatch):
    secret = "wrong-secret-" + "x" * 20
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=1, worker_args=["--data-root", "s3://photos/"],
                dispatcher_args=["--data-root", "s3://photos/"])
    try:
        t0 = time.monotonic()
        with pytest.raises(Exception) as e:
            next(iter(ferry.Loader(data="s3://photos/tree/", batch_size=10, dispatcher=d.dispatcher,
                                   job_name="wrong-key")))
        took = time.monotonic() - t0
        message = str(e.value)
        print(took, message)
        assert took < 5, took
        assert "SignatureDoesNotMatch" in message and "403" in message, message
        logs = d.tails(200000)
        for text in (message, logs):
            assert secret not in text and aws["access_key"] not in text
    finally:
        d.close()


def test_urls_outside_the_roots_are_refused_before_any_request(aws, ferry, ferry_local, tmp_path):
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=1, worker_args=["--data-root", "s3://photos/tree/"],
                dispatcher_args=["--data-root", "s3://photos/tree/"])
    try:
        before = requests_logged(aws)
        for data, why in (("s3://other/tree/", "outside this process's --data-root URLs"),
                          ("s3://photos/treehouse/", "outside"),
                          ("http://169.254.169.254/latest/meta-data/", "metadata"),
                          ("https://[fd00:ec2::254]/latest/", "metadata"),
                          ("s3://photos/tree/../denied/", "'..' segment")):
            with pytest.raises(Exception, match="PermissionDenied|refused|outside") as e:
                next(iter(ferry.Loader(data=data, batch_size=10, dispatcher=d.dispatcher, job_name="refused")))
            print(str(e.value))
            assert why in str(e.value), (data, str(e.value))
        assert requests_logged(aws) == before, "a refused job sent no request"
    finally:
        d.close()
    # A worker with no URL root reads no URL at all.
    d = Daemons(os.path.dirname(ferry_local), tmp_path / "none", workers=1)
    try:
        with pytest.raises(Exception, match="reads no URL"):
            next(iter(ferry.Loader(data="s3://photos/tree/", batch_size=10, dispatcher=d.dispatcher, job_name="no")))
    finally:
        d.close()


def epochs_of(ferry, data, epochs=2, **kw):
    """Two epochs' batches (images, labels, indices) of imagenet-train, seed 7."""
    loader = ferry.Loader(data=data, pipeline="imagenet-train", batch_size=10, seed=7, epochs=epochs, **kw)
    out = []
    for _ in range(epochs):
        out += [(x.clone(), y.clone(), loader.last_batch_info()["indices"].clone()) for x, y in loader]
    loader.close()
    return out


def assert_same(got, want, per_epoch):
    assert len(got) == len(want) and len(got) > 0
    for epoch in range(len(got) // per_epoch):
        seen = torch.cat([i for _, _, i in got[per_epoch * epoch:per_epoch * (epoch + 1)]]).tolist()
        assert sorted(seen) == list(range(120)), "each sample exactly once in epoch %d" % epoch
    for b, ((x, y, i), (wx, wy, wi)) in enumerate(zip(got, want)):
        assert torch.equal(i, wi) and torch.equal(y, wy) and torch.equal(x, wx), "batch %d" % b


def test_webdataset_shards_from_a_bucket_and_over_https_equal_the_disk(aws, https, ferry, ferry_local, shards,
                                                                        tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_CA_BUNDLE", https["ca"])
    pattern = "shard-{000..002}.tar"
    want = epochs_of(ferry, os.path.join(shards, pattern), threads=2)
    roots = ["--data-root", "s3://photos/shards/", "--data-root", https["url"] + "/train/"]
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=2, worker_args=roots, dispatcher_args=roots)
    try:
        for data in ("s3://photos/shards/" + pattern, "s3://photos/shards/", https["url"] + "/train/" + pattern):
            got = epochs_of(ferry, data, dispatcher=d.dispatcher, job_name="shards-%d" % len(data),
                            deterministic=True)
            assert_same(got, want, 12)
    except BaseException:
        print(d.tails())
        raise
    finally:
        d.close()
    with open(https["log"]) as f:
        ranged = [l for l in f if l.startswith("GET /train/shard-")]
    assert ranged, "the shards were read over HTTPS"


def test_coco_from_a_bucket_has_its_boxes(aws, ferry, ferry_local, coco, tmp_path):
    from test_detection import PIPELINE, TARGETS, _run_epochs
    root, disk, ids = coco
    data = {"format": "coco", "annotations": "s3://photos/coco/instances.json", "images": "s3://photos/coco/images"}
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=2, worker_args=["--data-root", "s3://photos/coco/"],
                dispatcher_args=["--data-root", "s3://photos/coco/"])
    try:
        kw = dict(pipeline=PIPELINE, batch_size=2, epochs=2, drop_last=False, targets=TARGETS, seed=5)
        loader = ferry.Loader(data=data, dispatcher=d.dispatcher, job_name="coco-s3", batches_per_split=1,
                              deterministic=True, **kw)
        # Boxes, labels and masks follow each crop and flip, every image once an epoch.
        checked = _run_epochs(loader, ids, 2)
        assert checked >= 2 * len(ids) * 4 // 3
        loader.close()
        # And equal what the same files on disk give.
        def first_epoch(l):
            return [(x.clone(), [(int(t["image_id"]), t["boxes"].clone()) for t in ts]) for x, ts in l]
        got = first_epoch(ferry.Loader(data=data, dispatcher=d.dispatcher, job_name="coco-s3-again",
                                       batches_per_split=1, deterministic=True, **kw))
        want = first_epoch(ferry.Loader(data=disk, threads=2, **kw))
        assert len(got) == len(want) == 3
        for (x, t), (wx, wt) in zip(got, want):
            assert torch.equal(x, wx)
            assert [i for i, _ in t] == [i for i, _ in wt]
            assert all(torch.equal(b, wb) for (_, b), (_, wb) in zip(t, wt))
    except BaseException:
        print(d.tails())
        raise
    finally:
        d.close()


def start_proxy(s3, log, *args):
    here = os.path.dirname(os.path.abspath(__file__))
    proc = subprocess.Popen(["/usr/bin/python3", os.path.join(here, "..", "s3", "fault_proxy.py"), "--upstream",
                             s3["endpoint"], "--log", log] + list(args), stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("{"), line
    return proc, dict(json.loads(line), log=log)


@pytest.fixture
def proxy(s3, tmp_path):
    """The fault proxy in front of the S3 server: 503 SlowDown on every 20th request (5%), a reset
    mid-body on every 100th (1%)."""
    proc, info = start_proxy(s3, str(tmp_path / "proxy.log"), "--every-503", "20", "--every-reset", "100")
    yield info
    proc.kill()
    proc.wait()


@pytest.fixture
def counting_proxy(s3, tmp_path):
    """The proxy with no faults: it counts the requests that reach the store."""
    proc, info = start_proxy(s3, str(tmp_path / "counting.log"))
    yield info
    proc.kill()
    proc.wait()


def proxy_log(proxy):
    with open(proxy["log"]) as f:
        return [l.split() for l in f]


def test_an_epoch_through_503s_and_resets_is_whole_and_exactly_once(aws, proxy, ferry, ferry_local, small_tree,
                                                                     tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy["endpoint"])
    roots = ["--data-root", "s3://photos/tree/"]
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=2, worker_args=roots, dispatcher_args=roots)
    try:
        want = epochs_of(ferry, small_tree, threads=2)
        got = epochs_of(ferry, "s3://photos/tree/", dispatcher=d.dispatcher, job_name="faults", deterministic=True)
        assert_same(got, want, 12)
    except BaseException:
        print(d.tails())
        raise
    finally:
        d.close()
    log = proxy_log(proxy)
    faults = [l[3] for l in log]
    assert faults.count("503") >= 5 and faults.count("reset") >= 1, "the faults were met: %s" % faults
    # A reset body was asked again from the byte it reached (a Range request), and every
    # request that followed a 503 or a reset was answered.
    assert all(f in ("200", "206", "503", "reset") for f in faults), faults
    for i, l in enumerate(log):
        if l[3] == "reset":
            # Asked again from the byte the cut body reached: a Range that starts past 0.
            again = [m for m in log[i + 1:] if m[2] == l[2]]
            assert again, "the reset object was asked again"
            # From the byte the cut body reached (another epoch's read of the object
            # may come first, from 0).
            starts = [int(m[4].split("=")[1].split("-")[0]) for m in again if m[4] != "-"]
            assert any(s > 0 for s in starts), again


def folder_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def test_the_second_epoch_with_the_cache_fetches_nothing(aws, counting_proxy, ferry, ferry_local, small_tree, tmp_path,
                                                        monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", counting_proxy["endpoint"])
    cache = str(tmp_path / "cache")
    tree_bytes = folder_bytes(small_tree)
    roots = ["--data-root", "s3://photos/tree/"]
    # One worker: through a dispatcher, a sample's split may go to another worker the
    # next epoch, whose cache (on its own disk) has not seen it.
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    metrics_port = sock.getsockname()[1]
    sock.close()
    d = Daemons(os.path.dirname(ferry_local), tmp_path / "d", workers=1,
                worker_args=roots + ["--cache-dir", cache, "--cache-bytes", str(64 << 20), "--metrics",
                                     "127.0.0.1:%d" % metrics_port], dispatcher_args=roots)
    try:
        loader = ferry.Loader(data="s3://photos/tree/", pipeline="imagenet-train", batch_size=10, seed=7, epochs=2,
                              dispatcher=d.dispatcher, job_name="cached", deterministic=True)
        first = [loader.last_batch_info()["indices"].clone() for _ in loader]
        second = [loader.last_batch_info()["indices"].clone() for _ in loader]
        loader.close()
        fetched = [l[2] for l in proxy_log(counting_proxy) if l[1] == "GET" and "list-type" not in l[2]]
        assert sorted(torch.cat(first).tolist()) == sorted(torch.cat(second).tolist()) == list(range(120))
        # Each object fetched once over both epochs (the second epoch's reads, some of
        # them fetched ahead while the first ended, all came from the cache).
        assert len(fetched) == len(set(fetched)) == 120, "%d fetches of %d objects" % (len(fetched), len(set(fetched)))
        # /metrics counts the same: requests (one listing, 120 reads), bytes, cache hits.
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % metrics_port, timeout=5) as r:
            text = r.read().decode()
        m = {l.split()[0]: float(l.split()[1]) for l in text.splitlines() if l.startswith("ferry_worker_")
             and " " in l and "{" not in l.split()[0]}
        assert m["ferry_worker_object_requests_total"] == 121, text
        assert m["ferry_worker_object_bytes_total"] >= tree_bytes
        # The second epoch's reads hit (one that found its object still being fetched by
        # the first epoch waited for it: a miss, then the hit; one planned while the first
        # epoch's read of it was still queued shared that read: no lookup at all).
        assert 100 <= m["ferry_worker_cache_hits_total"] <= 120 and m["ferry_worker_cache_misses_total"] >= 120
        assert m["ferry_worker_object_retries_total"] == 0 and m["ferry_worker_object_failures_total"] == 0
        assert 0 < m["ferry_worker_object_request_seconds_total"] < 120
    except BaseException:
        print(d.tails())
        raise
    finally:
        d.close()
    assert tree_bytes <= folder_bytes(cache) <= 64 << 20
    # A cache smaller than the data stays within its limit, and still serves what it holds.
    small = str(tmp_path / "small-cache")
    limit = 2 << 20
    assert tree_bytes > 2 * limit
    d = Daemons(os.path.dirname(ferry_local), tmp_path / "s", workers=1,
                worker_args=roots + ["--cache-dir", small, "--cache-bytes", str(limit)], dispatcher_args=roots)
    try:
        got = epochs_of(ferry, "s3://photos/tree/", dispatcher=d.dispatcher, job_name="small-cache", deterministic=True)
        want = epochs_of(ferry, small_tree, threads=2)
        assert_same(got, want, 12)
        assert 0 < folder_bytes(small) <= limit
    finally:
        d.close()


def test_shards_listed_into_the_cache_are_read_from_it(aws, counting_proxy, ferry, ferry_local, shards, tmp_path,
                                                        monkeypatch):
    """A shard's listing reads it whole; with --cache-dir the worker keeps those bytes and
    reads every member from them: two epochs cost the store one pass over each shard per
    process that lists it (the dispatcher, the worker), and no request per member."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", counting_proxy["endpoint"])
    roots = ["--data-root", "s3://photos/shards/"]
    pattern = "shard-{000..002}.tar"
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=1,
                worker_args=roots + ["--cache-dir", str(tmp_path / "cache")], dispatcher_args=roots)
    try:
        got = epochs_of(ferry, "s3://photos/shards/" + pattern, dispatcher=d.dispatcher, job_name="shards-cached",
                        deterministic=True)
        assert_same(got, epochs_of(ferry, os.path.join(shards, pattern), threads=2), 12)
    except BaseException:
        print(d.tails())
        raise
    finally:
        d.close()
    gets = [l for l in proxy_log(counting_proxy) if l[1] == "GET"]
    # Each shard (a few hundred KB: one 8 MiB range) fetched once by the dispatcher and
    # once by the worker, from byte 0: nothing else.
    assert sorted(l[2] for l in gets) == sorted(["/photos/shards/shard-%03d.tar" % i for i in range(3)] * 2), gets
    assert all(l[4].startswith("bytes=0-") for l in gets), gets


def test_a_list_object_reads_its_entries_beside_it(aws, ferry, ferry_local, small_tree, tmp_path):
    """A .tsv list in the bucket: relative entries are keys beside it; an entry outside the
    daemon's URL roots refuses the job by name before it is read."""
    classes = sorted(os.listdir(small_tree))
    rows = ["tree/%s/%s\t%d" % (c, f, classes.index(c)) for c in classes for f in sorted(os.listdir(
        os.path.join(small_tree, c)))]
    put_objects(aws, {"train.tsv": "\n".join(rows) + "\n", "escape.tsv": "s3://other/tree/class_00/00000.jpg\t0\n"})
    local_list = tmp_path / "train.tsv"
    local_list.write_text("\n".join(os.path.join(os.path.dirname(small_tree), r) for r in rows) + "\n")
    roots = ["--data-root", "s3://photos/"]
    d = Daemons(os.path.dirname(ferry_local), tmp_path / "d", workers=2, worker_args=roots, dispatcher_args=roots)
    try:
        got = epochs_of(ferry, "s3://photos/train.tsv", dispatcher=d.dispatcher, job_name="tsv", deterministic=True)
        assert_same(got, epochs_of(ferry, str(local_list), threads=2), 12)
        with pytest.raises(Exception, match="outside this process's --data-root URLs"):
            next(iter(ferry.Loader(data="s3://photos/escape.tsv", batch_size=1, dispatcher=d.dispatcher,
                                   job_name="escape")))
    except BaseException:
        print(d.tails())
        raise
    finally:
        d.close()


def test_a_worker_killed_mid_epoch_while_reading_loses_and_repeats_nothing(aws, ferry, ferry_local, small_tree,
                                                                           tmp_path):
    roots = ["--data-root", "s3://photos/tree/"]
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=2, worker_args=roots, dispatcher_args=roots)
    try:
        loader = ferry.Loader(data="s3://photos/tree/", pipeline="imagenet-train", batch_size=10, seed=7, epochs=2,
                              dispatcher=d.dispatcher, job_name="kill", deterministic=True, batches_per_split=1)
        got = []
        for epoch in range(2):
            for b, (x, y) in enumerate(loader):
                got.append((x.clone(), y.clone(), loader.last_batch_info()["indices"].clone()))
                if epoch == 0 and b == 3:
                    d.kill_worker(0)  # SIGKILL, its reads in flight
        loader.close()
        assert_same(got, epochs_of(ferry, small_tree, threads=2), 12)
    except BaseException:
        print(d.tails())
        raise
    finally:
        d.close()


def test_segmentation_from_a_bucket_has_its_masks(aws, ferry, ferry_local, voc, tmp_path):
    from test_segmentation import PIPELINE, check_masks_follow
    root, disk = voc
    roots = ["--data-root", "s3://photos/voc/"]
    d = Daemons(os.path.dirname(ferry_local), tmp_path, workers=2, worker_args=roots, dispatcher_args=roots)
    try:
        kw = dict(pipeline=PIPELINE, batch_size=3, epochs=2, drop_last=False, targets=("semantic", "image_id"),
                  seed=3)
        for name, data in (("listed", {"format": "segmentation", "images": "s3://photos/voc/JPEGImages",
                                       "masks": "s3://photos/voc/SegmentationClass/",
                                       "list": "s3://photos/voc/ImageSets/Segmentation/train.txt"}),
                           ("all", {"format": "segmentation", "images": "s3://photos/voc/JPEGImages/",
                                    "masks": "s3://photos/voc/SegmentationClass"})):
            # Masks follow each crop, flip and rotation, every image once an epoch ...
            check_masks_follow(ferry.Loader(data=data, dispatcher=d.dispatcher, job_name="voc-" + name,
                                            deterministic=True, **kw), 6, 2)
            # ... and equal what the same files on disk give.
            got = [(x.clone(), [t["semantic"].clone() for t in ts]) for x, ts in
                   ferry.Loader(data=data, dispatcher=d.dispatcher, job_name="voc-again-" + name,
                                deterministic=True, **kw)]
            local = dict(disk) if name == "listed" else {k: v for k, v in disk.items() if k != "list"}
            want = [(x.clone(), [t["semantic"].clone() for t in ts]) for x, ts in
                    ferry.Loader(data=local, threads=2, **kw)]
            assert len(got) == len(want) == 2
            for (x, m), (wx, wm) in zip(got, want):
                assert torch.equal(x, wx) and all(torch.equal(a, b) for a, b in zip(m, wm))
    except BaseException:
        print(d.tails())
        raise
    finally:
        d.close()
