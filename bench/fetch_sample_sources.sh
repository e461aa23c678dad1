#!/usr/bin/env bash
# Collects the real photographs shipped in a few Debian packages into DEST_DIR/sources/,
# the raw material for ferry-make-sample (bench/make_sample_dataset.cc).
#
#   bench/fetch_sample_sources.sh DEST_DIR
#
# Layout under DEST_DIR:
#   debs/            the downloaded .deb files (cache; kept between runs)
#   extract/<pkg>/   each package unpacked with dpkg-deb -x (kept between runs)
#   sources/         <package>__<basename> copies of the selected photographs
#
# Idempotent: packages already in debs/ are not downloaded again, packages already
# extracted are not extracted again, and sources/ is rebuilt from extract/ each run
# (swapped in whole, so it never holds a half-written set).
#
# Selection: JPEG/PNG files of at least 100 KB whose shorter side is at least 300 px,
# outside the HTML documentation, minus a fixed list of synthetic images (logos,
# renders, gradients, drawings, a map screenshot) found by looking at them once.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 DEST_DIR" >&2
  exit 2
fi

readonly PACKAGES=(opencv-doc mate-backgrounds lomiri-wallpapers-16.04 python3-skimage)
readonly MIN_BYTES=100000
readonly MIN_SHORT_SIDE=300
# Basenames (per package) that are not photographs. Matched as "<pkg>/<basename>".
readonly EXCLUDE=(
  opencv-doc/digits.png opencv-doc/ellipses.jpg opencv-doc/pic2.png opencv-doc/pic4.png
  opencv-doc/input.png opencv-doc/stanford.png
  python3-skimage/logo.png
  lomiri-wallpapers-16.04/analogpattern_by_Peter_Nerlich.jpg
  lomiri-wallpapers-16.04/umang_by_Abhishek_Mudgal.jpg
  mate-backgrounds/Arc-Colors-Transparent-Wallpaper.png
  mate-backgrounds/Elephants.jpg mate-backgrounds/Elephants_3840x2160.jpg
  mate-backgrounds/Elephants_5640x3172.jpg
  mate-backgrounds/Flow.png mate-backgrounds/Gulp.png mate-backgrounds/Silk.png
  mate-backgrounds/Waves.png
)
# Whole directories of synthetic wallpapers.
readonly EXCLUDE_DIRS=(/usr/share/backgrounds/mate/desktop/ /usr/share/doc/opencv-doc/opencv4/html/)

dest=$1
mkdir -p "$dest/debs" "$dest/extract"
dest=$(cd "$dest" && pwd)
# apt-get download drops privileges to _apt when it can; a world-writable cache lets it.
chmod 777 "$dest/debs"

have_deb() { compgen -G "$dest/debs/$1_*.deb" >/dev/null; }

missing=()
for pkg in "${PACKAGES[@]}"; do
  have_deb "$pkg" || missing+=("$pkg")
done
if ((${#missing[@]} > 0)); then
  if ! (cd "$dest/debs" && apt-get download "${missing[@]}"); then
    echo "apt-get download failed; running apt-get update and retrying" >&2
    apt-get update
    (cd "$dest/debs" && apt-get download "${missing[@]}")
  fi
fi

for pkg in "${PACKAGES[@]}"; do
  out="$dest/extract/$pkg"
  if [[ ! -e "$out/.extracted" ]]; then
    rm -rf "$out"
    mkdir -p "$out"
    deb=$(compgen -G "$dest/debs/${pkg}_*.deb" | sort | tail -n 1)
    dpkg-deb -x "$deb" "$out"
    touch "$out/.extracted"
  fi
done

# Prints "W H" for a JPEG or PNG, from file(1)'s description; nothing if it has none.
dimensions() {
  file -b "$1" | grep -oE '[0-9]+ ?x ?[0-9]+' | tail -n 1 | tr -d ' ' | tr 'x' ' '
}

is_excluded() {
  local pkg=$1 path=$2 rel=${2#"$dest/extract/$1"} e
  for e in "${EXCLUDE[@]}"; do
    [[ "$pkg/$(basename "$path")" == "$e" ]] && return 0
  done
  for e in "${EXCLUDE_DIRS[@]}"; do
    [[ "$rel" == "$e"* ]] && return 0
  done
  return 1
}

staging="$dest/sources.tmp"
rm -rf "$staging"
mkdir -p "$staging"
for pkg in "${PACKAGES[@]}"; do
  while IFS= read -r -d '' path; do
    is_excluded "$pkg" "$path" && continue
    read -r w h < <(dimensions "$path") || continue
    [[ -n "${w:-}" && -n "${h:-}" ]] || continue
    short=$((w < h ? w : h))
    ((short >= MIN_SHORT_SIDE)) || continue
    name="${pkg}__$(basename "$path")"
    if [[ -e "$staging/$name" ]]; then
      echo "duplicate source name $name (from $path); keeping the first" >&2
      continue
    fi
    cp "$path" "$staging/$name"
  done < <(find "$dest/extract/$pkg" -type f \
             \( -iname '*.jpg' -o -iname '*.jpeg' -o -iname '*.png' \) \
             -size +"${MIN_BYTES}"c -print0 | sort -z)
done

rm -rf "$dest/sources"
mv "$staging" "$dest/sources"
count=$(find "$dest/sources" -maxdepth 1 -type f | wc -l)
echo "collected $count photographs in $dest/sources"
