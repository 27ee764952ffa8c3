"""Point-to-point on backend "kolo" (send, recv, isend, irecv, recv from any source, tags,
batch_isend_irecv), monitored_barrier, all_gather_coalesced and destroying a subgroup.
Ranks are ordered by messages and barriers, never by sleeping; every wait is bounded (a
timeout, or the 60 s limit of conftest.py)."""
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

SHORT = timedelta(seconds=1)  # for the tests where a message or a rank never comes
DTYPES = [torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool, torch.complex64, torch.uint16]


def filled(rank, dtype, n=5):
    return (torch.arange(n) + 3 * rank).to(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_ring(rank, size, dtype):
    """isend to the next rank, blocking recv from the previous one: any dtype (messages are
    the tensor's bytes), the values intact."""
    got = torch.zeros(5, dtype=dtype)
    work = dist.isend(filled(rank, dtype), (rank + 1) % size)
    dist.recv(got, (rank - 1) % size)
    work.wait()
    assert work.is_completed()
    assert torch.equal(got, filled((rank - 1) % size, dtype)), got


def test_recv_from_any_source(rank, size):
    """Rank 0 receives one message from every other rank without naming it; recv returns
    the sender (recv) or tells it (irecv's _source_rank)."""
    if rank == 0:
        senders = []
        for i in range(size - 1):
            got = torch.zeros(3)
            if i % 2 == 0:
                src = dist.recv(got)
            else:
                work = dist.irecv(got)
                work.wait()
                src = work._source_rank()
            assert got.tolist() == [float(src)] * 3, (src, got)
            senders.append(src)
        assert sorted(senders) == list(range(1, size))
    else:
        dist.send(torch.full((3,), float(rank)), 0)
    dist.barrier()


def test_tags_pick_the_message(rank, size):
    """Rank 1 sends tag 3 then tag 7; rank 0 asks for tag 7 first and gets the right one."""
    if rank == 0:
        seven, three = torch.zeros(1), torch.zeros(1)
        w7 = dist.irecv(seven, 1, tag=7)
        w3 = dist.irecv(three, 1, tag=3)
        w7.wait()
        w3.wait()
        assert (three.item(), seven.item()) == (3.0, 7.0)
    elif rank == 1:
        dist.send(torch.tensor([3.0]), 0, tag=3)
        dist.send(torch.tensor([7.0]), 0, tag=7)
    dist.barrier()


def test_batch_isend_irecv(rank, size):
    """A ring exchange in one batch, with a send to itself (allowed for isend/irecv)."""
    right, left = (rank + 1) % size, (rank - 1) % size
    from_left, from_me = torch.zeros(4), torch.zeros(4)
    ops = [dist.P2POp(dist.irecv, from_left, left),
           dist.P2POp(dist.isend, torch.full((4,), float(rank)), right),
           dist.P2POp(dist.isend, torch.full((4,), -1.0 - rank), rank),
           dist.P2POp(dist.irecv, from_me, rank)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    assert from_left.tolist() == [float(left)] * 4
    assert from_me.tolist() == [-1.0 - rank] * 4


def test_views_and_non_contiguous_tensors(rank, size):
    """A transposed tensor is sent and received by its values, not its storage order."""
    if rank == 0:
        t = torch.arange(6.0).view(2, 3).t()
        dist.send(t, 1)
    elif rank == 1:
        got = torch.zeros(2, 3).t()
        dist.recv(got, 0)
        assert torch.equal(got, torch.arange(6.0).view(2, 3).t())
    dist.barrier()


def test_size_mismatch_is_named(rank, size):
    """A message larger or smaller than the receiving tensor is an error that says so."""
    if rank == 0:
        with pytest.raises(RuntimeError, match=r"recv from rank 1 \(tag 11\) into a float32 "
                                               r"tensor of shape \[3\]: rank 1 sent a larger "
                                               r"tensor"):
            dist.recv(torch.zeros(3), 1, tag=11)
        with pytest.raises(RuntimeError, match="rank 1 sent 8 bytes, but the receiving "
                                               "tensor holds 12 bytes"):
            dist.recv(torch.zeros(3), 1, tag=12)
    elif rank == 1:
        dist.send(torch.zeros(5), 0, tag=11)
        dist.send(torch.zeros(2), 0, tag=12)
    dist.barrier()


def test_large_messages(rank, size):
    """Messages past Open MPI's eager size, which move only while both ranks are inside MPI:
    both ways at once (each rank waits on its send and its receive), and one whose receiver
    has waited long before the sender starts (past the back-to-back polling, into the
    sleeps); whole, whichever rank gets there first."""
    if rank > 1:
        dist.barrier()
        return
    peer = 1 - rank
    n = 1 << 20  # 4 MiB of float32
    got = torch.zeros(n)
    recv = dist.irecv(got, peer, tag=31)
    send = dist.isend(torch.arange(float(n)) + rank, peer, tag=31)
    send.wait()
    recv.wait()
    assert torch.equal(got, torch.arange(float(n)) + peer)
    if rank == 1:
        late = torch.zeros(n // 4)
        dist.recv(late, 0, tag=32)
        assert torch.equal(late, torch.full((n // 4,), 9.0))
    else:
        busy = torch.arange(float(n))
        for _ in range(20):  # rank 1 waits meanwhile (not an ordering: any order passes)
            busy = busy.cumsum(0) / n
        dist.send(torch.full((n // 4,), 9.0), 1, tag=32)
    dist.barrier()


def test_bad_arguments_are_refused(rank, size):
    with pytest.raises(ValueError, match="not in this group"):
        dist.isend(torch.ones(1), group_dst=size)
    with pytest.raises(ValueError, match="tag -1 is outside"):
        dist.isend(torch.ones(1), (rank + 1) % size, tag=-1)
    with pytest.raises(ValueError, match="destination rank should not be the same"):
        dist.send(torch.ones(1), rank)  # PyTorch's rule, as with gloo


def test_recv_that_never_comes_times_out(rank, size):
    """A recv without a sender ends after its timeout, naming what it waited for; the
    receive is withdrawn, so a later message with that tag is not lost to it."""
    if rank == 0:
        work = dist.irecv(torch.zeros(2), 1, tag=21)
        with pytest.raises(RuntimeError, match=r"Timed out after 1 s: recv from rank 1 "
                                               r"\(tag 21\)"):
            work.wait(timeout=SHORT)
        dist.barrier()
        got = torch.zeros(2)
        dist.recv(got, 1, tag=21)
        assert got.tolist() == [5.0, 5.0]
    else:
        dist.barrier()
        if rank == 1:
            dist.send(torch.full((2,), 5.0), 0, tag=21)


def test_subgroup_point_to_point(rank, size):
    """Group ranks on a subgroup, on a communicator of its own: a message on the world
    with the same tag does not reach it."""
    ranks = [0, size - 1]
    g = dist.new_group(ranks)
    if rank == size - 1:
        dist.send(torch.tensor([1.0]), 0, tag=4)  # world
        dist.send(torch.tensor([2.0]), group=g, group_dst=0, tag=4)
    elif rank == 0:
        on_group, on_world = torch.zeros(1), torch.zeros(1)
        src = dist.recv(on_group, group=g, tag=4)
        assert (src, on_group.item()) == (size - 1, 2.0)
        dist.recv(on_world, size - 1, tag=4)
        assert on_world.item() == 1.0
    dist.barrier()


def test_destroy_subgroup(rank, size):
    """destroy_process_group(group) on a kolo subgroup (its members call it), then more
    groups and collectives as usual."""
    for ranks in ([0, size - 1], list(range(size))):
        g = dist.new_group(ranks)
        if rank in ranks:
            t = torch.ones(1)
            dist.all_reduce(t, group=g)
            assert t.item() == float(len(ranks))
            dist.destroy_process_group(g)
            assert g not in dist.distributed_c10d._world.pg_map
            with pytest.raises(RuntimeError, match="the process group was destroyed"):
                g.send([t], 0, 0)
    dist.barrier()
    t = torch.ones(1)
    dist.all_reduce(t)
    assert t.item() == float(size)


@pytest.mark.filterwarnings("ignore:.*all_gather_coalesced. will be deprecated")
def test_all_gather_coalesced(rank, size):
    inputs = [torch.full((2, 2), float(rank)), torch.zeros(0), torch.arange(3.0) + rank]
    outputs = [[torch.full_like(t, -1.0) for t in inputs] for _ in range(size)]
    dist.all_gather_coalesced(outputs, inputs)
    for r, outs in enumerate(outputs):
        assert torch.equal(outs[0], torch.full((2, 2), float(r)))
        assert outs[1].numel() == 0
        assert torch.equal(outs[2], torch.arange(3.0) + r)


def test_monitored_barrier_passes(rank, size):
    for wait_all in (False, True):
        dist.monitored_barrier(timeout=timedelta(seconds=30), wait_all_ranks=wait_all)
    g = dist.new_group([0, size - 1])
    if rank in (0, size - 1):
        dist.monitored_barrier(g, timeout=timedelta(seconds=30))
    dist.barrier()


def test_monitored_barrier_names_the_missing_rank(rank, size):
    """The last rank skips it: rank 0 raises naming it within the timeout, the others
    raise saying rank 0 did not answer."""
    missing = size - 1
    if rank == 0:
        with pytest.raises(RuntimeError, match="Rank %d failed to pass monitoredBarrier "
                                               "in 1000 ms" % missing):
            dist.monitored_barrier(timeout=SHORT)
    elif rank != missing:
        with pytest.raises(RuntimeError, match="Rank %d successfully reached "
                                               "monitoredBarrier" % rank):
            dist.monitored_barrier(timeout=SHORT)
    dist.barrier()


def test_monitored_barrier_wait_all_ranks(rank, size):
    """Only rank 0 calls it: with wait_all_ranks it names every other rank."""
    if rank == 0:
        others = ", ".join(str(r) for r in range(1, size))
        with pytest.raises(RuntimeError, match="Ranks %s failed to pass monitoredBarrier"
                                               % others):
            dist.monitored_barrier(timeout=SHORT, wait_all_ranks=True)
        with pytest.raises(RuntimeError, match="Rank 0 timed out in monitoredBarrier"):
            dist.monitored_barrier(timeout=timedelta(seconds=0))
    dist.barrier()


def test_barrier_left_on_a_timeout_is_joined_later(rank, size):
    """Rank 0's lone barrier ends after its timeout ("Timed out", as gloo's); its next
    barrier is the same one, which the others' barrier completes, and the ranks' unnamed
    collectives stay in step."""
    if rank == 0:
        with pytest.raises(RuntimeError, match="Timed out after 1 s waiting for barrier"):
            dist.barrier(timeout=SHORT)
        for r in range(1, size):
            dist.send(torch.ones(1), r, tag=31)  # "I left it"
    else:
        dist.recv(torch.zeros(1), 0, tag=31)
    dist.barrier()
    t = torch.full((2,), float(rank))
    dist.all_reduce(t)
    assert t.tolist() == [float(sum(range(size)))] * 2
