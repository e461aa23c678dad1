"""Op plugins (issue 24): the example plugin (tests/plugin/example_ops.c, built with the
tests) named in a pipeline like built-in ops, in process and through a dispatcher with
1 and 3 workers started with --plugin (here through $FERRY_PLUGIN, which ferry-local's
daemons inherit): the batches are identical, pixel for pixel; a dispatcher without the
plugin refuses the job, naming the op."""
import os
import subprocess

import pytest
import torch

from test_binding import LocalCluster
from test_recipe_determinism import epoch, same

PIPELINE = {"ops": [{"op": "resize", "size": [48, 48]}, {"op": "example_noise", "amount": 0.2},
                    {"op": "example_shift", "max_shift": 10}, {"op": "hflip"}]}


@pytest.fixture
def plugin(ferry_local):
    path = os.path.join(os.path.dirname(os.path.dirname(ferry_local)), "tests", "libferry_example_plugin.so")
    assert os.path.exists(path), path
    return path


def test_plugin_ops_give_the_same_batches_in_process_and_on_1_and_3_workers(ferry, ferry_local, small_tree, plugin,
                                                                           monkeypatch):
    ferry.load_plugin(plugin)
    ferry.load_plugin(plugin)  # a second load is a no-op
    assert {"example_noise", "example_shift"} <= set(ferry.registered_ops())
    kw = dict(data=small_tree, pipeline=PIPELINE, batch_size=10, seed=3, epochs=1, drop_last=False)
    want = epoch(ferry.Loader(threads=2, **kw))
    assert len(want) == 12 and want[0][0].shape == (10, 48, 48, 3)
    other = epoch(ferry.Loader(threads=1, **dict(kw, seed=4)))
    assert not same(other, want), "another seed: other noise"
    monkeypatch.setenv("FERRY_PLUGIN", plugin)
    for workers in (1, 3):
        cluster = LocalCluster(ferry_local, workers=workers)
        try:
            got = epoch(ferry.Loader(dispatcher=cluster.dispatcher, job_name="plugin-%d" % workers,
                                     deterministic=True, **kw))
            assert same(got, want), "%d worker(s): not the in-process batches" % workers
        finally:
            cluster.close()


def test_daemons_without_the_plugin_refuse_its_ops_by_name(ferry, ferry_local, small_tree, plugin, monkeypatch):
    ferry.load_plugin(plugin)  # the trainer has it; the cluster does not
    monkeypatch.delenv("FERRY_PLUGIN", raising=False)
    cluster = LocalCluster(ferry_local, workers=1)
    try:
        with pytest.raises(Exception, match="example_noise"):
            next(iter(ferry.Loader(data=small_tree, pipeline=PIPELINE, batch_size=10, epochs=1,
                                   dispatcher=cluster.dispatcher, job_name="no-plugin")))
    finally:
        cluster.close()


def test_a_library_that_is_no_plugin_stops_a_worker_at_start(ferry_local, plugin):
    worker = os.path.join(os.path.dirname(ferry_local), "ferry-worker")
    r = subprocess.run([worker, "--listen", "127.0.0.1:0", "--plugin", "/nonexistent/libx.so"], capture_output=True,
                       text=True, timeout=30)
    assert r.returncode == 2 and "libx.so" in r.stderr, r.stderr
    import ferry
    with pytest.raises(ValueError, match="ferry_plugin_init"):
        ferry.load_plugin(ferry._ferry.__file__)  # a shared library, but no plugin
