#!/usr/bin/env bash
# Runs the whole test suite: sets up (idempotent), builds, runs every test with CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure --timeout 300 -j 1 "$@"
