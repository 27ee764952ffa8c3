"""Which MPI the launcher tests run on: KOLO_MPI_HOME's (the *.ompi5, *.mpich and *.impi
CTest variants set it) else the first mpirun on PATH, as kolorun chooses. For the few
assertions whose words or process names are the MPI's own, the tests that one MPI cannot
pass (each skipped with the reason), and the tests that need kolo's own library on that MPI."""
import os
import re
import shutil
import subprocess

import pytest


def _mpirun():
    home = os.environ.get("KOLO_MPI_HOME", "").strip()
    if home:
        return home if os.path.isfile(home) else os.path.join(home, "bin", "mpirun")
    return shutil.which("mpirun") or "mpirun"


def _version(program):
    try:
        return subprocess.run([program, "--version"], capture_output=True, text=True,
                              timeout=30).stdout
    except OSError:
        return ""


def _family():
    """("openmpi", major), ("mpich", 0) or ("impi", 0), as kolorun reads --version (Intel
    MPI's mpirun is a script that needs its mpiexec.hydra on PATH: asked directly)."""
    out = _version(_mpirun())
    m = re.search(r"\(Open MPI\) (\d+)", out)
    if m:
        return "openmpi", int(m.group(1))
    out += _version(os.path.join(os.path.dirname(_mpirun()), "mpiexec.hydra"))
    if "Intel(R) MPI Library" in out:
        return "impi", 0
    assert "HYDRA build details" in out, "neither Open MPI's nor Hydra's mpirun: %r" % out
    return "mpich", 0


FAMILY, _MAJOR = _family()
HYDRA = FAMILY in ("mpich", "impi")
OPEN_MPI_5 = FAMILY == "openmpi" and _MAJOR >= 5
MPI_NAME = {"openmpi": "Open MPI", "mpich": "MPICH", "impi": "Intel MPI"}[FAMILY]
# The processes that listen: mpirun (ORTE's mpirun is orterun under that name;
# Open MPI 5's mpirun execs PRRTE's prterun) and each host's daemon. Under Hydra,
# MPICH's mpiexec listens for its proxies; Intel MPI's proxy on mpiexec's host
# listens for the others, and no proxy on another host listens.
MPIRUN_PROCESS = {"openmpi": "prterun" if OPEN_MPI_5 else "mpirun", "mpich": "mpiexec.hydra",
                  "impi": "hydra_pmi_proxy"}[FAMILY]
DAEMON = {"openmpi": "prted" if OPEN_MPI_5 else "orted", "mpich": "hydra_pmi_proxy",
          "impi": "hydra_pmi_proxy"}[FAMILY]
# The MPI's first words when a host's daemon (proxy) cannot start, and its banner for a
# rank's non-zero exit (Hydra writes none when the rank exits without MPI).
DAEMON_FAILED = {
    "openmpi": ("A daemon failed to report back after being spawned." if OPEN_MPI_5 else
                "ORTE was unable to reliably start one or more daemons."),
    "mpich": "Launch proxy failed.",
    "impi": "Error: Unable to run bstrap_proxy on 127.0.0.2"}[FAMILY]
NONZERO_EXIT = (None if HYDRA else
                "exited with non-zero status" if OPEN_MPI_5 else "non-zero exit code")


def hosts_words(np, host, slots):
    """What kolorun's -np NP -H HOST:SLOTS becomes on the mpirun command line."""
    return {"openmpi": "--tag-output -np %d -H %s:%d" % (np, host, slots),
            "mpich": "-n %d -hosts %s:%d" % (np, host, slots),
            "impi": "-n %d -hosts %s -ppn %d" % (np, host, slots)}[FAMILY]


def remote_agent_args(agent):
    """kolorun's --mpi-args that start the other hosts' daemons through `agent`."""
    if HYDRA:
        return "-launcher ssh -launcher-exec " + agent
    return "--mca plm_rsh_agent " + agent


def forwarded_names(command_line):
    """The names of the variables that the printed mpirun command line passes to the ranks."""
    if HYDRA:
        m = re.search(r" -genvlist (\S+) ", command_line)
        return set(m.group(1).split(",")) if m else set()
    return set(re.findall(r" -x (\S+)", command_line))


# kolo's library (libkolo, kolo._core) is built for Open MPI's ABI; on MPICH and Intel MPI
# it runs once its build for the MPICH ABI is there: HYDRA_RUNS_KOLO=1 (test/CMakeLists.txt)
# switches the tests that need it on.
KOLO_RUNS_HERE = not HYDRA or os.environ.get("HYDRA_RUNS_KOLO") == "1"
needs_kolo = pytest.mark.skipif(
    not KOLO_RUNS_HERE, reason="needs kolo's library built for the MPICH ABI (HYDRA_RUNS_KOLO=1)")
