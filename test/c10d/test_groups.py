"""dist.new_group(ranks) on backend "kolo" is a kolo process set: every rank takes part in
making it, members run collectives among themselves, non-members get NON_GROUP_MEMBER; a
gloo group beside kolo's default group works as PyTorch's own."""
import torch
import torch.distributed as dist


def test_subset(rank, size):
    ranks = [0, size - 1]
    g = dist.new_group(ranks)
    if rank not in ranks:
        assert g is dist.GroupMember.NON_GROUP_MEMBER
        return
    assert dist.get_backend(g) == "kolo"
    assert dist.get_rank(g) == ranks.index(rank) and dist.get_world_size(g) == 2
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t, group=g)
    assert t.tolist() == [float(1 + size)] * 3
    b = torch.full((2,), float(rank))
    dist.broadcast(b, src=size - 1, group=g)  # src is a global rank
    assert b.tolist() == [float(size - 1)] * 2
    out = [torch.empty(1) for _ in ranks]
    dist.all_gather(out, torch.tensor([float(rank)]), group=g)
    assert [o.item() for o in out] == [float(r) for r in ranks]
    dist.barrier(group=g)


def test_overlapping_groups_and_the_world(rank, size):
    firsts = dist.new_group([0, 1])
    lasts = dist.new_group(list(range(1, size)))
    everyone = dist.new_group(list(range(size)))
    t = torch.ones(2)
    dist.all_reduce(t, group=everyone)
    assert t.tolist() == [float(size)] * 2
    if rank in (0, 1):
        t = torch.full((1,), float(rank))
        dist.all_reduce(t, group=firsts, op=dist.ReduceOp.MAX)
        assert t.item() == 1.0
    if rank >= 1:
        t = torch.full((1,), float(rank))
        dist.all_reduce(t, group=lasts)
        assert t.item() == float(sum(range(1, size)))
    dist.barrier()


def test_gloo_group_beside_kolo(rank, size):
    g = dist.new_group(backend="gloo")
    assert dist.get_backend(g) == "gloo" and dist.get_backend() == "kolo"
    t = torch.full((2,), float(rank))
    dist.all_reduce(t, group=g)
    assert t.tolist() == [float(sum(range(size)))] * 2
    # Point to point on the gloo group, beside kolo's own.
    if rank == 0:
        dist.send(torch.tensor([42.0]), dst=size - 1, group=g)
    elif rank == size - 1:
        got = torch.zeros(1)
        dist.recv(got, src=0, group=g)
        assert got.item() == 42.0
    dist.barrier()


def test_ddp_on_a_subgroup(rank, size):
    from torch.nn.parallel import DistributedDataParallel as DDP
    ranks = list(range(size - 1)) if size > 2 else [0, 1]
    g = dist.new_group(ranks)
    if rank in ranks:
        torch.manual_seed(0)
        net = DDP(torch.nn.Linear(4, 2), process_group=g)
        x = torch.full((3, 4), float(rank + 1))
        net(x).sum().backward()
        grad = net.module.weight.grad.clone()
        # The mean over the group of each member's gradient: sum of inputs, 3 rows each.
        want = torch.full((2, 4), 3.0 * sum(r + 1 for r in ranks) / len(ranks))
        torch.testing.assert_close(grad, want)
    dist.barrier()


def test_local_synchronization_is_refused(rank, size):
    """Non-members of such a group never reach the backend, so kolo cannot register it:
    its members are told at once instead of waiting for the stall timeout."""
    import pytest
    if rank == 0:
        with pytest.raises(NotImplementedError, match="use_local_synchronization"):
            dist.new_group([0], use_local_synchronization=True)
    else:
        assert dist.new_group([0], use_local_synchronization=True) is (
            dist.GroupMember.NON_GROUP_MEMBER)
    dist.barrier()
