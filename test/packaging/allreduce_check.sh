# Sourced by the wheel tests (wheel_test.sh, wheel_pythons_test.sh).
#
# allreduce_check VENV [VAR=VALUE...]: a 2-rank kolo.numpy allreduce under VENV's own
# kolorun (VENV/bin first on PATH, then /usr/bin and /bin), with VAR=VALUE in its
# environment. Prints the job's output, in which each rank says
#   sum [2.0, 2.0] python <version> from <kolo's __init__.py> mpi [<libmpi files mapped>]
# and returns kolorun's exit status (124: it ran past 120 s).
allreduce_check() {
  local venv=$1
  shift
  env PATH="$venv/bin:/usr/bin:/bin" "$@" timeout 120 kolorun -np 2 python -c '
import sys, numpy as np, kolo.numpy as hvd
hvd.init()
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libmpi" in l})
print("sum", hvd.allreduce(np.ones(2), op=hvd.Sum).tolist(), "python", sys.version.split()[0],
      "from", hvd.__file__, "mpi", maps)' 2>&1
}
