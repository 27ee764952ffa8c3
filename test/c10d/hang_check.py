"""A hang, run under kolorun: rank 1 skips an allreduce that every other rank enters and
goes on to a barrier (with --ddp: skips a DDP backward pass, whose bucket allreduce the
others then wait for, and the error names the bucket). With
init_process_group(timeout=4 s), kolo's stall shutdown ends both, on every rank, with an
error naming the missing ranks, instead of a silent hang.
Every rank checks its own message and prints "rank R: hang reported"; exits 1 otherwise."""
import datetime
import re
import sys
import time

import torch
import torch.distributed as dist

import kolo.torch.c10d  # noqa: F401

TIMEOUT = 4.0
dist.init_process_group(backend="kolo", timeout=datetime.timedelta(seconds=TIMEOUT))
rank, size = dist.get_rank(), dist.get_world_size()
ddp = "--ddp" in sys.argv
if ddp:
    net = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    for _ in range(2):  # steps together (DDP rebuilds its buckets in the second)
        net(torch.ones(2, 8)).sum().backward()
start = time.monotonic()
try:
    if rank == 1:
        dist.barrier()  # rank 1 "skipped" the collective below
    elif ddp:
        net(torch.ones(2, 8)).sum().backward()
    else:
        dist.all_reduce(torch.ones(4))
except RuntimeError as e:
    took = time.monotonic() - start
    text = str(e)
    print("rank %d: error after %.1f s: %s" % (rank, took, text), flush=True)
    missing = ["1"] if rank != 1 else [str(r) for r in range(size) if r != 1]
    named = all(re.search(r"\b%s\b" % r, text) for r in missing)
    if ddp and rank != 1:
        named = named and "ddp.bucket0.float32x18" in text
    if named and took < 3 * TIMEOUT + 5:
        print("rank %d: hang reported" % rank, flush=True)
        # Stay until the others have their own errors too (a rank that exits shuts kolo
        # down, and the others' pending collectives then fail with that instead).
        time.sleep(TIMEOUT)
        sys.exit(0)
    print("rank %d: the error does not name ranks %s or came too late" % (rank, missing),
          flush=True)
    sys.exit(1)
print("rank %d: no error: the skipped collective did not fail" % rank, flush=True)
sys.exit(1)
