#!/usr/bin/env bash
# Ferry's main job on one machine: set up (packages, build, sample dataset), start
# two local ferry-workers on loopback, and stream the sample dataset to a client
# (imagenet-train: fused ROI decode, RandomResizedCrop 224, flip, normalize, float32
# NCHW), printing progress and throughput. The workers are stopped (SIGTERM, drain)
# at the end.
#   bash bench/run_main.sh [--epochs E] [extra ferry-bench consume flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/setup.sh

build=${FERRY_BUILD_DIR:-build}
data="$PWD/${FERRY_DATA_DIR:-data}/sample"
workers=${FERRY_WORKERS:-2}
threads=$(( $(nproc) / workers )); (( threads >= 1 )) || threads=1
logdir=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$logdir"
}
trap cleanup EXIT

addresses=()
for i in $(seq 1 "$workers"); do
  "$build/server/ferry-worker" --listen 127.0.0.1:0 --threads "$threads" >"$logdir/w$i.out" 2>"$logdir/w$i.err" &
  pids+=($!)
done
for i in $(seq 1 "$workers"); do
  for _ in $(seq 1 100); do
    grep -q '^listening on ' "$logdir/w$i.out" 2>/dev/null && break
    sleep 0.1
  done
  addr=$(sed -n 's/^listening on //p' "$logdir/w$i.out")
  [[ -n "$addr" ]] || { echo "worker $i did not start:"; cat "$logdir/w$i.err"; exit 1; }
  addresses+=("$addr")
done
echo "workers: ${addresses[*]} ($threads decode thread(s) each)"
list=$(IFS=,; echo "${addresses[*]}")
"$build/bench/ferry-bench" consume --workers "$list" --data "$data" --pipeline imagenet-train \
  --batch-size 64 --epochs 5 --progress "$@"
