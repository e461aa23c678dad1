#!/usr/bin/env bash
# Issue 40's fleet target where there are cores for it: one ferry-dispatcher under
# 1,000, 4,000 and 10,000 simulated workers heartbeating every 100 ms (one job, then a
# thousand placed on 8 workers each), with the load generator on threads of its own.
# The 2-vCPU development machine cannot offer 100,000 heartbeats/s and answer them at
# once (BENCHMARKS.md, "One dispatcher, thousands of workers"); the GPU machine has 16
# cores. Uses the wheel's ferry-dispatcher-load and ferry-dispatcher (.gpu/, from
# bench/gpu/prepare.sh). Under 4 minutes; the table also goes to $OUT/fleet.txt.
#   bash bench/gpu/fleet.sh        (the device tool: carry [".gpu"])
#   FERRY_FLEET_LOAD_THREADS  load threads (default: a third of the cores, at least 1)
#   FERRY_FLEET_SECONDS       each timed window (default 10)
set -euo pipefail
cd "$(dirname "$0")/../.."
site=/tmp/ferry-site
[[ -x $site/ferry/bin/ferry-dispatcher-load ]] ||
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .gpu/ferry-*-cp312-*.whl
chmod +x "$site"/ferry/bin/* 2>/dev/null || true
ulimit -n "$(ulimit -H -n)" 2>/dev/null || true  # a socket per simulated worker, twice
cores=$(nproc)
threads=${FERRY_FLEET_LOAD_THREADS:-$(( cores / 3 > 1 ? cores / 3 : 1 ))}
seconds=${FERRY_FLEET_SECONDS:-10}
load=$site/ferry/bin/ferry-dispatcher-load
out=${OUT:-/tmp}/fleet.txt
{
  echo "host: $cores cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), open files $(ulimit -n)"
  "$load" --workers 1000,4000,10000 --seconds "$seconds" --load-threads "$threads"
  "$load" --workers 1000,4000,10000 --jobs 1000 --workers-per-job 8 --splits 1000 --split-ms 1000 \
    --seconds "$seconds" --load-threads "$threads"
} 2>&1 | tee "$out"
