#!/usr/bin/env bash
# The user's view of a gradient step: kolo and raw per-tensor MPI each in a job
# of its own (bench/torch_bench.py alone), JOBS jobs of each, alternated.
# Prints each job's median step and, per strategy, the median over jobs and
# the slowest/fastest job ratio (issue 15's bimodality measure).
#
#   bench/standalone.sh [JOBS=10] [MODEL=resnet50]
#   KOLORUN_ARGS="--binding core" bench/standalone.sh   # extra kolorun options
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-10}
model=${2:-resnet50}
build=${BUILD:-build}
export PYTHONPATH=$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}
out=$(mktemp -d)
for i in $(seq 1 "$jobs"); do
  for s in kolo raw_per_tensor; do
    "$build/launcher/kolorun" -np "${NP:-2}" ${KOLORUN_ARGS:-} /usr/bin/python3 bench/torch_bench.py \
      --out "$out/$s.$i.json" alone --strategy "$s" --model "$model" > /dev/null
  done
done
/usr/bin/python3 - "$out" "$jobs" <<'PY'
import json, statistics, sys
out, jobs = sys.argv[1], int(sys.argv[2])
for s in ("kolo", "raw_per_tensor"):
    med = [json.load(open(f"{out}/{s}.{i}.json"))["median_ms"] for i in range(1, jobs + 1)]
    print(f"{s:15s} per job: " + " ".join(f"{m:.1f}" for m in med))
    print(f"{s:15s} median {statistics.median(med):.1f} ms, slowest/fastest job "
          f"{max(med) / min(med):.2f}")
PY
rm -rf "$out"
