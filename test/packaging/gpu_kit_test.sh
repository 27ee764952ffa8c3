#!/usr/bin/env bash
# The GPU kit, proven as far as a machine without GPU allows: scripts/gpu_kit.sh
# gathers the kit, then scripts/gpu_check.sh builds kolo with CUDA in a clean
# environment that sees only the kit and the CUDA toolkit: a private mount
# namespace whose /usr hides, by overlayfs whiteouts, every file of the
# system's Open MPI, PMIx, hwloc, libevent, Boost, flatbuffers, GoogleTest,
# CLI11, pybind11 and mpi4py packages (and /etc/openmpi), under `env -i`. In
# there: the GPU tests skip cleanly (no device), kolo runs on the kit's
# relocated Open MPI (C++ tests at np=2, kolo.torch under kolorun at np=2), and
# `gpu_check.sh quick`, the lent machine's one call, runs every step, each
# skipping cleanly within its estimate.
#
#   test/packaging/gpu_kit_test.sh <source_dir> <work_dir>
#
# Needs root (unshare, mount) and overlayfs; says SKIPPED otherwise.
set -euo pipefail
src=$(cd "$1" && pwd)
work=$2
mkdir -p "$work"
work=$(cd "$work" && pwd)

if [ "$(id -u)" != 0 ] || ! grep -qw overlay /proc/filesystems; then
  echo "gpu kit test: SKIPPED (needs root and overlayfs to hide the system's libraries)"
  exit 0
fi

"$src/scripts/gpu_kit.sh" "$work/kit"

# Inside: the clean environment. The build folder and the kit live under $work.
inner=$(cat <<'EOF'
set -euo pipefail
cd "$SRC"
for f in /usr/include/boost/asio.hpp /usr/include/mpi.h /usr/bin/mpirun /usr/include/flatbuffers/flatbuffers.h \
         /usr/include/gtest/gtest.h /usr/include/CLI/CLI.hpp /usr/include/pybind11/pybind11.h; do
  [ ! -e "$f" ] || { echo "gpu kit test: $f is still visible"; exit 1; }
done
if python3 -c 'from mpi4py import MPI' 2>/dev/null; then echo "gpu kit test: mpi4py still loads an MPI"; exit 1; fi
scripts/gpu_check.sh --kit "$WORK/kit" --build "$WORK/build" --out "$WORK/out" --budget-s 0 build
source scripts/gpu_kit_env.sh "$WORK/kit" "$GPU_KIT_DIR"
echo "== what was built links the kit's Open MPI"
ldd "$WORK/build/test/kolo_mpi_tests" | grep "$GPU_KIT_ROOT/.*libmpi.so" >/dev/null ||
  { echo "gpu kit test: kolo_mpi_tests does not load the kit's libmpi"; exit 1; }
echo "== the GPU tests skip cleanly"
(cd "$WORK/build" && ctest --output-on-failure -L gpu) | tee "$WORK/gpu_ctest.log"
grep -q "no CUDA device on this machine" "$WORK/build/Testing/Temporary/LastTest.log"
grep -q "100% tests passed" "$WORK/gpu_ctest.log"
echo "== kolo on the kit's Open MPI: C++ collectives and kolo.torch at np=2"
(cd "$WORK/build" && ctest --output-on-failure -R 'mpi.np2.(collectives|errors)$|example.average_tensors.np2')
out=$(PYTHONPATH="$WORK/build/python" "$WORK/build/launcher/kolorun" -np 2 /usr/bin/python3 -c '
import torch, kolo.torch as hvd
hvd.init()
print("sum", hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist(), "cuda_built", hvd.cuda_built())')
echo "$out"
echo "$out" | grep -q "\[1\]<stdout>:sum \[2.0, 2.0\] cuda_built True"
echo "== quick, as on a lent machine: every step starts, skips without a GPU, within its estimate"
scripts/gpu_check.sh --kit "$WORK/kit" --build "$WORK/build" --out "$WORK/quick" quick ||
  { echo "gpu kit test: gpu_check.sh quick failed"; exit 1; }
steps=$(grep -Evc '^(machine|two ranks):' "$WORK/quick/summary.txt")
[ "$steps" = 14 ] || { echo "gpu kit test: quick ran $steps steps, not 14"; exit 1; }
grep -q '^two ranks: no CUDA device answers nvidia-smi$' "$WORK/quick/summary.txt" ||
  { echo "gpu kit test: the summary does not say why two ranks cannot run here"; exit 1; }
if grep -Ev '^(machine|two ranks):' "$WORK/quick/summary.txt" |
  grep -Ev '^(build: ok|[a-z0-9]+: skipped \(no CUDA device [a-z -]+\)) in [0-9]+ s$'; then
  echo "gpu kit test: the steps above did not skip cleanly within their estimates"
  exit 1
fi
echo "gpu kit: OK"
EOF
)
# The packages the kit stands in for are hidden from the build and the tests.
"$src/test/packaging/without_packages.sh" "$work/hide" \
  '^(openmpi|libopenmpi|libpmix|libhwloc|libevent|libboost|flatbuffers|libflatbuffers|libgtest|libgmock|googletest|libcli11|pybind11|python3-pybind11|python3-mpi4py|libfabric|libucx)' \
  env -i HOME="$HOME" PATH=/usr/local/cuda/bin:/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 \
  SRC="$src" WORK="$work" GPU_CHECK_PYTHON=/usr/bin/python3 GPU_KIT_DIR="$work/kit-unpacked" OMPI_ALLOW_RUN_AS_ROOT=1 \
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 bash -c "$inner"
