#!/usr/bin/env bash
# Install everything the test suite needs on a fresh Debian 12 machine (as root).
set -euo pipefail
cd "$(dirname "$0")/.."
missing=()
command -v gcc >/dev/null || missing+=(gcc libc6-dev)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q && apt-get install -y -q "${missing[@]}"
fi
python -m pip install -q -e '.[test]'
