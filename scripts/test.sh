#!/usr/bin/env bash
# Runs the whole test suite: sets up (idempotent), builds, runs every test with
# CTest and Horovod's own test suite (scripts/peer_suites.sh); then the same tests again in an AddressSanitizer + UndefinedBehavior-
# Sanitizer build (build-asan/), the C++ tests under ThreadSanitizer (build-tsan/), and
# a clang build whose -Wthread-safety analysis checks every lock (build-clang/).
# The sanitizer builds leave the GPU path out (KOLO_WITH_CUDA=OFF): they check the
# host-side logic, and the CUDA runtime does not run under ASan without extra options.
# --release (first) also runs the tests labelled "release" (test/CMakeLists.txt): the
# checks that each repeat a whole build or system (the sdist without system packages, the
# wheel on Debian 11, the GPU kit) or another check's ground at another size or version
# (np=3 repeats, the launcher's suite on Open MPI 5), Horovod's TensorFlow suites on the
# second TensorFlow version, and the MPI tests at np=3 and 4 under TSan; run it before a
# release and after changing what they check. CI's run leaves them out.
# Other arguments go to every ctest run.
set -euo pipefail
cd "$(dirname "$0")/.."
release=(-LE release)
if [ "${1:-}" = --release ]; then
  release=()
  shift
fi
scripts/setup.sh

echo "== tests (build/)"
(cd build && ctest --output-on-failure --timeout 300 "${release[@]}" "$@")

echo "== other projects' own test suites against kolo (../shared/peer-suites)"
peer_args=()
[ ${#release[@]} = 0 ] && peer_args=(--release)
scripts/peer_suites.sh "${peer_args[@]}"

echo "== tests under ASan + UBSan (build-asan/)"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKOLO_BUILD_TESTS=ON \
  -DKOLO_SANITIZE=address,undefined -DKOLO_BUILD_PYTHON=OFF -DKOLO_BUILD_BENCH=OFF -DKOLO_WITH_CUDA=OFF >/dev/null
cmake --build build-asan -j "$(nproc)"
# Open MPI's own allocations are reported as leaks at exit; leaks are not checked here.
# The C++ unit and MPI tests, as under TSan; with --release also the launcher's (kolorun
# and kolo-rank under ASan; their parsers are fuzzed below in every run).
asan_labels=(-L "unit|mpi")
[ ${#release[@]} = 0 ] && asan_labels=()
(cd build-asan && ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  ctest --output-on-failure --timeout 300 "${asan_labels[@]}" "$@")

echo "== fuzz targets: replay of the seed corpus (clang, ASan+UBSan; build-fuzz/)"
scripts/fuzz.sh 0

echo "== C++ tests under ThreadSanitizer (build-tsan/)"
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DKOLO_BUILD_TESTS=ON \
  -DKOLO_SANITIZE=thread -DKOLO_BUILD_PYTHON=OFF -DKOLO_BUILD_BENCH=OFF -DKOLO_WITH_CUDA=OFF >/dev/null
cmake --build build-tsan -j "$(nproc)"
# Open MPI is not built with TSan; test/sanitizers/tsan.supp names only its libraries.
# TSan sees the threads of one process, not what processes share: the MPI tests run at
# np=2 here, their np=3 and np=4 repeats (the same threads in each rank; the main and ASan
# builds run them) only with --release; mpi.np4.two_hosts.*, which has no np=2 form, always.
tsan_skip=(-E '^mpi\.np[34]\.[a-z_]*$')
[ ${#release[@]} = 0 ] && tsan_skip=()
(cd build-tsan && TSAN_OPTIONS="suppressions=$PWD/../test/sanitizers/tsan.supp report_signal_unsafe=0" \
  ctest --output-on-failure --timeout 300 -L "unit|mpi" "${tsan_skip[@]}" "$@")

echo "== thread-safety analysis: kolo built with clang -Wthread-safety -Werror (build-clang/)"
# Every field shared between the caller threads and the background thread is
# GUARDED_BY its mutex (base/mutex.h); clang checks each access at compile time.
cmake -S . -B build-clang -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_C_COMPILER=clang -DKOLO_BUILD_TESTS=OFF -DKOLO_BUILD_BENCH=OFF -DKOLO_BUILD_EXAMPLES=OFF \
  -DKOLO_BUILD_PYTHON=ON -DPython3_EXECUTABLE=/usr/bin/python3 -DKOLO_WITH_CUDA=OFF >/dev/null
cmake --build build-clang -j "$(nproc)"
