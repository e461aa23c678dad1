#!/usr/bin/env bash
# Ferry's main job on one machine: set up (packages, build, sample dataset), start a
# local cluster with ferry-local (a ferry-dispatcher and two ferry-workers on
# loopback), and stream the sample dataset to a client (ferry-consume) through a named dispatcher job
# (imagenet-train: fused ROI decode, RandomResizedCrop 224, flip, normalize, float32
# NCHW), printing progress and throughput. ferry-local stops the cluster at the end
# (the workers drain).
#   bash bench/run_main.sh [extra ferry-consume flags]
set -euo pipefail
cd "$(dirname "$0")/.."
FERRY_SETUP=main bash bench/setup.sh  # what this job runs, not the tests

build=${FERRY_BUILD_DIR:-build}
data="$PWD/${FERRY_DATA_DIR:-data}/sample"
workers=${FERRY_WORKERS:-2}
threads=$(( $(nproc) / workers )); (( threads >= 1 )) || threads=1
echo "ferry-local: 1 dispatcher, $workers worker(s) with $threads decode thread(s) each"
"$build/server/ferry-local" --workers "$workers" --threads-per-worker "$threads" -- \
  "$build/client/ferry-consume" --dispatcher '{dispatcher}' --job "sample-$$" --data "$data" \
  --pipeline imagenet-train --batch-size 64 --epochs 5 --progress "$@"
