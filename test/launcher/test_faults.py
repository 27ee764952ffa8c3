"""Fault tests with real training processes under kolorun (issue #7); each bounded in time."""
import os
import re
import subprocess
import time

import pytest

from processes import no_process_matches
from which_mpi import needs_kolo

KOLORUN = os.environ["KOLORUN"]
PYTHON_DIR = os.environ.get("TEST_PYTHON_DIR", "")
pytestmark = [pytest.mark.skipif(not os.path.isdir(PYTHON_DIR),
                                 reason="the Python binding is not built in this build"),
              needs_kolo]


def run(np, body, tmp_path, env=None, timeout=60):
    path = tmp_path / "job.py"
    path.write_text(body)
    full = dict(os.environ, PYTHONPATH=PYTHON_DIR, **(env or {}))
    start = time.monotonic()
    try:
        r = subprocess.run([KOLORUN, "-np", str(np), "/usr/bin/python3", str(path)],
                           capture_output=True, text=True, timeout=timeout, env=full)
    except subprocess.TimeoutExpired as e:
        pytest.fail("the job hung: still running after %d s; its output so far:\n%s\n%s"
                    % (timeout, e.stdout or "", e.stderr or ""))
    return r, time.monotonic() - start


KILL_IN_ALLREDUCE = """
import os, signal, threading, torch
import kolo.torch as hvd
hvd.init()
x = torch.ones(16 * 1024 * 1024)  # 64 MiB per allreduce
if hvd.rank() == 1:
    threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
for step in range(100000):
    hvd.allreduce_(x, name="big", op=hvd.Sum)
    x.fill_(1.0)
"""


@pytest.mark.parametrize("np", [2, 4])
def test_sigkill_during_a_large_allreduce_ends_the_job_naming_the_rank(np, tmp_path):
    r, elapsed = run(np, KILL_IN_ALLREDUCE, tmp_path)
    assert r.returncode != 0
    assert re.search(r"kolorun: rank 1 on host \S+ was killed by signal 9 \(SIGKILL\)", r.stderr), \
        r.stderr[-2000:]
    assert elapsed < 12, elapsed  # 1 s until the kill, then < 10 s to end the job
    assert no_process_matches(str(tmp_path / "job.py"))


SKIPPED_TENSOR = """
import torch
import kolo.torch as hvd
hvd.init()
if hvd.rank() != 1:
    hvd.allreduce(torch.ones(4), name="skipped.by.rank1")  # rank 1 never submits it
hvd.allreduce(torch.ones(4), name="after")
"""


def test_skipped_tensor_warns_then_fails_with_the_missing_rank_named(tmp_path):
    r, elapsed = run(3, SKIPPED_TENSOR, tmp_path,
                     env={"KOLO_STALL_CHECK_TIME_SECONDS": "1",
                          "KOLO_STALL_SHUTDOWN_TIME_SECONDS": "2"})
    assert r.returncode != 0
    assert re.search(r"Stall: allreduce tensor 'skipped.by.rank1' was submitted by rank\(s\) 0, 2 "
                     r"but not by rank\(s\) 1", r.stderr), r.stderr[-3000:]
    assert "KoloInternalError: Stalled for" in r.stderr
    assert "not by rank(s) 1" in r.stderr
    assert elapsed < 20, elapsed


MISMATCH_THEN_CARRY_ON = """
import torch
import kolo.torch as hvd
hvd.init()
try:
    hvd.allreduce(torch.ones(hvd.rank() + 1), name="bad")
except hvd.KoloInternalError as e:
    print("caught:", e, flush=True)
print("after:", hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist(), flush=True)
"""


def test_mismatch_is_caught_on_every_rank_and_training_goes_on(tmp_path):
    r, _ = run(4, MISMATCH_THEN_CARRY_ON, tmp_path)
    assert r.returncode == 0, r.stderr
    for rank in range(4):
        assert "[%d]<stdout>:caught: Mismatched allreduce tensor shapes for tensor 'bad'" % rank \
            in r.stdout
        assert "[%d]<stdout>:after: [4.0, 4.0]" % rank in r.stdout


PROCESS_SET_MISMATCH = """
import torch
import kolo.torch as hvd
hvd.init()
# Horovod refuses a second set with every rank in it; ranks 0 and 1 form one.
pair = hvd.add_process_set([0, 1])
try:
    hvd.allreduce(torch.ones(2), name="two.sets",
                  process_set=pair if hvd.rank() == 1 else hvd.global_process_set)
except hvd.KoloInternalError as e:
    print("caught:", e, flush=True)
if pair.included():
    print("after:", hvd.allreduce(torch.ones(2), op=hvd.Sum, process_set=pair).tolist(),
          flush=True)
hvd.barrier()  # rank 2's exit would shut the others down
"""


def test_tensor_on_different_process_sets_is_an_error_on_every_rank(tmp_path):
    r, elapsed = run(3, PROCESS_SET_MISMATCH, tmp_path,
                     env={"KOLO_STALL_CHECK_TIME_SECONDS": "1"})
    assert r.returncode == 0, r.stderr
    for rank in range(3):
        assert "[%d]<stdout>:caught: Mismatched process sets for allreduce tensor 'two.sets'" % rank \
            in r.stdout, r.stdout
    for rank in range(2):
        assert "[%d]<stdout>:after: [2.0, 2.0]" % rank in r.stdout
    assert elapsed < 20, elapsed


INIT_AFTER_SHUTDOWN = """
import torch
import kolo.torch as hvd
hvd.init()
hvd.allreduce(torch.ones(1))
hvd.shutdown()
try:
    hvd.allreduce(torch.ones(1))
except hvd.KoloInternalError as e:
    print("after shutdown:", e, flush=True)
try:
    hvd.init()
except hvd.KoloInternalError as e:
    print("init again:", e, flush=True)
"""


def test_use_after_shutdown_and_init_again_fail_clearly(tmp_path):
    r, _ = run(2, INIT_AFTER_SHUTDOWN, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:after shutdown: kolo is not running" in r.stdout
    assert "[0]<stdout>:init again: MPI was already finalized in this process" in r.stdout


PEER_SHUTDOWN = """
import torch
import kolo.torch as hvd
hvd.init()
hvd.allreduce(torch.ones(1), name="last")
if hvd.rank() == 1:
    hvd.shutdown()
else:
    # Rank 1 never submits this one: it fails once rank 1's shutdown has reached this
    # rank's background thread, so what follows runs after it, whatever the timing.
    try:
        hvd.allreduce(torch.ones(1), name="never.answered")
        print("pending: completed", flush=True)
    except hvd.KoloInternalError as e:
        print("pending:", e, flush=True)
    print("queries still answer:", hvd.rank(), hvd.size(), flush=True)
    try:
        hvd.allreduce(torch.ones(1), name="after")
    except hvd.KoloInternalError as e:
        print("allreduce:", e, flush=True)
"""


def test_after_another_rank_shuts_down_queries_answer_and_collectives_say_why(tmp_path):
    r, _ = run(2, PEER_SHUTDOWN, tmp_path)
    assert r.returncode == 0, r.stderr
    assert re.search(r"\[0\]<stdout>:pending: kolo (was shut down by rank 1 |is not running)",
                     r.stdout), r.stdout
    assert "[0]<stdout>:queries still answer: 0 2" in r.stdout
    assert re.search(r"\[0\]<stdout>:allreduce: kolo is not running.*shut down by rank 1 ", r.stdout), \
        r.stdout


# The end of a test suite (Horovod's, run by pytest on every rank): rank 0 has
# run every test and shuts kolo down at exit, while rank 1, one test behind,
# still waits in a collective and then starts its next test with init().
INIT_AFTER_PEER_SHUTDOWN = """
import time, torch
import kolo.torch as hvd
hvd.init()
if hvd.rank() == 0:
    hvd.shutdown()
else:
    try:
        hvd.allreduce(torch.ones(1), name="never.answered")
    except hvd.KoloInternalError as e:
        print("waiting:", e, flush=True)
    start = time.monotonic()
    try:
        hvd.init()
    except hvd.KoloInternalError as e:
        print("init: %s (%.1f s)" % (e, time.monotonic() - start), flush=True)
    print("initialized:", hvd.is_initialized(), flush=True)
"""


def test_init_after_another_rank_shut_down_fails_at_once_and_the_job_ends(tmp_path):
    r, elapsed = run(2, INIT_AFTER_PEER_SHUTDOWN, tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"\[1\]<stdout>:waiting: kolo (was shut down by rank 0 |is not "
                     r"running)", r.stdout), r.stdout
    m = re.search(r"\[1\]<stdout>:init: kolo cannot start again on this rank: it stopped without "
                  r"shutdown\(\) being called here \(kolo was shut down by rank 0 .*"
                  r"start the job again\. \((\d+\.\d) s\)", r.stdout)
    assert m, r.stdout
    assert float(m.group(1)) < 1.0, r.stdout
    assert "[1]<stdout>:initialized: False" in r.stdout, r.stdout
    assert elapsed < 30, elapsed


BAD_SETTING = """
import kolo.torch as hvd
hvd.init()
"""


def test_a_bad_setting_fails_init_naming_variable_and_value(tmp_path):
    r, _ = run(2, BAD_SETTING, tmp_path, env={"KOLO_CYCLE_TIME": "fast"})
    assert r.returncode != 0
    assert "KOLO_CYCLE_TIME='fast' is not a number" in r.stderr


def test_use_before_init_is_a_clear_error(tmp_path):
    body = ("import torch, kolo.torch as hvd\n"
            "try:\n    hvd.allreduce(torch.ones(1))\n"
            "except hvd.KoloInternalError as e:\n    print('before init:', e, flush=True)\n")
    r, _ = run(1, body, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:before init: kolo is not initialized; call kolo.init() first" in r.stdout


ONE_RANK_RAISES_BETWEEN_UNNAMED = """
import torch
import kolo.torch as hvd
hvd.init()
r, n = hvd.rank(), hvd.size()

def report(tag, fn, want):
    try:
        got = fn()
        print(tag, "correct" if torch.equal(got, want) else "WRONG %s" % got.tolist(), flush=True)
    except hvd.HorovodInternalError as e:
        print(tag, "error:", str(e).split(":")[0], "|", "out of step" in str(e), flush=True)

try:
    if r == 0:
        raise AssertionError("a failed assertion on rank 0 only")
    got = hvd.allgather(torch.tensor([1, 2], dtype=torch.int64))   # rank 0 never gets here
    print("skipped op:", got.tolist(), flush=True)
except AssertionError:
    pass
# The same unnamed collectives, in the same order, on every rank. The first has
# the signature of the one rank 0 skipped: as in Horovod, it pairs with it by
# number. The next disagrees with what rank 0 calls: the others are out of step.
met = torch.tensor([7, 7] + [1, 2] * (n - 1))
report("allgather", lambda: hvd.allgather(torch.tensor([7, 7], dtype=torch.int64)),
       met if r == 0 else torch.tensor([7, 7] * n))
report("allreduce", lambda: hvd.allreduce(torch.ones(3), op=hvd.Sum),
       torch.full((3,), float(n)))
report("named", lambda: hvd.allreduce(torch.ones(3), op=hvd.Sum, name="named"),
       torch.full((3,), float(n)))
hvd.barrier()
report("after barrier", lambda: hvd.allgather(torch.tensor([r])), torch.arange(n))
print("finished", flush=True)
"""


@pytest.mark.parametrize("np", [2, 3])
def test_one_rank_raising_between_unnamed_collectives_pairs_by_number_and_never_hangs(np, tmp_path):
    # Default stall settings: nothing here may wait for the stall shutdown.
    r, elapsed = run(np, ONE_RANK_RAISES_BETWEEN_UNNAMED, tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WRONG" not in r.stdout, r.stdout
    met = [7, 7] + [1, 2] * (np - 1)
    for rank in range(np):
        lines = [l.split(":", 1)[1] for l in r.stdout.splitlines()
                 if l.startswith("[%d]<stdout>:" % rank)]
        if rank == 0:
            # Rank 0's first unnamed collective met the others' skipped one.
            assert "allgather correct" in lines, lines
        else:
            assert "skipped op: %s" % met in lines, lines
            # Their next one, where rank 0 calls an allreduce from another
            # place: behind (rank 0 left that place), cancelled on them alone.
            line = next(l for l in lines if l.startswith("allgather "))
            assert line.startswith("allgather error:") and line.endswith("| True"), lines
        # Then the ranks are in step: the next unnamed collective, the named one
        # and everything after the barrier are correct.
        assert "allreduce correct" in lines, lines
        assert "named correct" in lines, lines
        assert "after barrier correct" in lines, lines
        assert "finished" in lines, lines
    assert elapsed < 30, elapsed


RANK_DEPENDENT_BRANCHES = """
import torch
import kolo.torch as hvd
hvd.init()
r, n = hvd.rank(), hvd.size()
# The root builds the value, the others a placeholder: one unnamed broadcast on
# each side of the branch, as Horovod scripts do.
if r == 0:
    x = hvd.broadcast(torch.arange(4.0), root_rank=0)
else:
    x = hvd.broadcast(torch.zeros(4), root_rank=0)
print("broadcast", x.tolist(), flush=True)
# A helper called from different places in rank order.
def total(t):
    return hvd.allreduce(t, op=hvd.Sum)
if r % 2 == 0:
    a = total(torch.ones(2))
    b = total(torch.full((3,), 2.0))
else:
    a = total(torch.ones(2))
    b = total(torch.full((3,), 2.0))
print("sums", a.tolist(), b.tolist(), flush=True)
# Disagreeing from different places: an error on every rank; the ranks cancelled
# as out of step are told where each side called it.
try:
    if r == 0:
        hvd.allreduce(torch.ones(2))
    else:
        hvd.allreduce(torch.ones(5))
except hvd.HorovodInternalError as e:
    print("mismatch: places named", str(e).count("job.py:"), flush=True)
hvd.barrier()
print("after barrier", hvd.allgather(torch.tensor([r])).tolist(), flush=True)
"""


@pytest.mark.parametrize("np", [2, 3])
def test_rank_dependent_branches_pair_unnamed_collectives_as_horovod(np, tmp_path):
    r, elapsed = run(np, RANK_DEPENDENT_BRANCHES, tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    for rank in range(np):
        lines = [l.split(":", 1)[1] for l in r.stdout.splitlines()
                 if l.startswith("[%d]<stdout>:" % rank)]
        assert "broadcast [0.0, 1.0, 2.0, 3.0]" in lines, lines
        assert "sums %s %s" % ([float(np)] * 2, [2.0 * np] * 3) in lines, lines
        assert any(l.startswith("mismatch: places named") for l in lines), lines
        assert "after barrier %s" % list(range(np)) in lines, lines
    # The ranks cancelled as out of step are told where each side called it.
    assert "mismatch: places named 2" in r.stdout, r.stdout
    assert elapsed < 30, elapsed


SIGINT_WHILE_WAITING = """
import os, signal, threading, time, torch
import kolo.torch as hvd
hvd.init()
if hvd.rank() == 1:
    # Submits "waited.on" only once rank 0 has been interrupted: it waits for rank 0's
    # go-ahead, which rank 0 broadcasts after its interruptions.
    assert hvd.broadcast_object(None, root_rank=0, name="go") == "go"
else:
    h = hvd.allreduce_async(torch.ones(2), name="waited.on")
    sent = []
    def interrupt():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGINT)
    threading.Timer(1.0, interrupt).start()
    try:
        hvd.synchronize(h)
        print("not interrupted", flush=True)
    except KeyboardInterrupt:
        print("KeyboardInterrupt after %.3f s" % (time.monotonic() - sent[0]), flush=True)
    # An alarm-based timeout fires too, and the handle stays waitable.
    def on_alarm(signum, frame):
        raise TimeoutError("test timeout")
    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(1)
    try:
        hvd.synchronize(h)
    except TimeoutError as e:
        print("alarm:", e, flush=True)
    hvd.broadcast_object("go", root_rank=0, name="go")
if hvd.rank() == 1:
    hvd.allreduce(torch.ones(2), name="waited.on")
else:
    print("after:", hvd.synchronize(h).tolist(), flush=True)
"""


def test_sigint_interrupts_synchronize_within_a_second(tmp_path):
    r, _ = run(2, SIGINT_WHILE_WAITING, tmp_path, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"\[0\]<stdout>:KeyboardInterrupt after ([0-9.]+) s", r.stdout)
    assert m, r.stdout + r.stderr
    assert float(m.group(1)) < 1.0, m.group(0)
    assert "[0]<stdout>:alarm: test timeout" in r.stdout, r.stdout
    assert "[0]<stdout>:after: [1.0, 1.0]" in r.stdout, r.stdout
