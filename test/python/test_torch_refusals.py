"""A collective that one rank refuses (a bad input, found in Python or in the core) fails
on every rank, naming the refusing rank and its reason, instead of leaving the others
waiting for it. The last rank refuses; the others call the collective with valid input and
must fail within seconds. A rank that waits longer ends the job with a message (kolorun
then stops every rank) instead of hanging it."""
import os
import sys
import time

import pytest
import torch

import kolo.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
REFUSER = N - 1
LIMIT_S = 60  # no stall shutdown here: a refusal that does not arrive hangs


def wait(handle, what):
    """synchronize(handle), or end this process with a message after LIMIT_S."""
    deadline = time.monotonic() + LIMIT_S
    while not hvd.poll(handle):
        if time.monotonic() > deadline:
            sys.stderr.write("rank %d: %s still waits after %d s: rank %d's refusal did not "
                             "reach it\n" % (R, what, LIMIT_S, REFUSER))
            sys.stderr.flush()
            os._exit(3)
        time.sleep(0.001)
    return hvd.synchronize(handle)


def refused_everywhere(what, bad, good, reason):
    """The refusing rank's `bad()` raises at once; every other rank's `good()` handle fails
    with the refusal, which names rank REFUSER and `reason`."""
    if R == REFUSER:
        with pytest.raises(Exception) as raised:
            bad()
        assert reason in str(raised.value)
        return
    with pytest.raises(hvd.HorovodInternalError) as failed:
        wait(good(), what)
    message = str(failed.value)
    assert "rank %d refused its input: " % REFUSER in message, message
    assert reason in message, message


def test_unsupported_dtype_in_python():
    refused_everywhere(
        "allreduce 'py.dtype'",
        lambda: hvd.allreduce_async(torch.zeros(4, dtype=torch.complex64), name="py.dtype"),
        lambda: hvd.allreduce_async(torch.zeros(4), name="py.dtype"),
        "dtype torch.complex64, which kolo does not support")


def test_non_contiguous_in_python():
    refused_everywhere(
        "allgather 'py.contiguous'",
        lambda: hvd.allgather_async(torch.zeros(4, 4).t(), name="py.contiguous"),
        lambda: hvd.allgather_async(torch.zeros(4, 4), name="py.contiguous"),
        "is not contiguous")


def test_splits_of_the_wrong_dtype_in_python():
    refused_everywhere(
        "alltoall 'py.splits'",
        lambda: hvd.alltoall_async(torch.zeros(N), splits=torch.ones(N), name="py.splits"),
        lambda: hvd.alltoall_async(torch.zeros(N), name="py.splits"),
        "1-D tensor of 32-bit integers")


def test_broadcast_root_outside_the_set_in_python():
    refused_everywhere(
        "broadcast 'py.root'",
        lambda: hvd.broadcast_async(torch.zeros(3), root_rank=N, name="py.root"),
        lambda: hvd.broadcast_async(torch.zeros(3), root_rank=0, name="py.root"),
        "root_rank")


def test_grouped_with_one_bad_member():
    refused_everywhere(
        "grouped_allreduce 'py.group'",
        lambda: hvd.grouped_allreduce_async([torch.zeros(2), torch.zeros(2, dtype=torch.complex64)],
                                            name="py.group"),
        lambda: hvd.grouped_allreduce_async([torch.zeros(2), torch.zeros(2)], name="py.group"),
        "complex64")


def test_in_place_grouped_with_one_bad_member():
    # The core reads the in-place forms' tensors itself (issue 35); its refusal is announced
    # like the Python check's.
    refused_everywhere(
        "grouped_allreduce_ 'py.group_'",
        lambda: hvd.grouped_allreduce_async_([torch.zeros(2), torch.zeros(4, 4).t()],
                                             name="py.group_"),
        lambda: hvd.grouped_allreduce_async_([torch.zeros(2), torch.zeros(4, 4)],
                                             name="py.group_"),
        "grouped_allreduce input 1 is not contiguous")


def test_in_place_non_contiguous():
    refused_everywhere(
        "allreduce_ 'py.contiguous_'",
        lambda: hvd.allreduce_async_(torch.zeros(4, 4).t(), name="py.contiguous_"),
        lambda: hvd.allreduce_async_(torch.zeros(4, 4), name="py.contiguous_"),
        "allreduce input is not contiguous")


def test_reducescatter_op_in_python():
    refused_everywhere(
        "reducescatter 'py.op'",
        lambda: hvd.reducescatter_async(torch.zeros(N), name="py.op", op=hvd.Max),
        lambda: hvd.reducescatter_async(torch.zeros(N), name="py.op"),
        "Reducescatter currently only supports AVERAGE and SUM")


def test_splits_that_do_not_sum_in_the_core():
    refused_everywhere(
        "alltoall 'core.splits'",
        lambda: hvd.alltoall_async(torch.zeros(N), splits=[2] * N, name="core.splits"),
        lambda: hvd.alltoall_async(torch.zeros(N), name="core.splits"),
        "splits sum to")


def test_unnamed_refusal_keeps_the_ranks_in_step():
    # One line for every rank, as in a training script: unnamed calls pair by call site.
    dtype = torch.complex64 if R == REFUSER else torch.float32
    call = lambda: hvd.allreduce_async(torch.zeros(3, dtype=dtype))  # noqa: E731
    refused_everywhere("an unnamed allreduce", call, call, "complex64")
    # The refused call took its number on every rank: the next unnamed ones pair.
    for _ in range(3):
        out = wait(hvd.allreduce_async(torch.ones(2) * (R + 1), op=hvd.Sum), "an unnamed sum")
        assert out.tolist() == [N * (N + 1) / 2] * 2


def test_refusing_rank_may_start_the_name_again():
    if R == REFUSER:
        with pytest.raises(TypeError):
            hvd.allreduce_async(torch.zeros(2, dtype=torch.complex64), name="py.again")
    else:
        with pytest.raises(hvd.HorovodInternalError):
            wait(hvd.allreduce_async(torch.zeros(2), name="py.again"), "'py.again'")
    out = wait(hvd.allreduce_async(torch.ones(2), name="py.again", op=hvd.Sum), "'py.again'")
    assert out.tolist() == [N, N]


def test_every_rank_carries_on():
    out = wait(hvd.allreduce_async(torch.ones(1), name="after.refusals", op=hvd.Sum),
               "'after.refusals'")
    assert out.item() == N
