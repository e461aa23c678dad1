#!/usr/bin/env bash
# Builds the fuzz targets with Clang (libFuzzer + ASan + UBSan) in a build folder of
# their own, and runs each for a bounded time from a seed corpus:
#   frame_fuzzer       the frame header and every message decoder (lib/wire)
#   dispatcher_fuzzer  request programs against a real Dispatcher and its journal
#   journal_fuzzer     any bytes as the journal's files (format 1 and 2, snapshots)
# Exits non-zero if the build fails or a fuzzer finds a crash, a leak, a sanitizer
# report or a failed check; the input that did it is kept (see below).
#
#   tests/fuzz/run.sh [SECONDS] [TARGET...]
#     SECONDS                fuzzing time per target (default: $FERRY_FUZZ_SECONDS, else 30)
#     TARGET                 which (default: all three)
#     FERRY_FUZZ_BUILD_DIR   the build folder (default: build-fuzz in the checkout)
#     FERRY_FUZZ_CONFIGURED  1: the build folder is configured already, with -DFERRY_FUZZ=ON,
#                            and is used as it is (tests/run_all.sh: its ASan+UBSan build,
#                            whose libraries then carry the coverage instrumentation too);
#                            the FERRY_FUZZ_SANITIZERS and FERRY_FUZZ_OPT below do not apply
#     FERRY_FUZZ_CORPUS      a folder to keep and grow corpora in between runs, one
#                            subfolder per target (default: a temporary one, seeded afresh)
#     FERRY_FUZZ_RUNS        stop each target after this many executions instead (with
#                            SECONDS as the time limit still)
#     FERRY_FUZZ_SANITIZERS  the targets' -fsanitize list (default: address,undefined);
#                            "undefined" runs several times faster, for long runs
#     FERRY_FUZZ_OPT         optimization (default: -O1)
#     FERRY_FUZZ_MAX_LEN     the longest input (default 4096; a dispatcher program takes
#                            about 10 bytes a step)
#     FERRY_FUZZ_PROCS       fuzzer processes at once (default 1): the targets run side by
#                            side, and the dispatcher's kept corpus is split in as many
#                            shards, one process each (tests/run_all.sh: one per core)
#     FERRY_FUZZ_FLAGS       more libFuzzer flags, e.g. "-jobs=2 -workers=2" (each job
#                            runs FERRY_FUZZ_RUNS and logs to fuzz-N.log in the current
#                            folder) or "-entropic=0"
# The long runs that BENCHMARKS.md counts take the cheapest build that still checks:
#   FERRY_FUZZ_BUILD_DIR=build-fuzz-fast FERRY_FUZZ_SANITIZERS=undefined \
#   FERRY_FUZZ_OPT="-O2 -fno-sanitize-coverage=trace-cmp" FERRY_FUZZ_CORPUS=/tmp/fz \
#   FERRY_FUZZ_RUNS=5000000 FERRY_FUZZ_FLAGS="-jobs=2 -workers=2 -entropic=0" \
#     tests/fuzz/run.sh 36000 dispatcher_fuzzer
# (UBSan alone: ASan's allocator was most of a program's time. No comparison tracing:
# a dispatcher program's choices are small ranges, and the tracing was a quarter of
# its time. No entropic schedule: with the dispatcher corpus's 38,000 features its
# bookkeeping took 60 % of the time, nine times the executions per second without.)
# Inputs that found bugs are kept in tests/fuzz/regressions/TARGET/ and run each time;
# so is tests/fuzz/corpus/TARGET/, the corpus of the long runs, minimized with
#   $FERRY_FUZZ_BUILD_DIR/tests/fuzz/TARGET -merge=1 tests/fuzz/corpus/TARGET GROWN_CORPUS
# Crashing inputs are written to $FERRY_FUZZ_BUILD_DIR/artifacts/; reproduce one with
#   $FERRY_FUZZ_BUILD_DIR/tests/fuzz/TARGET FILE
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

if [ "${FERRY_FUZZ_CONFIGURED:-}" = 1 ]; then
  grep -q '^FERRY_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null ||
    { echo "fuzz: FERRY_FUZZ_CONFIGURED=1, but $build is not configured with -DFERRY_FUZZ=ON" >&2; exit 2; }
  echo "fuzz: using $build as configured"
else
  echo "fuzz: configuring $build (clang, FERRY_FUZZ=ON)"
  mkdir -p "$build"
  # -O1 with line tables: libFuzzer's usual flags, and a third of -O2 -g's build time.
  CC=clang CXX=clang++ cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_UNITY_BUILD=ON \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="${FERRY_FUZZ_OPT:--O1} -gline-tables-only -DNDEBUG" \
    -DCMAKE_C_FLAGS_RELWITHDEBINFO="${FERRY_FUZZ_OPT:--O1} -gline-tables-only -DNDEBUG" \
    -DFERRY_FUZZ_SANITIZERS="${FERRY_FUZZ_SANITIZERS:-address,undefined}" -DFERRY_FUZZ=ON -DFERRY_BUILD_BENCH=OFF -DFERRY_BUILD_TESTS=ON -DFERRY_SANITIZE=OFF -DFERRY_BUILD_PYTHON=OFF >"$build/configure.log" 2>&1 ||
    { cat "$build/configure.log" >&2; exit 2; }
fi
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(frame_fuzzer dispatcher_fuzzer journal_fuzzer)
echo "fuzz: building ${targets[*]}"
cmake --build "$build" --target "${targets[@]}" -j "$jobs"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$build/artifacts"
runs=()
[ -n "${FERRY_FUZZ_RUNS:-}" ] && runs=(-runs="$FERRY_FUZZ_RUNS")
read -r -a extra <<<"${FERRY_FUZZ_FLAGS:-}"

# A unit is one fuzzer process: a target, or with FERRY_FUZZ_PROCS > 1 one shard of
# the dispatcher's kept corpus (its ~3,000 programs replay at ~55 a second under ASan,
# about the time limit before any fuzzing starts: the stage's longest part).
# Up to FERRY_FUZZ_PROCS units run at once, the longest first; each prints its lines
# prefixed with its name.
procs=${FERRY_FUZZ_PROCS:-1}
units=()
for target in "${targets[@]}"; do
  "$build/tests/fuzz/$target" --write-seeds "$work/$target-seeds"
  shards=1
  [ "$target" = dispatcher_fuzzer ] && [ -d "$root/tests/fuzz/corpus/$target" ] && shards=$procs
  for ((k = 0; k < shards; ++k)); do
    units+=("$target $k $shards")
  done
done
# The dispatcher's shards first: they are the long ones.
mapfile -t units < <(printf '%s\n' "${units[@]}" | awk '$1 == "dispatcher_fuzzer"'
                     printf '%s\n' "${units[@]}" | awk '$1 != "dispatcher_fuzzer"')

unit_name() {  # TARGET SHARD SHARDS
  if [ "$3" -gt 1 ]; then echo "$1[$(($2 + 1))/$3]"; else echo "$1"; fi
}

run_unit() {  # TARGET SHARD SHARDS; writes $work/TARGET.SHARD.rc
  local target=$1 k=$2 n=$3
  local fuzzer="$build/tests/fuzz/$target" name
  name=$(unit_name "$@")
  local corpus=${FERRY_FUZZ_CORPUS:+$FERRY_FUZZ_CORPUS/$target}
  corpus=${corpus:-$work/$target-corpus-$k}
  mkdir -p "$corpus"
  # Inputs that once found a bug run first, every time (libFuzzer adds new inputs to
  # the first folder only).
  local inputs=("$work/$target-seeds")
  [ -d "$root/tests/fuzz/regressions/$target" ] && inputs+=("$root/tests/fuzz/regressions/$target")
  # The corpus kept in the tree (minimized from the long runs BENCHMARKS.md counts):
  # read, never written, so each run starts where those runs ended; a shard takes
  # every n-th file of it.
  local kept="$root/tests/fuzz/corpus/$target"
  if [ -d "$kept" ] && [ "$n" -gt 1 ]; then
    local shard="$work/$target-shard-$k" i=0 f
    mkdir -p "$shard"
    for f in "$kept"/*; do
      [ $((i++ % n)) -eq "$k" ] && cp "$f" "$shard/"
    done
    inputs+=("$shard")
  elif [ -d "$kept" ]; then
    inputs+=("$kept")
  fi
  # The dispatcher's corpus holds ~55,000 features: libFuzzer's default (entropic)
  # schedule spent 64% of the replay updating their frequencies (perf), 17 programs a
  # second under ASan against ~55 without it. FERRY_FUZZ_FLAGS="-entropic=1" restores it.
  local schedule=()
  [ "$target" = dispatcher_fuzzer ] && schedule=(-entropic=0)
  echo "fuzz: running $name for ${seconds}s"
  set +e
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$fuzzer" -max_total_time="$seconds" "${runs[@]}" "${schedule[@]}" "${extra[@]}" -max_len="${FERRY_FUZZ_MAX_LEN:-4096}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$build/artifacts/$target-" "$corpus" "${inputs[@]}" 2>&1 | tee "$work/$target.$k.log" |
    grep --line-buffered -E '^(#[0-9]+[[:space:]]+(INITED|DONE)|stat::|==[0-9]+==|SUMMARY|[a-z_]*fuzzer:|artifact_prefix|Test unit written)' |
    sed -u "s|^|$name: |"
  echo "${PIPESTATUS[0]}" >"$work/$target.$k.rc"
  set -e
}

for unit in "${units[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$procs" ]; do wait -n || true; done
  # shellcheck disable=SC2086
  run_unit $unit &
done
wait

failed=0
for unit in "${units[@]}"; do
  read -r target k n <<<"$unit"
  rc=$(cat "$work/$target.$k.rc" 2>/dev/null || echo "no exit status")
  name=$(unit_name "$target" "$k" "$n")
  if [ "$rc" != 0 ]; then
    echo "fuzz: $name FAILED (exit $rc); last lines of its log:" >&2
    tail -n 60 "$work/$target.$k.log" >&2
    failed=1
  else
    echo "fuzz: $name ran ${seconds}s without a finding"
  fi
done
exit "$failed"
