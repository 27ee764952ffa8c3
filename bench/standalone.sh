#!/usr/bin/env bash
# The user's view of a gradient step: each strategy in a job of its own
# (bench/torch_bench.py alone), JOBS jobs of each, the strategies alternated
# job by job. Prints each job's median step and, per strategy, the median over
# jobs and the slowest/fastest job ratio (issue 15's bimodality measure);
# with OUT=file.json also writes them as JSON (bench/report.py reads it).
#
#   bench/standalone.sh [JOBS=10] [MODEL=resnet50] [STRATEGIES="kolo raw_per_tensor"]
#   KOLORUN_ARGS="--binding core" bench/standalone.sh   # extra kolorun options
#   BASE_BUILD=../wt-base/build bench/standalone.sh 5 resnet50 "kolo kolo:base raw_per_tensor"
#       # "kolo:base": the same strategy on another build (a change's before), alternated
set -euo pipefail
cd "$(dirname "$0")/.."
# The jobs and their summary: bench/standalone_jobs.py, which the other benchmarks'
# `jobs` share. BUILD, NP, KOLORUN_ARGS, ALONE_ARGS and OUT are read there.
# shellcheck disable=SC2086  # the strategies are words
exec /usr/bin/python3 bench/standalone_jobs.py torch_alone "${1:-10}" "${2:-resnet50}" \
  ${3:-kolo raw_per_tensor}
