"""The chaos soak (bench/chaos_soak.py) in the test command: 4 workers and a dispatcher
on loopback, two consumers sharing a job for 10 epochs, while workers are killed -9 or
SIGSTOPped every few seconds, the dispatcher is killed -9 and restarted twice, and one
consumer is killed and resumed from its state. Every epoch must arrive exactly once."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))


def test_chaos_soak_every_epoch_exactly_once(sample_data):
    local = os.environ.get("FERRY_LOCAL", os.path.join(ROOT, "build", "server", "ferry-local"))
    build = os.path.dirname(os.path.dirname(os.path.abspath(local)))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "chaos_soak.py"), "--build", build, "--data",
                        sample_data, "--epochs", "10", "--seed", "11", "--time-limit", "240"],
                       capture_output=True, text=True, timeout=300)
    print(r.stdout)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "verdict: every epoch exactly once" in r.stdout
    assert "dispatcher killed -9 and restarted         2" in r.stdout
    assert "consumer killed -9 and resumed             1" in r.stdout
