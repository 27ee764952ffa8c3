#!/usr/bin/env bash
# scripts/gpu_check.sh's budget, on a fake clock: no step runs, each only moves
# the clock by the seconds GPU_CHECK_FAKE_STEPS gives it (docs/gpu.md). Checks
# which steps start, which are skipped and why, that a step is cut when the
# budget runs out, that a failed build stops the rest, and that a run killed
# mid-way (as the device tool kills a call at its limit) leaves the summary of
# every step before it and the results file. Then how the np=2 steps run on
# the machine the fake run stands in for (GPU_CHECK_FAKE_GPUS, an NCCL_HOME
# with a nccl.h of a chosen version): a GPU each, one GPU shared in NCCL's
# multi-rank mode (>= 2.30), or skipped saying why.
#
#   test/packaging/gpu_check_budget_test.sh <source_dir>
set -uo pipefail
src=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# An NCCL_HOME whose nccl.h says version $2 (and an empty libnccl.so.2).
fake_nccl() {
  mkdir -p "$work/$1/include" "$work/$1/lib"
  printf '#define NCCL_MAJOR %s\n#define NCCL_MINOR %s\n#define NCCL_PATCH %s\n' ${2//./ } >"$work/$1/include/nccl.h"
  : >"$work/$1/lib/libnccl.so.2"
}
fake_nccl nccl-2.28.3 2.28.3
fake_nccl nccl-2.30.7 2.30.7

# check NAME BUDGET "FAKE STEPS" EXPECTED_RC "EXPECTED SUMMARY LINES" [STEPS...]
# The machine: GPUS GPUs (default 2) and NCCL_HOME=NCCL (default: found as usual).
check() {
  local name=$1 budget=$2 fake=$3 want_rc=$4 want=$5 rc got
  shift 5
  rm -rf "$work/out" "$work/clock.env"
  echo 1000 >"$work/clock"
  # In a subshell of its own, whose stderr is dropped: the shell that waits for
  # a run killed on purpose ("kill") would print "Killed".
  (GPU_CHECK_FAKE_CLOCK=$work/clock GPU_CHECK_FAKE_STEPS=$fake GPU_CHECK_FAKE_GPUS=${GPUS:-2} \
    NCCL_HOME=${NCCL:-} "$src/scripts/gpu_check.sh" --kit none --out "$work/out" --budget-s "$budget" \
    "${@:-quick}" >"$work/log" 2>&1) 2>/dev/null
  rc=$?
  got=$(grep -Ev '^(machine|two ranks):' "$work/out/summary.txt")
  if [ "$got" != "$want" ] || [ "$rc" != "$want_rc" ]; then
    echo "FAILED: $name: exit $rc (want $want_rc); summary:"
    echo "$got"
    echo "-- wanted:"
    echo "$want"
    failures=$((failures + 1))
  else
    echo "ok: $name"
  fi
}

check "everything fits" 480 \
  "build=100 gpu=10 torch1=20 speed=30 memcheck=20 racecheck=10 synccheck=10 tworanks=5 torch2=10 hosts2=10 faults=10 resnet=10 wheel=10" \
  0 "nccl: ok in 0 s
build: ok in 100 s
gpu: ok in 10 s
torch1: ok in 20 s
speed: ok in 30 s
memcheck: ok in 20 s
racecheck: ok in 10 s
synccheck: ok in 10 s
tworanks: ok in 5 s
torch2: ok in 10 s
hosts2: ok in 10 s
faults: ok in 10 s
resnet: ok in 10 s
wheel: ok in 10 s"

# 80 s left after the build: a step starts only where its estimate fits, and
# smaller steps after a skipped one still run.
check "a slow build leaves room for the small steps only" 480 \
  "build=400 gpu=10 memcheck=10 racecheck=10 synccheck=10 tworanks=5 torch2=10" \
  0 "nccl: ok in 0 s
build: ok in 400 s, over its 120 s estimate
gpu: ok in 10 s
torch1: skipped (needs ~80 s, 70 s of the budget left)
speed: skipped (needs ~120 s, 70 s of the budget left)
memcheck: ok in 10 s
racecheck: ok in 10 s
synccheck: ok in 10 s
tworanks: ok in 5 s
torch2: ok in 10 s
hosts2: skipped (needs ~40 s, 25 s of the budget left)
faults: skipped (needs ~40 s, 25 s of the budget left)
resnet: skipped (needs ~60 s, 25 s of the budget left)
wheel: skipped (needs ~60 s, 25 s of the budget left)"

check "a step that outruns the budget is cut there" 150 "build=100 gpu=60" \
  1 "build: ok in 100 s
gpu: FAILED (exit 143, out of budget) in 50 s, over its 20 s estimate
torch1: skipped (needs ~80 s, 0 s of the budget left)" build gpu torch1

check "a failed build stops the rest" 480 "build=10:1" \
  1 "build: FAILED (exit 1) in 10 s
gpu: skipped (the build failed)
speed: skipped (the build failed)" build gpu speed

check "a step with nothing to check says skipped" 480 "gpu=5:77 torch1=3:2" \
  1 "gpu: skipped (fake) in 5 s
torch1: FAILED (exit 2) in 3 s" gpu torch1

check "no budget: every step starts" 0 "build=5000 suite=5000" \
  0 "build: ok in 5000 s, over its 120 s estimate
suite: ok in 5000 s, over its 900 s estimate" build suite

# Killed inside speed: what was measured before is there.
check "killed mid-way, the summary so far is kept" 480 "build=30 gpu=5 torch1=5 speed=5:kill" \
  137 "nccl: ok in 0 s
build: ok in 30 s
gpu: ok in 5 s
torch1: ok in 5 s"
for f in speed.json logs.tgz; do
  [ -s "$work/out/$f" ] || { echo "FAILED: killed mid-way: no $f"; failures=$((failures + 1)); }
done

# check_two_ranks NAME GPUS NCCL "WANTED two ranks: LINE" "WANTED SUMMARY" "WANTED ENVIRONMENT"
# The environment: per step run, "step NCCL_MULTI_RANK_GPU_ENABLE NCCL_NVLS_ENABLE
# NCCL_MAX_CTAS LD_PRELOAD" ("-" where unset).
check_two_ranks() {
  local name=$1 want_line=$4 want_env=$6 got
  # One step that needs two ranks on devices NCCL accepts, one that does not.
  GPUS=$2 NCCL=${3:+$work/$3} check "$name" 480 "" 0 "$5" tworanks faults
  got=$(grep '^two ranks:' "$work/out/summary.txt")
  [ "$got" = "$want_line" ] || { echo "FAILED: $name: '$got', not '$want_line'"; failures=$((failures + 1)); }
  got=$(cat "$work/clock.env" 2>/dev/null)
  [ "$got" = "$want_env" ] ||
    { printf 'FAILED: %s: the steps ran with\n%s\n-- not\n%s\n' "$name" "$got" "$want_env"; failures=$((failures + 1)); }
}
lib30=$work/nccl-2.30.7/lib/libnccl.so.2
check_two_ranks "one GPU, NCCL 2.30: its multi-rank mode" 1 nccl-2.30.7 \
  "two ranks: on one GPU, NCCL 2.30.7 ($lib30) in its multi-rank mode" \
  "tworanks: ok in 0 s
faults: ok in 0 s" \
  "tworanks 1 0 2 $lib30
faults 1 0 2 $lib30"
why28="NCCL 2.28.3 cannot put two ranks on one GPU (NCCL_MULTI_RANK_GPU_ENABLE needs NCCL >= 2.30: scripts/gpu_kit.sh --nccl)"
check_two_ranks "one GPU, NCCL 2.28: the np=2 steps skipped, the faults check the refusal" 1 nccl-2.28.3 \
  "two ranks: $why28" \
  "tworanks: skipped ($why28) in 0 s
faults: ok in 0 s" \
  "faults - - - -"
check_two_ranks "a GPU per rank: no multi-rank mode" 2 nccl-2.30.7 "two ranks: a GPU each" \
  "tworanks: ok in 0 s
faults: ok in 0 s" \
  "tworanks - - - -
faults - - - -"
check_two_ranks "no GPU" 0 nccl-2.30.7 "two ranks: no CUDA device answers nvidia-smi" \
  "tworanks: skipped (no CUDA device answers nvidia-smi) in 0 s
faults: ok in 0 s" \
  "faults - - - -"

# NCCL that step nccl built beside the build (here made up beforehand) is taken
# before the machine's: two ranks share the one GPU.
fake_nccl b-nccl 2.30.7
GPUS=1 check "one GPU, NCCL 2.30 built by step nccl" 480 "" 0 "nccl: ok in 0 s
tworanks: ok in 0 s" --build "$work/b" nccl tworanks
got=$(grep '^two ranks:' "$work/out/summary.txt" | sort -u)
want="two ranks: on one GPU, NCCL 2.30.7 ($work/b-nccl/lib/libnccl.so.2) in its multi-rank mode"
[ "$got" = "$want" ] || { echo "FAILED: step nccl's NCCL: '$got', not '$want'"; failures=$((failures + 1)); }

for bad in "--budget-s soon" "warp"; do
  # shellcheck disable=SC2086
  if "$src/scripts/gpu_check.sh" --kit none --out "$work/out" $bad >"$work/log" 2>&1 ||
    ! grep -q "^gpu_check: " "$work/log"; then
    echo "FAILED: '$bad' was not refused with a message"
    failures=$((failures + 1))
  else
    echo "ok: '$bad' refused: $(cat "$work/log")"
  fi
done

if [ $failures -eq 0 ]; then
  echo "gpu_check budget: OK"
else
  echo "gpu_check budget: $failures FAILED"
  exit 1
fi
