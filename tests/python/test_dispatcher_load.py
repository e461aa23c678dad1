"""ferry-bench dispatcher-load, the fleet benchmark of BENCHMARKS.md, still runs: a real
ferry-dispatcher under simulated workers spread over several load threads, every one
registered and answered, leases made and acknowledged, no request refused. Behaviour
only: the figures themselves are the benchmark's (the machines here are shared)."""
import re
import subprocess


def test_simulated_fleet_on_several_load_threads_is_served(ferry_bench):
    out = subprocess.run([ferry_bench, "dispatcher-load", "--workers", "200", "--jobs", "20", "--workers-per-job", "4",
                          "--splits", "100", "--split-ms", "200", "--seconds", "2", "--load-threads", "3"],
                         capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 load thread(s)" in out.stdout, out.stdout
    line = [l for l in out.stdout.splitlines() if l.startswith("dispatcher ")]
    assert len(line) == 1, out.stdout
    fields = dict(re.findall(r"(\S+)=(\S+)", line[0]))
    assert fields["registered"] == "200" and fields["errors"] == "0", line[0]
    assert float(fields["heartbeats/s"]) > 0 and float(fields["leases/s"]) > 0, line[0]
    assert float(fields["p99_ms"]) >= float(fields["p50_ms"]) > 0, line[0]
