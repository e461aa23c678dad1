#!/usr/bin/env bash
# The installed package, tested as a user would use it: `cmake --install` Ferry's
# client ("dev" component) into a fresh prefix, configure the unrelated project in
# tests/install against it with find_package(ferry CONFIG REQUIRED), build it, and read
# one whole epoch of the sample set from a real ferry-worker, every sample exactly
# once.
#   tests/install/run.sh BUILD_DIR DATA_DIR
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(cd "${1:?build dir}" && pwd)
data=$(cd "${2:?sample dataset}" && pwd)
work=$(mktemp -d)
worker_pid=""
cleanup() {
  [[ -n "$worker_pid" ]] && kill "$worker_pid" 2>/dev/null && wait "$worker_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "install: cmake --install $build --component dev --prefix $work/prefix"
cmake --install "$build" --component dev --prefix "$work/prefix" >"$work/install.log"
test -f "$work/prefix/lib/cmake/ferry/ferryConfig.cmake"
test -f "$work/prefix/include/ferry/client.h"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root/tests/install" -B "$work/app" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/configure.log" || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/app" >"$work/build.log" || { cat "$work/build.log"; exit 1; }
echo "install: the out-of-tree project built against the installed package"

"$build/server/ferry-worker" --listen 127.0.0.1:0 --threads 2 >"$work/worker.out" 2>"$work/worker.err" &
worker_pid=$!
for _ in $(seq 1 100); do
  grep -q "listening on" "$work/worker.out" 2>/dev/null && break
  sleep 0.1
done
address=$(sed -n 's/^listening on //p' "$work/worker.out")
[[ -n "$address" ]] || { echo "install: ferry-worker did not start"; cat "$work/worker.err"; exit 1; }
samples=$(find "$data" -type f -name '*.jpg' | wc -l)
"$work/app/read_epoch" --workers "$address" --data "$data" --samples "$samples"
