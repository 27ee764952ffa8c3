#!/usr/bin/env bash
# Formats every C++ file of the project with the repo's .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | xargs clang-format -i
