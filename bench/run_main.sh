#!/usr/bin/env bash
# Ferry's main job on one machine: set up (packages, build, sample dataset), then
# stream the sample dataset through the in-process loader (imagenet-train: fused ROI
# decode, RandomResizedCrop 224, flip, normalize, float32 NCHW) on all cores, with a
# progress bar, and print the throughput.
#   bash bench/run_main.sh [extra ferry-bench pipeline flags]
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/setup.sh
exec "${FERRY_BUILD_DIR:-build}/bench/ferry-bench" pipeline --data "${FERRY_DATA_DIR:-data}/sample" \
  --pipeline imagenet-train --batch-size 64 --seconds 20 --progress "$@"
