#!/usr/bin/env bash
# The wheel as a trainer's machine gets it: a fresh virtual environment of a Python that
# is not Debian's (pyenv's 3.12 by default), torch and torchvision from PyPI
# (bench/peers/requirements-torch.txt: PyPI's Linux wheels, CUDA's libraries included;
# no GPU is needed), then `pip install` of the wheel, and the Python suite's core tests
# against the installed package and the daemons it carries (no build folder: the
# daemons are the wheel's ferry/bin, on PATH through its console scripts).
#   bash client/wheel/test_wheel.sh [DIST]     (default: dist/, from client/wheel/build.sh)
#   FERRY_WHEEL_TEST_PYTHON   the interpreter (default: pyenv's newest 3.12)
#   FERRY_SAMPLE_DATA         the sample ImageFolder (default: data/sample; bench/setup.sh makes it)
set -euo pipefail
cd "$(dirname "$0")/../.."
dist=$(realpath -m "${1:-dist}")
python=${FERRY_WHEEL_TEST_PYTHON:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python3 2>/dev/null | sort -V | tail -n 1)}
[[ -x "$python" ]] || { echo "test_wheel: no Python to test with (set FERRY_WHEEL_TEST_PYTHON)" >&2; exit 2; }
tag=$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
wheel=$(ls "$dist"/ferry-*-"$tag"-"$tag"-*manylinux*.whl 2>/dev/null | head -n 1)
[[ -n "$wheel" ]] || { echo "test_wheel: no $tag manylinux wheel in $dist (bash client/wheel/build.sh)" >&2; exit 2; }
data=$(realpath -m "${FERRY_SAMPLE_DATA:-data/sample}")
[[ -d "$data" ]] || { echo "test_wheel: no sample data at $data (bash bench/setup.sh makes it)" >&2; exit 2; }

venv=$(mktemp -d)/venv
trap 'rm -rf "$(dirname "$venv")"' EXIT
echo "== a fresh virtual environment: $("$python" --version) ($python)"
"$python" -m venv "$venv"
"$venv/bin/pip" install -q --upgrade pip
echo "== torch from PyPI, then $(basename "$wheel") ($(( $(stat -c %s "$wheel") / 1024 / 1024 )) MB)"
"$venv/bin/pip" install -q -r bench/peers/requirements-torch.txt
"$venv/bin/pip" install -q "$wheel"
cd "$(dirname "$venv")"  # nothing of the source tree on the path
site=$("$venv/bin/python" -c 'import os, ferry; print(os.path.dirname(os.path.dirname(ferry.__file__)))')
"$venv/bin/python" -c 'import sys, torch, ferry; print("python %s, torch %s, ferry from %s" % (sys.version.split()[0], torch.__version__, ferry.__file__))'
for d in ferry-worker ferry-dispatcher ferry-local ferry-ctl ferry-dispatcher-load; do
  echo "$d on PATH: $(PATH=$venv/bin command -v $d) -> $(PATH=$venv/bin $d --version 2>&1 | head -n 1)"
done
# ferry-launch (SageMaker) comes along, and finds the wheel's daemons beside it: a data
# group's host whose resource config names no such group is refused, naming the groups.
PATH=$venv/bin ferry-launch --help | grep -q -- "--data-group" || { echo "test_wheel: ferry-launch --help failed" >&2; exit 1; }
# The sizing tool finds the wheel's dispatcher beside it and serves a small simulated fleet.
PATH=$venv/bin ferry-dispatcher-load --workers 100 --seconds 1 | tail -n 1 | grep -q " errors=0$" ||
  { echo "test_wheel: ferry-dispatcher-load failed" >&2; exit 1; }
# The libraries the wheel carries are the ones it loads: with the system's copies of the
# ones the manylinux policy would have left to the system (libGLX and the X11 libraries
# it needs) hidden in a private mount namespace (an empty file bound over each), the
# extension still imports and the worker still starts.
if [[ $(id -u) -eq 0 ]] && command -v unshare >/dev/null; then
  hide=""
  for lib in libGLX.so.0 libGLdispatch.so.0 libX11.so.6 libxcb.so.1 libXau.so.6 libXdmcp.so.6; do
    real=$(readlink -f "/usr/lib/x86_64-linux-gnu/$lib" 2>/dev/null || true)
    [[ -f "$real" ]] && hide+="mount --bind /dev/null $real; "
  done
  unshare -m sh -c "$hide $venv/bin/python -c 'import ferry._ferry; print(\"without the system'\"'\"'s libGLX and X11: ferry._ferry imports\")' &&
    $venv/bin/ferry-worker --version"
fi
echo "== the core Python tests, with the wheel's package and daemons"
cd - >/dev/null
PATH=$venv/bin:$PATH FERRY_PYTHON_DIR=$site FERRY_LOCAL=$site/ferry/bin/ferry-local FERRY_SAMPLE_DATA=$data \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python/test_binding.py tests/python/test_dataloader.py \
  tests/python/test_daemon_cli.py tests/python/test_user_code.py tests/python/test_wire.py tests/python/test_ranks.py \
  tests/python/test_recipes.py
