#!/usr/bin/env bash
# Ferry beside the loaders a team would pick instead (issue 26), in one run: makes the
# peers' virtual environment (pinned versions from PyPI, bench/peers/requirements.txt;
# never a dependency of Ferry), then runs every peer on the same photographs, recipe and
# cores (bench/peers/peers.py), printing one table per scenario.
#
#   bash bench/peers/run.sh [peers.py's flags, e.g. --seconds 10]
# (then bench/peers/service.py: tf.data service against ferry-dispatcher and workers).
# A current PyTorch from PyPI in the same environment, with the Python suite and the DDP
# tests under torchrun: bash bench/peers/modern_torch.sh (about 5 GB of wheels).
#
# Environment: FERRY_PEERS_VENV (default ~/.cache/ferry/peers-venv), FERRY_PEERS_PYTHON
# (the interpreter the environment is made from: a CPython 3.11 with venv; default
# python3), FERRY_BUILD_DIR (default build: Ferry's Release build, bench/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=${FERRY_PEERS_VENV:-$HOME/.cache/ferry/peers-venv}
python=${FERRY_PEERS_PYTHON:-python3}
build=${FERRY_BUILD_DIR:-build}
[[ -x "$build/python/ferry/__init__.py" || -f "$build/python/ferry/__init__.py" ]] || bash bench/setup.sh
# SPDL's wheel brings no FFmpeg: it loads the system's (Debian 12: FFmpeg 5.1).
ffmpeg=(libavdevice59 libavfilter8 libavformat59 libavcodec59 libswscale6 libswresample4)
missing=()
for p in "${ffmpeg[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p"); done
if ((${#missing[@]})); then
  sudo=""
  [[ $(id -u) -eq 0 ]] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
if [[ ! -x "$venv/bin/python" ]]; then
  echo "peers: making $venv from $($python --version 2>&1)"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
fi
"$venv/bin/pip" install -q -r bench/peers/requirements.txt
/usr/bin/python3 bench/peers/peers.py --venv "$venv" --build "$build" "$@"
# Service mode and what a worker's death costs: tf.data service against Ferry.
/usr/bin/python3 bench/peers/service.py --venv "$venv" --build "$build"
