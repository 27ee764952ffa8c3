#!/usr/bin/env bash
# The main job: data-parallel PyTorch training on scikit-learn's digits, 2 ranks under
# kolorun, gradients averaged by kolo's DistributedOptimizer. Prints the test accuracy.
# KOLO_NP sets the ranks; MAIN_JOB_VERBOSE=1 has kolorun print the command it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p build/checkpoints
PYTHONPATH="$PWD/build/python" exec build/launcher/kolorun ${MAIN_JOB_VERBOSE:+--verbose} -np "${KOLO_NP:-2}" \
  /usr/bin/python3 examples/pytorch_digits.py --checkpoint build/checkpoints/digits.pt "$@"
