"""A lone barrier that times out does not put the ranks out of step, run under kolorun.

Rank 0 calls barrier() alone, twice: first it ends by kolo's stall shutdown (3 s, from
init_process_group(timeout=3 s)), naming the missing ranks; then by barrier(timeout=1 s),
which leaves it pending in kolo. After each, rank 0 tells the others by a message (no
sleeping), every rank calls barrier(), and unnamed all_reduces must pair and sum on every
rank. (kolo 2975132 numbered unnamed collectives afresh when a barrier was called, so rank
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
    for i in range(3):
        t = torch.full((2,), float(rank + i))
        dist.all_reduce(t)
        want = float(sum(r + i for r in range(size)))
        if t.tolist() != [want, want]:
            fail("all_reduce %d gave %s, expected %s" % (i, t.tolist(), want))


missing = ", ".join(str(r) for r in range(1, size))
lone_barrier(None, "was submitted by rank(s) 0 but not by rank(s) %s" % missing, tag=1)
lone_barrier(datetime.timedelta(seconds=1), "Timed out after 1 s waiting for barrier", tag=2)
print("rank %d: in step" % rank, flush=True)
dist.destroy_process_group()
