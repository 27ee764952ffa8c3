"""The fault matrix (docs/reliability.md): one kolo.torch training job per fault, np=3
(a host cut off from the network: np=4 on two hosts, the second in a network namespace),
the last rank misbehaving at step 3, stall check 2 s and stall shutdown 5 s. For each:
nothing hangs, the other ranks get an error or are ended by kolorun, a line names the
faulty rank, and the time from the fault until that happened is within its bound.
On MPICH and Intel MPI (Hydra) the same faults run in kolo's job, and those that need no
kolo (kill, stop, raise) also in an MPI program without it (mpi_probe.c): the others wait
in MPI_Allreduce, and kolorun, kolo-rank and Hydra alone must end the job and name the rank.
Set FAULT_MATRIX_LOG=<file> to have each test append its figures (JSON lines)."""
import json
import os
import re

import pytest

from fault_runner import run_fault
from netns_host import namespace_host
from which_mpi import HYDRA, needs_kolo

KOLORUN = os.environ["KOLORUN"]
PYTHON_DIR = os.environ.get("TEST_PYTHON_DIR", "")
needs_binding = pytest.mark.skipif(not os.path.isdir(PYTHON_DIR),
                                   reason="the Python binding is not built in this build")

# fault: (seconds within which the job has ended, whether the surviving ranks must each
# print their own error; where kolorun ends the job first, its line names the rank).
BOUNDS = {
    "kill": (10, False),     # kolorun ends the job as soon as the rank dies
    "stop": (12, False),     # kolo-rank ends a rank stopped for the stall shutdown time
    "raise": (10, True),     # its exit shuts kolo down: the others fail at once
    "badinput": (3, True),   # every rank's matching collective fails within a cycle
    "exit": (10, True),      # a clean shutdown and exit: the others fail at once
    "stuck": (12, True),     # the stall shutdown (5 s) names the missing rank
}


def record(result):
    path = os.environ.get("FAULT_MATRIX_LOG")
    if path:
        row = {k: result[k] for k in ("fault", "np", "two_hosts", "returncode", "seconds")}
        row["seen_seconds"] = {str(r): round(t, 3) for r, (t, _) in result["seen"].items()}
        with open(path, "a") as f:
            f.write(json.dumps(row) + "\n")


@needs_binding
@needs_kolo
@pytest.mark.parametrize("fault", sorted(BOUNDS))
def test_fault_ends_the_job_with_a_named_error(fault):
    bound, survivors_report = BOUNDS[fault]
    r = run_fault(KOLORUN, PYTHON_DIR, fault, np=3, step=3, timeout=60)
    record(r)
    out = r["output"][-4000:]
    assert not r["hung"], "the job hung (60 s):\n" + out
    assert r["fault_happened"], out
    assert r["returncode"] != 0, out
    assert r["named"], "no line names rank 2:\n" + out
    assert r["seconds"] < bound, (r["seconds"], out)
    if survivors_report:
        others = {0, 1}  # with badinput, rank 2 catches its own refusal and goes on
        assert others <= set(r["seen"]), (r["seen"], out)
        assert max(t for rank, (t, _) in r["seen"].items() if rank in others) < bound, r["seen"]


# The second host: a network namespace (/run/netns/kolo-HOST, which fake_ssh.sh enters)
# joined to this one by a veth pair; the faulty rank takes its own side of the link down.
CUT_HOST, CUT_LOCAL = "10.231.0.2", "10.231.0.1"


@pytest.fixture
def cut_off_host():
    with namespace_host(CUT_HOST, CUT_LOCAL, "kolo-v"):  # the link: kolo-va, kolo-vb
        yield


@needs_binding
@needs_kolo
def test_a_host_cut_off_ends_the_job_naming_it(cut_off_host):
    # np=4, ranks 2 and 3 on the namespace's host; rank 2 cuts the link at step 3. The
    # ranks on this side find the negotiation unanswered after the stall shutdown time
    # (5 s) and fail; mpirun cannot reach the other host's daemon, so kolorun ends it
    # after its 10 s grace, naming the ranks and the host that never reported back.
    r = run_fault(KOLORUN, PYTHON_DIR, "cut", np=4, rank=2, step=3, timeout=90,
                  hosts="%s:2,%s:2" % (CUT_LOCAL, CUT_HOST),
                  extra_env={"FAULT_CUT_CMD": "ip link set kolo-vb down"})
    record(r)
    out = r["output"][-4000:]
    assert not r["hung"], "the job hung (90 s):\n" + out
    assert r["fault_happened"] and r["returncode"] != 0, out
    assert {0, 1} <= set(r["seen"]), (r["seen"], out)
    assert all("did not answer a negotiation round" in e for t, e in r["seen"].values()), r["seen"]
    if HYDRA:
        # Hydra's mpiexec ends at once when kolorun stops it, without waiting for the
        # host it cannot reach: kolorun's line names the first rank that failed, and
        # the cut-off host is the one whose ranks said nothing (docs/troubleshooting.md).
        assert re.search(r"kolorun: rank [01] on host \S+ exited with code 3", out), out
    else:
        assert "Rank(s) 2, 3 on %s never reported back" % CUT_HOST in out, out
    assert r["seconds"] < 30, (r["seconds"], out)


@pytest.mark.skipif(not HYDRA, reason="Open MPI's runs take every fault in kolo's training job")
@pytest.mark.parametrize("fault", ["kill", "raise", "stop"])
def test_fault_in_an_mpi_program_without_kolo_ends_the_job_naming_the_rank(fault):
    # The other ranks wait in MPI_Allreduce: Hydra ends the job when the rank dies (kill,
    # raise), kolo-rank ends a rank stopped for the stall shutdown time (stop).
    bound, _ = BOUNDS[fault]
    r = run_fault(KOLORUN, PYTHON_DIR, fault, np=3, step=3, timeout=60,
                  program=os.environ["MPI_PROBE"])
    record(r)
    out = r["output"][-4000:]
    assert not r["hung"], "the job hung (60 s):\n" + out
    assert r["fault_happened"], out
    assert r["returncode"] == (1 if fault == "raise" else 137), out
    assert r["named"] and r["named"][-1].startswith("kolorun: rank 2 on host "), out
    assert r["seconds"] < bound, (r["seconds"], out)
