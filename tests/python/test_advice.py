"""The dispatcher's worker-count advice (issue 12), against a sweep: `ferry-bench
advise` runs a trainer that needs a known rate (it computes 1/rate seconds per batch)
against 1, 2, ... synthetic-cost workers (each batch costs a known time on a worker),
and at each count reads the input wait and the dispatcher's
ferry_job_recommended_workers. For three needed rates, the advice given at every point
of the sweep must be within one of the fewest workers that bring the input wait under
10%. Real processes: a dispatcher, workers and a client over loopback."""
import re
import subprocess

import pytest

# A sweep of input waits against known rates: timing, so it runs alone (conftest.py).
pytestmark = pytest.mark.serial

def test_recommended_workers_is_within_one_of_the_sweep(ferry_bench):
    out = subprocess.run([ferry_bench, "advise", "--rates", "75", "125", "175", "--seconds", "5", "--warmup", "2",
                          "--max-workers", "6"], capture_output=True, text=True, timeout=600)
    print(out.stdout)
    lines = re.findall(r"^advise need_batches/s=(\d+) sweep_workers=(\d+) advice=([\d,]+) within_one=(\w+)$",
                       out.stdout, re.M)
    assert len(lines) == 3, out.stdout + out.stderr
    for rate, sweep, advice, within in lines:
        assert int(sweep) > 0, "the sweep found no count without a stall at %s batches/s" % rate
        assert within == "yes", "advice %s, sweep %s at %s batches/s:\n%s" % (advice, sweep, rate, out.stdout)
    # Three different answers: the rates were chosen to need 2, 3 and 4 workers.
    assert len({int(s) for _, s, _, _ in lines}) == 3, out.stdout
    assert out.returncode == 0, out.stderr
