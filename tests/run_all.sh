#!/usr/bin/env bash
# Every test Ferry has, from a fresh Debian 12 machine: set-up (packages, Release
# build, sample dataset), the C++ suites (ctest), the Python suites (pytest with
# /usr/bin/python3), the example training loop, a short libFuzzer run over the frame
# and message parsers (Clang), then the same C++ suites built with ASan+UBSan.
#   bash tests/run_all.sh            # everything
#   FERRY_SKIP_SANITIZE=1 bash tests/run_all.sh   # skip the sanitizer build
set -euo pipefail
cd "$(dirname "$0")/.."
bash bench/setup.sh

build=${FERRY_BUILD_DIR:-build}
jobs=${FERRY_JOBS:-$(nproc)}

echo "== ctest (Release)"
ctest --test-dir "$build" --output-on-failure -j "$jobs"

echo "== pytest"
FERRY_BENCH="$PWD/$build/bench/ferry-bench" FERRY_LOCAL="$PWD/$build/server/ferry-local" \
  FERRY_PYTHON_DIR="$PWD/$build/python" FERRY_SAMPLE_DATA="$PWD/${FERRY_DATA_DIR:-data}/sample" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python

echo "== example training loop (client/examples/train_resnet.py)"
start=$(date +%s)
PYTHONPATH="$PWD/$build/python" timeout 120 /usr/bin/python3 client/examples/train_resnet.py \
  --data "${FERRY_DATA_DIR:-data}/sample" --steps 12 | tee /tmp/ferry-train-example.log | tail -4
grep -q '^verdict: ' /tmp/ferry-train-example.log
echo "example training loop: $(( $(date +%s) - start )) s"

echo "== fuzz (frame and message parsers, ${FERRY_FUZZ_SECONDS:-30} s)"
bash tests/fuzz/run.sh "${FERRY_FUZZ_SECONDS:-30}"

if [[ -z "${FERRY_SKIP_SANITIZE:-}" ]]; then
  echo "== ctest (ASan+UBSan)"
  asan=${build}-asan
  cmake -S . -B "$asan" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFERRY_SANITIZE=ON -DFERRY_BUILD_PYTHON=OFF >/dev/null
  cmake --build "$asan" -j "$jobs"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$asan" --output-on-failure -j "$jobs"
fi
