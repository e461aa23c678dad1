#!/usr/bin/env bash
# Builds the fuzz targets with Clang (libFuzzer + ASan + UBSan) in a build folder of
# their own, and runs frame_fuzzer for a bounded time from a seed corpus of valid
# frames. Exits non-zero if the build fails or the fuzzer finds a crash, a leak, a
# sanitizer report or a failed check; the input that did it is kept (see below).
#
#   tests/fuzz/run.sh [SECONDS]
#     SECONDS                fuzzing time (default: $FERRY_FUZZ_SECONDS, else 30)
#     FERRY_FUZZ_BUILD_DIR   the build folder (default: build-fuzz in the checkout)
#     FERRY_FUZZ_CORPUS      a corpus folder to keep and grow between runs (default:
#                            a temporary one, seeded afresh)
# Crashing inputs are written to $FERRY_FUZZ_BUILD_DIR/artifacts/; reproduce one with
#   $FERRY_FUZZ_BUILD_DIR/tests/fuzz/frame_fuzzer FILE
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
seconds=${1:-${FERRY_FUZZ_SECONDS:-30}}
build=${FERRY_FUZZ_BUILD_DIR:-$root/build-fuzz}  # inside the checkout: one per clone
jobs=${FERRY_FUZZ_BUILD_JOBS:-2}

for tool in clang clang++ cmake; do
  command -v "$tool" >/dev/null || { echo "fuzz: $tool not found" >&2; exit 2; }
done
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

echo "fuzz: configuring $build (clang, FERRY_FUZZ=ON)"
mkdir -p "$build"
CC=clang CXX=clang++ cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFERRY_FUZZ=ON -DFERRY_BUILD_BENCH=OFF -DFERRY_BUILD_TESTS=ON -DFERRY_SANITIZE=OFF -DFERRY_BUILD_PYTHON=OFF >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 2; }
echo "fuzz: building frame_fuzzer"
cmake --build "$build" --target frame_fuzzer -j "$jobs"

fuzzer="$build/tests/fuzz/frame_fuzzer"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$fuzzer" --write-seeds "$work/seeds"
corpus=${FERRY_FUZZ_CORPUS:-$work/corpus}
mkdir -p "$corpus" "$build/artifacts"

echo "fuzz: running frame_fuzzer for ${seconds}s"
set +e
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
  "$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
  -artifact_prefix="$build/artifacts/" "$corpus" "$work/seeds" 2>&1 | tee "$work/log" |
  grep -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::|==[0-9]+==|SUMMARY|frame_fuzzer:|artifact_prefix|Test unit written)' 
rc=${PIPESTATUS[0]}
set -e
if [ "$rc" -ne 0 ]; then
  echo "fuzz: frame_fuzzer FAILED (exit $rc); last lines of its log:" >&2
  tail -n 60 "$work/log" >&2
  exit 1
fi
echo "fuzz: frame_fuzzer ran ${seconds}s without a finding"
