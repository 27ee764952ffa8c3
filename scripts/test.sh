#!/usr/bin/env bash
# Runs the whole test suite: sets up (idempotent), builds, runs every test with
# CTest; then the same tests again in an AddressSanitizer + UndefinedBehavior-
# Sanitizer build (build-asan/). Extra arguments go to both ctest runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

echo "== tests (build/)"
(cd build && ctest --output-on-failure --timeout 300 "$@")

echo "== tests under ASan + UBSan (build-asan/)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKOLO_BUILD_TESTS=ON \
  -DKOLO_SANITIZE=address,undefined -DKOLO_BUILD_PYTHON=OFF >/dev/null
cmake --build build-asan -j "$(nproc)"
# Open MPI's own allocations are reported as leaks at exit; leaks are not checked here.
(cd build-asan && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --output-on-failure --timeout 300 "$@")
