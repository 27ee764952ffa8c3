#!/usr/bin/env bash
# The user's view of a gradient step: each strategy in a job of its own
# (bench/torch_bench.py alone), JOBS jobs of each, the strategies alternated
# job by job. Prints each job's median step and, per strategy, the median over
# jobs and the slowest/fastest job ratio (issue 15's bimodality measure);
# with OUT=file.json also writes them as JSON (bench/report.py reads it).
#
#   bench/standalone.sh [JOBS=10] [MODEL=resnet50] [STRATEGIES="kolo raw_per_tensor"]
#   KOLORUN_ARGS="--binding core" bench/standalone.sh   # extra kolorun options
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=${1:-10}
model=${2:-resnet50}
strategies=${3:-kolo raw_per_tensor}
build=${BUILD:-build}
export PYTHONPATH=$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
for i in $(seq 1 "$jobs"); do
  for s in $strategies; do
    "$build/launcher/kolorun" -np "${NP:-2}" ${KOLORUN_ARGS:-} /usr/bin/python3 bench/torch_bench.py \
      --out "$dir/$s.$i.json" alone --strategy "$s" --model "$model" ${ALONE_ARGS:-} > /dev/null
  done
done
/usr/bin/python3 - "$dir" "$jobs" "$model" "${OUT:-}" $strategies <<'PY'
import json, statistics, sys
dir, jobs, model, out, strategies = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
result = {"benchmark": "standalone_jobs", "model": model, "jobs": jobs, "strategies": {}}
for s in strategies:
    runs = [json.load(open(f"{dir}/{s}.{i}.json")) for i in range(1, jobs + 1)]
    med = [r["median_ms"] for r in runs]
    result["strategies"][s] = {"job_median_ms": med, "median_ms": statistics.median(med),
                               "slowest_over_fastest": max(med) / min(med)}
    submit = [r["submit_ms"] for r in runs if r.get("submit_ms") is not None]
    if submit:
        result["strategies"][s]["submit_ms"] = statistics.median(submit)
    result["np"], result["steps"] = runs[0]["np"], runs[0]["steps"]
    print(f"{s:15s} per job: " + " ".join(f"{m:.2f}" for m in med))
    print(f"{s:15s} median {statistics.median(med):.2f} ms, slowest/fastest job "
          f"{max(med) / min(med):.2f}")
if out:
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
PY
