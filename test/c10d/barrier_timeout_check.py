"""A lone barrier that times out does not put the ranks out of step, run under kolorun.

Rank 0 calls barrier() alone, three times: first it ends by kolo's stall shutdown (3 s, from
init_process_group(timeout=3 s)), naming the missing ranks; then by barrier(timeout=1 s),
which leaves it pending in kolo. After each, rank 0 tells the others by a message (no
sleeping), every rank calls barrier(), and unnamed all_reduces must pair and sum on every
rank. The third time the others' barriers come first: they complete the one rank 0 left
pending and tell rank 0 so, and rank 0's next barrier() must be that one, done already
(kolo before this test started a new one, which waited for partners that never came: PyTorch's
test_barrier_timeout_global failed so under load, the other rank ahead in the next test's
set-up). (kolo 2975132 numbered unnamed collectives afresh when a barrier was called, so rank
0's lone barrier left it one epoch ahead for good: allreduce.noname.e2.0 against e1.0.)
Every rank prints "rank R: in step" and exits 0; on an error it exits 1, naming it."""
import datetime
import sys

import torch
import torch.distributed as dist

import kolo.torch.c10d  # noqa: F401

TIMEOUT = datetime.timedelta(seconds=3)
LONG = datetime.timedelta(seconds=30)
dist.init_process_group(backend="kolo", timeout=TIMEOUT)
rank, size = dist.get_rank(), dist.get_world_size()


def fail(what):
    print("rank %d: %s" % (rank, what), flush=True)
    sys.exit(1)


def expect_in_step():
    """Three unnamed all_reduces must pair and sum on every rank."""
    for i in range(3):
        t = torch.full((2,), float(rank + i))
        dist.all_reduce(t)
        want = float(sum(r + i for r in range(size)))
        if t.tolist() != [want, want]:
            fail("all_reduce %d gave %s, expected %s" % (i, t.tolist(), want))


def lone_barrier(timeout, expect, tag):
    if rank == 0:
        try:
            dist.barrier(timeout=timeout)
        except RuntimeError as e:
            if expect not in str(e):
                fail("the lone barrier failed with %r, expected %r" % (str(e), expect))
        else:
            fail("the lone barrier passed")
        for r in range(1, size):
            dist.isend(torch.ones(1), r, tag=tag).wait(LONG)
    else:
        dist.irecv(torch.zeros(1), 0, tag=tag).wait(LONG)
    dist.barrier()
    expect_in_step()


def others_first(tag):
    """Rank 0 leaves a barrier on a timeout; the others' barrier completes it before rank 0
    calls its next one."""
    if rank == 0:
        try:
            dist.barrier(timeout=datetime.timedelta(seconds=1))
        except RuntimeError as e:
            if "Timed out after 1 s waiting for barrier" not in str(e):
                fail("the lone barrier failed with %r" % str(e))
        else:
            fail("the lone barrier passed")
        for r in range(1, size):
            dist.isend(torch.ones(1), r, tag=tag).wait(LONG)
        for r in range(1, size):
            dist.irecv(torch.zeros(1), r, tag=tag + 1).wait(LONG)
    else:
        dist.irecv(torch.zeros(1), 0, tag=tag).wait(LONG)
    try:
        dist.barrier(timeout=LONG)
    except RuntimeError as e:
        fail("the barrier after the others' failed: %s" % str(e).splitlines()[0])
    if rank != 0:
        dist.isend(torch.ones(1), 0, tag=tag + 1).wait(LONG)
    expect_in_step()


missing = ", ".join(str(r) for r in range(1, size))
lone_barrier(None, "was submitted by rank(s) 0 but not by rank(s) %s" % missing, tag=1)
lone_barrier(datetime.timedelta(seconds=1), "Timed out after 1 s waiting for barrier", tag=2)
others_first(tag=3)
print("rank %d: in step" % rank, flush=True)
dist.destroy_process_group()
