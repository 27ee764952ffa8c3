"""The fault matrix (docs/reliability.md): one kolo.torch training job per fault, np=3,
the last rank misbehaving at step 3, stall check 2 s and stall shutdown 5 s. For each:
nothing hangs, the other ranks get an error or are ended by kolorun, a line names the
faulty rank, and the time from the fault until that happened is within its bound.
Set FAULT_MATRIX_LOG=<file> to have each test append its figures (JSON lines)."""
import json
import os

import pytest

from fault_runner import run_fault

KOLORUN = os.environ["KOLORUN"]
PYTHON_DIR = os.environ.get("TEST_PYTHON_DIR", "")
pytestmark = pytest.mark.skipif(not os.path.isdir(PYTHON_DIR),
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
