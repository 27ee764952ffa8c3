#!/bin/sh
# Runs a launcher test suite on Hydra (MPICH, or Intel MPI: PyPI's mpich and impi-rt,
# which scripts/setup.sh installs into .venv-mpich and .venv-impi): kolorun takes
# KOLO_MPI_HOME's mpirun. MPI_PROBE is mpi_probe.c, an MPI program without kolo, built
# here with MPICH's mpicc (Intel MPI's libmpi.so.12 runs it too) into MPI_PROBE_DIR;
# until kolo's library is built for the MPICH ABI (HYDRA_RUNS_KOLO=1), it also stands in
# for PRINT_RANKS.
# Exits 77, which CTest counts as skipped, where a venv is absent.
set -e
if [ ! -x "$KOLO_MPI_HOME/bin/mpirun" ]; then
  echo "skipped: no MPI at KOLO_MPI_HOME=$KOLO_MPI_HOME (scripts/setup.sh makes .venv-mpich and .venv-impi)"
  exit 77
fi
if [ ! -x "$MPICH_HOME/bin/mpicc" ]; then
  echo "skipped: no MPICH compiler at MPICH_HOME=$MPICH_HOME (scripts/setup.sh makes .venv-mpich)"
  exit 77
fi
mkdir -p "$MPI_PROBE_DIR"
export MPI_PROBE="$MPI_PROBE_DIR/mpi_probe"
"$MPICH_HOME/bin/mpicc" -O1 -Wall -Werror -o "$MPI_PROBE" "$(dirname "$0")/mpi_probe.c"
[ "$HYDRA_RUNS_KOLO" = 1 ] || export PRINT_RANKS="$MPI_PROBE"
exec "$@"
