#!/usr/bin/env bash
# scripts/gpu_check.sh's budget, on a fake clock: no step runs, each only moves
# the clock by the seconds GPU_CHECK_FAKE_STEPS gives it (docs/gpu.md). Checks
# which steps start, which are skipped and why, that a step is cut when the
# budget runs out, that a failed build stops the rest, and that a run killed
# mid-way (as the device tool kills a call at its limit) leaves the summary of
# every step before it and the results file.
#
#   test/packaging/gpu_check_budget_test.sh <source_dir>
set -uo pipefail
src=$(cd "$1" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0

# check NAME BUDGET "FAKE STEPS" EXPECTED_RC "EXPECTED SUMMARY LINES" [STEPS...]
check() {
  local name=$1 budget=$2 fake=$3 want_rc=$4 want=$5 rc got
  shift 5
  rm -rf "$work/out"
  echo 1000 >"$work/clock"
  # In a subshell of its own, whose stderr is dropped: the shell that waits for
  # a run killed on purpose ("kill") would print "Killed".
  (GPU_CHECK_FAKE_CLOCK=$work/clock GPU_CHECK_FAKE_STEPS=$fake \
    "$src/scripts/gpu_check.sh" --kit none --out "$work/out" --budget-s "$budget" "${@:-quick}" \
    >"$work/log" 2>&1) 2>/dev/null
  rc=$?
  got=$(grep -v '^machine:' "$work/out/summary.txt")
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
  "build=100 gpu=10 torch1=20 speed=30 memcheck=20 racecheck=10 synccheck=10 tworanks=5 torch2=10 faults=10 resnet=10" \
  0 "build: ok in 100 s
gpu: ok in 10 s
torch1: ok in 20 s
speed: ok in 30 s
memcheck: ok in 20 s
racecheck: ok in 10 s
synccheck: ok in 10 s
tworanks: ok in 5 s
torch2: ok in 10 s
faults: ok in 10 s
resnet: ok in 10 s"

# 80 s left after the build: a step starts only where its estimate fits, and
# smaller steps after a skipped one still run.
check "a slow build leaves room for the small steps only" 480 \
  "build=400 gpu=10 torch1=20 racecheck=10 synccheck=10 tworanks=5" \
  0 "build: ok in 400 s, over its 120 s estimate
gpu: ok in 10 s
torch1: ok in 20 s
speed: skipped (needs ~60 s, 50 s of the budget left)
memcheck: skipped (needs ~60 s, 50 s of the budget left)
racecheck: ok in 10 s
synccheck: ok in 10 s
tworanks: ok in 5 s
torch2: skipped (needs ~30 s, 25 s of the budget left)
faults: skipped (needs ~40 s, 25 s of the budget left)
resnet: skipped (needs ~40 s, 25 s of the budget left)"

check "a step that outruns the budget is cut there" 150 "build=100 gpu=60" \
  1 "build: ok in 100 s
gpu: FAILED (exit 143, out of budget) in 50 s, over its 20 s estimate
torch1: skipped (needs ~40 s, 0 s of the budget left)" build gpu torch1

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
  137 "build: ok in 30 s
gpu: ok in 5 s
torch1: ok in 5 s"
for f in speed.json logs.tgz; do
  [ -s "$work/out/$f" ] || { echo "FAILED: killed mid-way: no $f"; failures=$((failures + 1)); }
done

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
