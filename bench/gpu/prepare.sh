#!/usr/bin/env bash
# Here, before a device call: what bench/gpu/run.sh needs on the GPU machine, in .gpu/
# (ignored by git; carried by the device tool, 64 MiB at most): the cp312 wheel (the
# machine's python3 is 3.12; client/wheel/build.sh makes it) and a
# corpus of real photographs, the first 75 of each class of the sample set (about 26 MB).
# The wheel is rebuilt (incrementally) so that it is this checkout's.
#   bash bench/gpu/prepare.sh      then the device tool: run "bash bench/gpu/run.sh", carry [".gpu"]
#                                  (and "bash bench/gpu/fleet.sh": the dispatcher at 10,000 workers)
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >>.git/info/exclude
bash client/wheel/build.sh >/dev/null  # incremental: the wheel of this checkout
[[ -d data/sample ]] || bash bench/setup.sh
rm -rf .gpu && mkdir -p .gpu/corpus
cp dist/ferry-*-cp312-cp312-*manylinux*.whl .gpu/
for class in data/sample/*/; do
  name=$(basename "$class")
  mkdir -p ".gpu/corpus/$name"
  ls "$class" | sort | head -n 75 | while read -r f; do cp "$class$f" ".gpu/corpus/$name/"; done
done
echo "prepared .gpu: $(du -sh .gpu | cut -f1) ($(ls .gpu/*.whl | xargs -n1 basename); $(find .gpu/corpus -type f | wc -l) images)"
