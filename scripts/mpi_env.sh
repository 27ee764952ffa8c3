# Sourced by the scripts: mpirun flags that work on a small machine, as root or not.
# (kolorun will build these itself; see issue #3.)
KOLO_MPIRUN_FLAGS=(--oversubscribe --mca mpi_yield_when_idle 1 --mca btl self,vader,tcp)
if [ "$(id -u)" -eq 0 ]; then
  KOLO_MPIRUN_FLAGS+=(--allow-run-as-root)
fi
