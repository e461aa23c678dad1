#!/usr/bin/env bash
# Everything a fresh Debian 12 machine needs to build and run Ferry, idempotently:
#   1. installs the missing Debian packages (apt-get, as root);
#   2. configures and builds Ferry (Release) in build/;
#   3. builds the sample dataset (real photographs from Debian packages, re-encoded
#      as ImageNet-like JPEGs) in data/sample.
# Used by bench/run_main.sh and tests/run_all.sh; safe to run again.
#
# Environment: FERRY_BUILD_DIR (default build), FERRY_DATA_DIR (default data),
#              FERRY_JOBS (default nproc),
#              FERRY_BUILD_TESTS (default ON): OFF builds no test suites in build/
#                (tests/run_all.sh: its C++ suites run in the sanitizer builds),
#              FERRY_SETUP=main: only what the main job runs (bench/run_main.sh): the
#                build's packages and the three programs it starts, so that its first
#                batch does not wait for the tests' packages (torch, clang) and builds.
#              FERRY_SETUP_BESIDE: a command to run once every package is in, while
#                Ferry compiles (tests/run_all.sh: the object-storage tests' virtual
#                environment, from PyPI); its failure is only reported.
set -euo pipefail
cd "$(dirname "$0")/.."

readonly BUILD_PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libboost-dev capnproto libcapnp-dev
  libopencv-core-dev libopencv-imgproc-dev libopencv-imgcodecs-dev
  libturbojpeg0-dev libjpeg62-turbo-dev libpng-dev libtiff-dev libwebp-dev libcurl4-openssl-dev libexpat1-dev libtbb-dev
  libgtest-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev libssl-dev openssl
  libsentencepiece-dev libjemalloc-dev
  python3-dev python3-pybind11 python3-numpy
)
# The tests' and benchmarks' own: Clang (fuzz and sanitizer builds), torch and
# torchvision to compare with, Prometheus, network namespaces, the Python sentencepiece
# package (the ids the workers' tokenizer must match), cloudpickle (user code shipped
# to workers). And an optimized BLAS for Debian's torch: without one (apt's
# --no-install-recommends) it runs on the reference BLAS, and the detection tests'
# training step (a 12544x1024 layer) took 35 s, 3 s with OpenBLAS (its OpenMP build, so
# that torch's thread count holds for it too).
readonly TEST_PACKAGES=(
  clang libclang-rt-14-dev prometheus iproute2
  python3-torch python3-torchvision libopenblas0-openmp python3-pytest python3-yaml python3-sentencepiece
  python3-cloudpickle python3-pytest-xdist
  python3-pip python3-venv python3-setuptools python3-wheel
)
main_only() { [[ "${FERRY_SETUP:-}" == main ]]; }
tests_too() { ! main_only && [[ "${FERRY_SETUP:-}" != packages ]]; }

install_packages() {  # PACKAGE...
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    local sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

build() {
  local dir=${FERRY_BUILD_DIR:-build}
  # Unity build: each library, program and test suite compiles as a few units of up to
  # 8 files, about half the compile time of one unit a file (the tests: a third).
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON \
    -DFERRY_BUILD_TESTS="${FERRY_BUILD_TESTS:-ON}" \
    -DPython3_EXECUTABLE=/usr/bin/python3 -DFERRY_SAMPLE_DATA="$PWD/${FERRY_DATA_DIR:-data}/sample" >/dev/null
  local targets=()
  main_only && targets=(--target ferry-local ferry-consume ferry-make-sample)
  cmake --build "$dir" -j "${FERRY_JOBS:-$(nproc)}" "${targets[@]}"
}

sample_data() {
  local data=${FERRY_DATA_DIR:-data}
  bash bench/fetch_sample_sources.sh "$data/src" >/dev/null
  "${FERRY_BUILD_DIR:-build}/bench/ferry-make-sample" --sources "$data/src/sources" --out "$data/sample" \
    --count 3000 --classes 8 --seed 0
}

install_packages "${BUILD_PACKAGES[@]}"
# FERRY_SETUP=packages: the build's packages only (client/wheel/build.sh builds itself).
[[ "${FERRY_SETUP:-}" == packages ]] && exit 0
# The tests' packages (torch, Clang, ...: most of the download) come in while Ferry
# compiles, which needs none of them; the sample data waits for them (apt-get download).
beside=""
if tests_too; then
  beside_log=$(mktemp)
  (
    install_packages "${TEST_PACKAGES[@]}"
    if [[ -n "${FERRY_SETUP_BESIDE:-}" ]]; then
      bash -c "$FERRY_SETUP_BESIDE" >/dev/null || echo "setup: FERRY_SETUP_BESIDE failed: $FERRY_SETUP_BESIDE"
    fi
  ) >"$beside_log" 2>&1 &
  beside=$!
fi
build
if [[ -n "$beside" ]]; then
  if ! wait "$beside"; then
    cat "$beside_log" >&2
    echo "setup: installing the tests' packages failed" >&2
    exit 1
  fi
  cat "$beside_log"
  rm -f "$beside_log"
fi
sample_data
