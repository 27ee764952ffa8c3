"""kolo.torch under kolorun (every rank runs the same tests in the same order)."""
import pytest
import torch

import kolo.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool]
if hasattr(torch, "uint16"):  # PyTorch 2.3 added it; kolo.torch takes it where torch has it
    DTYPES.insert(1, torch.uint16)
OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]


def value(dtype, rank, op, n=7):
    i = torch.arange(n)
    if dtype == torch.bool:
        return ((i + rank) % 3 == 0)
    if op == hvd.Product:
        return (1 + (i + rank) % 2).to(dtype)
    return ((rank + 1) * (i % 5 + 1)).to(dtype)


def expected(dtype, op, n=7):
    vals = [value(dtype, r, op, n).to(torch.float64) for r in range(N)]
    stacked = torch.stack(vals)
    if dtype == torch.bool:
        out = stacked.min(0).values if op in (hvd.Min, hvd.Product) else stacked.max(0).values
        return out.to(torch.bool)
    if op in (hvd.Sum, hvd.Average):
        out = stacked.sum(0)
    elif op == hvd.Min:
        out = stacked.min(0).values
    elif op == hvd.Max:
        out = stacked.max(0).values
    else:
        out = stacked.prod(0)
    out = out.to(dtype)
    if op == hvd.Average:
        if dtype.is_floating_point:
            out = out * (1.0 / N)
        else:  # kolo scales integers in double and truncates
            out = (out.to(torch.float64) * (1.0 / N)).to(dtype)
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS, ids=["sum", "average", "min", "max", "product"])
def test_allreduce_every_dtype_and_op(dtype, op):
    if dtype == torch.bool and op == hvd.Average:
        with pytest.raises(ValueError, match="average is not defined"):
            hvd.allreduce(value(dtype, R, op), op=op)
        return
    x = value(dtype, R, op)
    out = hvd.allreduce(x, op=op, name="ar.%s.%d" % (dtype, op))
    assert torch.equal(out, expected(dtype, op)), (R, out, expected(dtype, op))
    assert torch.equal(x, value(dtype, R, op))  # input untouched
    y = value(dtype, R, op)
    assert hvd.allreduce_(y, op=op) is y and torch.equal(y, expected(dtype, op))


def test_average_is_the_default_and_average_flag_is_honoured():
    x = torch.full((3,), float(R + 1))
    assert torch.allclose(hvd.allreduce(x), torch.full((3,), (N + 1) / 2))
    assert torch.allclose(hvd.allreduce(x, average=False), torch.full((3,), N * (N + 1) / 2))


def test_scale_factors():
    x = torch.full((4,), 2.0)
    out = hvd.allreduce(x, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0)
    assert torch.allclose(out, torch.full((4,), 3.0 * N))


def test_async_poll_and_synchronize():
    handles = [hvd.allreduce_async(torch.full((10,), float(k)), name="async.%d" % k, op=hvd.Sum)
               for k in range(5)]
    for k, h in enumerate(handles):
        assert hvd.poll(h) in (True, False)
        out = hvd.synchronize(h)
        assert torch.equal(out, torch.full((10,), float(k * N)))
        # As Horovod: a synchronized handle is cleared.
        with pytest.raises(ValueError, match="not created or has been cleared"):
            hvd.poll(h)
        assert hvd.synchronize(h) is None


def test_allgather_with_different_first_dimensions():
    x = torch.full((R + 1, 3), float(R), dtype=torch.float64)
    out = hvd.allgather(x)
    assert out.shape == (N * (N + 1) // 2, 3)
    want = torch.cat([torch.full((r + 1, 3), float(r), dtype=torch.float64) for r in range(N)])
    assert torch.equal(out, want)


@pytest.mark.parametrize("root", range(3))
def test_broadcast_from_every_root(root):
    if root >= N:
        pytest.skip("fewer ranks")
    x = torch.arange(6, dtype=torch.int32) * (R + 1)
    out = hvd.broadcast(x, root)
    assert torch.equal(out, torch.arange(6, dtype=torch.int32) * (root + 1))
    assert torch.equal(x, torch.arange(6, dtype=torch.int32) * (R + 1))
    hvd.broadcast_(x, root)
    assert torch.equal(x, out)


def test_broadcast_parameters_makes_models_equal():
    torch.manual_seed(100 + R)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = hvd.allgather(flat.unsqueeze(0))
    for r in range(N):
        assert torch.equal(gathered[r], flat)


def test_mismatched_shapes_raise_the_same_error_on_every_rank():
    with pytest.raises(hvd.KoloInternalError) as info:
        hvd.allreduce(torch.ones(R + 2), name="mismatch")
    assert "Mismatched allreduce tensor shapes for tensor 'mismatch'" in str(info.value)
    assert "rank 0 sent a tensor of shape [2]" in str(info.value)
    assert isinstance(info.value, RuntimeError)


def test_name_reused_while_pending_raises_value_error():
    x = torch.ones(2)
    if R == 0:
        h = hvd.allreduce_async(x, name="held")
        with pytest.raises(ValueError, match="'held' is already pending"):
            hvd.allreduce_async(x, name="held")
        hvd.barrier()
        hvd.synchronize(h)
    else:
        hvd.barrier()
        hvd.allreduce(x, name="held")


def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="not contiguous"):
        hvd.allreduce(torch.ones(4, 4).t())
    with pytest.raises(TypeError, match="does not support"):
        hvd.allreduce(torch.ones(2, dtype=torch.complex64))
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        hvd.allreduce([1, 2])
    with pytest.raises(ValueError, match="out of range"):
        hvd.broadcast(torch.ones(2), N)
    with pytest.raises(hvd.HorovodInternalError if N & (N - 1) == 0 else NotImplementedError,
                       match="Adasum reduces float16, float32 and float64 tensors .*not int32"
                       if N & (N - 1) == 0 else "non-power of 2"):
        hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum)
    with pytest.raises(ValueError, match="op parameter supersedes average"):
        hvd.allreduce(torch.ones(2), op=hvd.Sum, average=True)


def test_build_flags():
    assert hvd.mpi_built() and not hvd.gloo_built()
    assert hvd.local_size() >= 1 and 0 <= hvd.local_rank() < hvd.local_size()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_other_collectives_every_dtype(dtype):
    base = value(dtype, R, hvd.Sum, n=N * 2)
    # allgather: rank r's rows, in rank order
    out = hvd.allgather(base.view(N, 2))
    assert torch.equal(out, torch.cat([value(dtype, r, hvd.Sum, n=N * 2).view(N, 2)
                                       for r in range(N)]))
    # broadcast from the last rank
    assert torch.equal(hvd.broadcast(base, N - 1), value(dtype, N - 1, hvd.Sum, n=N * 2))
    # alltoall: two elements to every rank
    out = hvd.alltoall(base)
    want = torch.cat([value(dtype, src, hvd.Sum, n=N * 2)[2 * R:2 * R + 2] for src in range(N)])
    assert torch.equal(out, want)
    # grouped allreduce and reducescatter (sum; bool: or)
    if dtype != torch.bool:
        g = hvd.grouped_allreduce([base, base[:3]], op=hvd.Sum)
        full = expected(dtype, hvd.Sum, n=N * 2)
        assert torch.equal(g[0], full) and torch.equal(g[1], full[:3])
        rs = hvd.reducescatter(base.view(N, 2), op=hvd.Sum)
        assert torch.equal(rs, full.view(N, 2)[R:R + 1])


def test_unnamed_collectives_in_rank_dependent_branches_pair():
    # As in Horovod: the same collective, unnamed, on each side of a branch,
    # and a helper called from different places in rank order.
    if R == 0:
        b = hvd.broadcast(torch.arange(4.0), root_rank=0)
    else:
        b = hvd.broadcast(torch.zeros(4), root_rank=0)
    assert b.tolist() == [0.0, 1.0, 2.0, 3.0]

    def total(t):
        return hvd.allreduce(t, op=hvd.Sum)

    if R % 2:
        s = total(torch.ones(3))
    else:
        s = total(torch.ones(3))
    assert s.tolist() == [float(N)] * 3
