#!/usr/bin/env bash
# Ferry's Python package against a current PyTorch (issue 26): installs
# bench/peers/requirements-torch.txt into the peers' virtual environment (run.sh's), then
# runs the whole Python test suite with that interpreter and torch, and the DDP rank tests
# again under the real torchrun (Debian's torchrun, torch 1.13 on Python 3.11, crashes at
# start; CI's tests launch the ranks with the variables it sets). Prints both versions.
#
#   bash bench/peers/modern_torch.sh [pytest's flags]
#
# Environment: FERRY_PEERS_VENV, FERRY_PEERS_PYTHON, FERRY_BUILD_DIR (as run.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${FERRY_PEERS_VENV:-$HOME/.cache/ferry/peers-venv}
python=${FERRY_PEERS_PYTHON:-python3}
build=${FERRY_BUILD_DIR:-build}
[[ -f "$build/python/ferry/__init__.py" ]] || bash bench/setup.sh
if [[ ! -x "$venv/bin/python" ]]; then
  echo "modern torch: making $venv from $($python --version 2>&1)"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
fi
"$venv/bin/pip" install -q -r bench/peers/requirements-torch.txt
export FERRY_BENCH=$PWD/$build/bench/ferry-bench FERRY_LOCAL=$PWD/$build/server/ferry-local
export FERRY_PYTHON_DIR=$PWD/$build/python FERRY_SAMPLE_DATA=$PWD/data/sample
versions() {
  "$1" -c 'import sys, torch, torchvision, numpy; print("python %s, torch %s, torchvision %s, numpy %s" % (sys.version.split()[0], torch.__version__, torchvision.__version__, numpy.__version__))'
}
echo "== the Python suite, $(versions "$venv/bin/python")"
rc=0
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider tests/python "$@" || rc=1
echo "== the DDP rank tests under torchrun ($venv/bin/python -m torch.distributed.run)"
FERRY_TEST_TORCHRUN=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python/test_ddp.py "$@" || rc=1
echo "== for comparison, CI's interpreter: $(versions /usr/bin/python3)"
exit $rc
