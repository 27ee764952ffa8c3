#!/bin/sh
# The README's main job (scripts/main_job.sh: PyTorch digits, 2 ranks under kolorun) on an
# MPI of the MPICH family, as a user runs it there: KOLO_MPI_HOME names the installation,
# and kolorun starts the ranks with its Hydra mpiexec.
#
#   main_job_on_hydra.sh PREFIX CHECKPOINT
#
# Passes when kolorun ran PREFIX's mpiexec and the job reached the main job's goal, test
# accuracy >= 0.95. Exits 77, which CTest counts as skipped, where PREFIX has no mpiexec
# (scripts/setup.sh makes .venv-mpich and .venv-impi).
prefix=$1 checkpoint=$2
if [ ! -x "$prefix/bin/mpiexec" ]; then
  echo "skipped: no MPI at $prefix (scripts/setup.sh makes it)"
  exit 77
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# The job's own timeout is the test's; --verbose prints the command kolorun ran.
KOLO_MPI_HOME=$prefix MAIN_JOB_VERBOSE=1 "$root/scripts/main_job.sh" --checkpoint "$checkpoint" \
  >"$log" 2>&1
rc=$?
cat "$log"
[ $rc -eq 0 ] || { echo "main_job_on_hydra.sh: the job exited with $rc"; exit 1; }
grep -q " $prefix/bin/mpiexec[.a-z]* " "$log" ||
  { echo "main_job_on_hydra.sh: kolorun did not run $prefix's mpiexec"; exit 1; }
grep -qE "test accuracy: (0\.9[5-9]|1\.0)" "$log" ||
  { echo "main_job_on_hydra.sh: test accuracy below the main job's 0.95"; exit 1; }
echo "main_job_on_hydra.sh: the main job on $prefix reached its accuracy"
