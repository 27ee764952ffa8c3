#!/usr/bin/env bash
# The main job: data-parallel training on 2 ranks under kolorun, gradients averaged by kolo.
set -euo pipefail
cd "$(dirname "$0")/.."
exec build/launcher/kolorun -np "${KOLO_NP:-2}" build/examples/average_tensors
