#!/usr/bin/env bash
# The main job: data-parallel training on 2 ranks, gradients averaged by kolo.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/mpi_env.sh
exec mpirun -np "${KOLO_NP:-2}" "${KOLO_MPIRUN_FLAGS[@]}" build/examples/average_tensors
