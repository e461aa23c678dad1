#!/usr/bin/env bash
# The tests' S3-compatible server: moto (server mode) from PyPI in a virtual environment
# of its own (Ferry itself builds from Debian's packages alone; this is only what its
# object-storage tests talk to). Prints the environment's Python.
#   bash tests/s3/setup.sh [DIR]     # default build/s3-venv
set -euo pipefail
dir=${1:-build/s3-venv}
if [[ ! -x "$dir/bin/python" ]] || ! "$dir/bin/python" -c "import moto.server, boto3" 2>/dev/null; then
  /usr/bin/python3 -m venv "$dir" >&2
  "$dir/bin/pip" install -q --disable-pip-version-check "moto[server]==5.2.5" >&2
fi
echo "$(cd "$dir" && pwd)/bin/python"
