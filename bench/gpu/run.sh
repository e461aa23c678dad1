#!/usr/bin/env bash
# The GPU machine's whole check, in one call (under 6 minutes on an H100 host): the wheel
# installed (.gpu/, from bench/gpu/prepare.sh), the Python suite's CUDA tests against it
# (device="cuda" equal to the CPU result; no buffer recycled under a held-back copy, and
# next() not waiting for it), then the training benchmark (bench/gpu/train_bench.py) on
# the carried corpus, its table also written to $OUT/gpu.txt when the device tool sets OUT.
#   FERRY_GPU_SECONDS   each timed window (default 15)
#   FERRY_GPU_ARGS      more flags for train_bench.py (a CPU rehearsal: "--batch 8 --models resnet18")
set -euo pipefail
cd "$(dirname "$0")/../.."
site=/tmp/ferry-site
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .gpu/ferry-*-cp312-*.whl
export PYTHONPATH=$site PATH=$site/bin:$PATH
export FERRY_PYTHON_DIR=$site FERRY_LOCAL=$site/ferry/bin/ferry-local FERRY_SAMPLE_DATA=$PWD/.gpu/corpus
nvidia-smi -L || true
echo "host: $(nproc) cores; $(python3 -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "torch threads", torch.get_num_threads())')"
# What the loaders' processes may use, for the figures' reading (torchvision's DataLoader
# was at 2.6-8.7% of the ceiling on the H200 host, against 14-24% on H100 hosts): the
# cgroup's CPU quota, /dev/shm (its workers hand batches over through it), open files.
echo "cgroup cpu.max: $(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo none); /dev/shm: $(df -h /dev/shm 2>/dev/null | awk 'NR==2 {print $2 " (" $5 " used)"}'); open files: $(ulimit -n)"
# And the cores the processes actually get: nproc busy processes for 2 s against one
# alone (a CPU quota or a noisy host shows as fewer than nproc).
python3 - <<'PY' || true
import multiprocessing as mp, os, time
def spin(q, t=2.0):
    end, n = time.perf_counter() + t, 0
    while time.perf_counter() < end:
        n += 1
    q.put(n)
q = mp.Queue()
spin(q); one = q.get()
ps = [mp.Process(target=spin, args=(q,)) for _ in range(os.cpu_count())]
for p in ps: p.start()
total = sum(q.get() for _ in ps)
for p in ps: p.join()
print("effective cores: %.1f of %d (%d busy processes against one alone)" % (total / one, os.cpu_count(), len(ps)))
PY
echo "== the CUDA tests"
python3 -m pytest -q -p no:cacheprovider tests/python/test_wire.py || echo "CUDA tests FAILED"
echo "== the training benchmark"
out=${OUT:-/tmp}
python3 bench/gpu/train_bench.py --data .gpu/corpus --seconds "${FERRY_GPU_SECONDS:-15}" \
  --ferry-local "$FERRY_LOCAL" ${FERRY_GPU_ARGS:-} | tee "$out/gpu.txt"
