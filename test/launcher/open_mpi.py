"""Which Open MPI the launcher tests run on: KOLO_MPI_HOME's (the *.ompi5 CTest
variants set it to .venv-ompi5) else the first mpirun on PATH, as kolorun chooses.
For the few assertions whose words or process names are Open MPI's own, and the
tests that Open MPI 5 (PRRTE) cannot pass, each skipped with the reason."""
import os
import re
import shutil
import subprocess


def _mpirun():
    home = os.environ.get("KOLO_MPI_HOME", "").strip()
    if home:
        return home if os.path.isfile(home) else os.path.join(home, "bin", "mpirun")
    return shutil.which("mpirun") or "mpirun"


def _major():
    out = subprocess.run([_mpirun(), "--version"], capture_output=True, text=True,
                         timeout=30).stdout
    m = re.search(r"\(Open MPI\) (\d+)", out)
    assert m, "not Open MPI's mpirun: %r" % out
    return int(m.group(1))


OPEN_MPI_5 = _major() >= 5
# The processes that listen: mpirun (ORTE's mpirun is orterun under that name;
# Open MPI 5's mpirun execs PRRTE's prterun) and each host's daemon.
MPIRUN_PROCESS = "prterun" if OPEN_MPI_5 else "mpirun"
DAEMON = "prted" if OPEN_MPI_5 else "orted"
# Open MPI's first words when a host's daemon cannot start, and its banner for a rank's
# non-zero exit.
DAEMON_FAILED = ("A daemon failed to report back after being spawned." if OPEN_MPI_5 else
                 "ORTE was unable to reliably start one or more daemons.")
NONZERO_EXIT = "exited with non-zero status" if OPEN_MPI_5 else "non-zero exit code"
