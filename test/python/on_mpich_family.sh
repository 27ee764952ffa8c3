#!/bin/sh
# Runs kolo.torch's suite at np=2 under an MPI of the MPICH family, through its own
# mpiexec (Hydra), on the build of kolo._core for that MPI's ABI (kolo/_mpi_library.py):
#
#   on_mpich_family.sh PREFIX ABI PYTHON TESTS...   (ABI: mpich or mpiabi)
#
# PREFIX is the MPI's installation (scripts/setup.sh makes .venv-mpich with PyPI's MPICH
# and .venv-impi with Intel MPI). Checks that every rank ran on that ABI's library. Exits
# 77, which CTest counts as skipped, where the installation or kolo's build for it is absent.
prefix=$1 abi=$2 python=$3
shift 3
if [ ! -x "$prefix/bin/mpiexec" ]; then
  echo "skipped: no MPI at $prefix (scripts/setup.sh makes it)"
  exit 77
fi
if ! grep -q "\"$abi\"" "$PYTHONPATH/kolo/_builds.py"; then
  echo "skipped: kolo was built without its $abi build (KOLO_MPICH_HOME, cmake/KoloMpiAbis.cmake)"
  exit 77
fi
check='import os, sys
from kolo import _core, _mpi_library
maps = {l.split()[-1] for l in open("/proc/self/maps") if "libmpi" in l}
prefix = os.path.realpath(sys.argv[2])
if _core.MPI_ABI != sys.argv[1] or not any(m.startswith(prefix) for m in maps):
    sys.exit("rank runs on %s %s, not %s of %s" % (_core.MPI_ABI, sorted(maps), *sys.argv[1:]))
print("on", _core.MPI_ABI, sorted(maps), _mpi_library.CHOSEN.why)'
run() {
  # UCX inside PyPI's MPICH reports interfaces that vanish while it scans them (other
  # tests' network namespaces): its log is kept to what is fatal.
  timeout 170 "$prefix/bin/mpiexec" -n 2 -genv KOLO_MPI_HOME "$prefix" -genv KOLO_MPI_ABI "$abi" \
    -genv UCX_LOG_LEVEL fatal -genv PYTHONPATH "$PYTHONPATH" "$python" "$@"
}
run -c "$check" "$abi" "$prefix" || exit 1
run "$@"
