#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/) and runs each for SECONDS
# (default 60), starting from the seed corpus in test/fuzz/corpus/<target>/.
# SECONDS=0 replays the seed corpus once (deterministic; what CI runs).
# New inputs go to build-fuzz/corpus/<target>/; crashes to build-fuzz/crash-*.
#   scripts/fuzz.sh [SECONDS] [TARGET...]     targets: wire host_spec hostfile slurm registration config
set -uo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(wire host_spec hostfile slurm registration config)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_BUILD_FUZZERS=ON -DKOLO_BUILD_TESTS=OFF \
  -DKOLO_BUILD_PYTHON=OFF -DKOLO_BUILD_EXAMPLES=OFF -DKOLO_BUILD_BENCH=OFF \
  -DKOLO_SANITIZE=address,undefined >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target $(printf 'fuzz_%s ' "${targets[@]}")
status=0
for t in "${targets[@]}"; do
  mkdir -p "build-fuzz/corpus/$t"
  if [ "$seconds" = "0" ]; then
    echo "== fuzz_$t: replaying the seed corpus"
    run=(-runs=0 "../test/fuzz/corpus/$t")
  else
    echo "== fuzz_$t for ${seconds} s"
    run=(-max_total_time="$seconds" -print_final_stats=1 "corpus/$t" "../test/fuzz/corpus/$t")
  fi
  if ! (cd build-fuzz && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1 \
        "./test/fuzz/fuzz_$t" -max_len=4096 -rss_limit_mb=2048 "${run[@]}" 2>&1 | tail -12); then
    status=1
  fi
done
exit $status
