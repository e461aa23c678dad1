#!/usr/bin/env bash
# Every test Ferry has, from a fresh Debian 12 machine:
#   1. set-up (packages, the Release build of the libraries, programs, benchmarks and
#      Python package, the sample dataset: bench/setup.sh);
#   2. the installed package: `cmake --install`, then an unrelated CMake project that
#      does find_package(ferry) and reads an epoch from a real ferry-worker;
#   3. the Python suites (pytest with /usr/bin/python3, on a process a core with
#      pytest-xdist, then the timing tests alone; the object-storage tests against moto,
#      installed from PyPI into build/s3-venv during the set-up) and the example
#      training loop, all against the Release build;
#   4. the C++ suites (ctest: unit tests, the in-process cluster, real processes) built
#      with ASan+UBSan (Clang);
#   5. a short libFuzzer run over the frame and message parsers, the dispatcher's
#      control plane and its journal files (the targets of the ASan+UBSan build);
#   6. the C++ suites again built with TSan (Clang, with -Wthread-safety as an error:
#      the locking annotations are checked in the same build).
# Each stage prints its seconds. The C++ suites run in the two sanitizer builds, not a
# third time in the Release one: every test runs the same there (but one: the snapshot
# of 2^25 splits is 2^21 under the sanitizers, still past a record's 2^20), with every
# check of the Release run and the sanitizers' besides, and building and running the
# suites a third time was ~380 s of a run that must stay under 45 min on 2 cores
# (bench/HISTORY.md, "2026-11-29, night"). The Release build is what the main job,
# the wheel and the Python tests run. FERRY_SKIP_SANITIZE=1 runs the suites in the
# Release build instead (the quick run while editing). CI builds Ferry three times (the
# fuzz targets inside the ASan+UBSan build), so every build is a unity build (each
# library, program and test suite compiles as a few units of up to 8 files, so the
# Asio, Cap'n Proto, OpenCV and gtest headers they share are compiled once a unit, not
# once a file), and the sanitizer builds are -O1 with line tables only (exact stacks at
# a third of GCC's -O2 -g time; the tests' own code and the tools' mains at -O0:
# tests/CMakeLists.txt, ferry_startup_code in CMakeLists.txt), with those headers
# precompiled once a build (Clang: cmake/Pch.cmake).
#   bash tests/run_all.sh                       # everything
#   FERRY_SKIP_SANITIZE=1 bash tests/run_all.sh # the C++ suites in the Release build,
#                                               # no sanitizer builds
set -euo pipefail
cd "$(dirname "$0")/.."
run_start=$(date +%s)
stage_start=$run_start
stage() {  # the seconds of the stage that ends, then the next stage's title
  local now
  now=$(date +%s)
  echo "   ($(( now - stage_start )) s; $(( now - run_start )) s in all)"
  stage_start=$now
  [[ $# -gt 0 ]] && echo "== $*"
  return 0
}
build=${FERRY_BUILD_DIR:-build}
echo "== set-up (bench/setup.sh: packages, Release build, sample data)"
# The object-storage tests' S3-compatible server (moto, from PyPI, in a virtual
# environment of its own: tests/s3/setup.sh) installs while Ferry compiles.
release_tests=OFF
[[ -n "${FERRY_SKIP_SANITIZE:-}" ]] && release_tests=ON
FERRY_BUILD_TESTS=$release_tests FERRY_SETUP_BESIDE="bash tests/s3/setup.sh $build/s3-venv" bash bench/setup.sh

data="$PWD/${FERRY_DATA_DIR:-data}/sample"
jobs=${FERRY_JOBS:-$(nproc)}

if [[ $release_tests == ON ]]; then
  stage "ctest (Release)"
  ctest --test-dir "$build" --output-on-failure -j "$jobs"
fi

stage "installed package (tests/install: find_package(ferry) in an unrelated project)"
bash tests/install/run.sh "$build" "$data"

stage "pytest"
s3_python=$(bash tests/s3/setup.sh "$build/s3-venv")  # made during the set-up; checked here
# On $jobs processes (pytest-xdist; the tests of one xdist_group on one process), then
# the tests marked serial alone: those whose verdict is a timing (tests/python/conftest.py).
pytest_env=(FERRY_BENCH="$PWD/$build/bench/ferry-bench" FERRY_LOCAL="$PWD/$build/server/ferry-local"
  FERRY_PYTHON_DIR="$PWD/$build/python" FERRY_SAMPLE_DATA="$data" FERRY_S3_PYTHON="$s3_python")
env "${pytest_env[@]}" /usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=12 \
  -n "$jobs" --dist loadgroup -m "not serial" tests/python
env "${pytest_env[@]}" /usr/bin/python3 -m pytest -q -p no:cacheprovider -m serial tests/python

stage "example training loop (client/examples/train_resnet.py)"
start=$(date +%s)
PYTHONPATH="$PWD/$build/python" timeout 120 /usr/bin/python3 client/examples/train_resnet.py \
  --data "$data" --steps 12 | tee /tmp/ferry-train-example.log | tail -4
grep -q '^verdict: ' /tmp/ferry-train-example.log
echo "example training loop: $(( $(date +%s) - start )) s"

fuzz_title="fuzz (frame and message parsers; the dispatcher's control plane; its journal files; ${FERRY_FUZZ_SECONDS:-30} s each)"
if [[ -n "${FERRY_SKIP_SANITIZE:-}" ]]; then
  stage "$fuzz_title"
  FERRY_FUZZ_PROCS="$jobs" bash tests/fuzz/run.sh "${FERRY_FUZZ_SECONDS:-30}"
  stage
  exit 0
fi

# The sanitizer builds need no benchmarks or Python binding: only the suites and the
# programs they run (the ferry_tests target; with FERRY_FUZZ, the fuzz targets too).
sanitized_suites() {
  local dir=$1
  shift
  local flags="-O1 -gline-tables-only -DNDEBUG"
  CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_UNITY_BUILD=ON -DFERRY_BUILD_BENCH=OFF -DFERRY_BUILD_PYTHON=OFF \
    -DFERRY_SAMPLE_DATA="$data" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" -DCMAKE_C_FLAGS_RELWITHDEBINFO="$flags" "$@" >/dev/null
  cmake --build "$dir" -j "$jobs" --target ferry_tests
}

# The ASan+UBSan build also holds the fuzz targets (-DFERRY_FUZZ=ON): the libraries
# they fuzz carry libFuzzer's coverage instrumentation there as well, which the suites
# run through unchanged, and the fuzz stage needs no fourth build of its own.
stage "ctest (ASan+UBSan, Clang; with the fuzz targets)"
asan=${build}-asan
sanitized_suites "$asan" -DFERRY_SANITIZE=ON -DFERRY_FUZZ=ON
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir "$asan" --output-on-failure -j "$jobs"

stage "$fuzz_title"
FERRY_FUZZ_BUILD_DIR="$PWD/$asan" FERRY_FUZZ_CONFIGURED=1 FERRY_FUZZ_PROCS="$jobs" bash tests/fuzz/run.sh "${FERRY_FUZZ_SECONDS:-30}"

stage "ctest (TSan, Clang with -Werror=thread-safety)"
tsan=${build}-tsan
sanitized_suites "$tsan" -DFERRY_TSAN=ON -DFERRY_WERROR=ON
TSAN_OPTIONS="suppressions=$PWD/tests/tsan.supp halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir "$tsan" --output-on-failure -j "$jobs" --timeout 900
stage
