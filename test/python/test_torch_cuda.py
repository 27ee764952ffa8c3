"""kolo.torch on CUDA tensors, under kolorun: the collectives through NCCL and the
DistributedOptimizer equivalence (N ranks with B/N samples each match one process
with B). Skips, saying why, without a GPU or without a CUDA build; at np > 1 it
needs a GPU per rank, or NCCL's multi-rank mode (NCCL >= 2.30 with
NCCL_MULTI_RANK_GPU_ENABLE=1: ranks share a GPU, cuda_sharing.py).
Run by scripts/gpu_check.sh (step torch) on a GPU machine; docs/gpu.md."""
import pytest
import torch

import kolo.torch as hvd
from cuda_sharing import nccl_shares_gpu

hvd.init()
R, N = hvd.rank(), hvd.size()


def _why_not():
    if not hvd.cuda_built():
        return "this kolo build has no GPU support (built without CUDA)"
    if not torch.cuda.is_available():
        return "no CUDA device on this machine"
    if torch.cuda.device_count() < hvd.local_size() and not nccl_shares_gpu(hvd):
        return ("%d ranks on this host share %d GPU(s): NCCL needs one per rank (or NCCL >= 2.30 "
                "with NCCL_MULTI_RANK_GPU_ENABLE=1)" % (hvd.local_size(), torch.cuda.device_count()))
    return None


# Every rank reaches the same verdict (each host has the same GPU count here),
# so no rank waits in a collective that another skipped.
pytestmark = pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))
if _why_not() is None:
    torch.cuda.set_device(hvd.local_rank() % torch.cuda.device_count())
DEV = torch.device("cuda", torch.cuda.current_device()) if _why_not() is None else None


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int32, torch.int64])
def test_allreduce_sum_and_average_stay_on_the_device(dtype):
    x = torch.arange(1000, device=DEV).to(dtype) * (R + 1)
    s = hvd.allreduce(x, op=hvd.Sum, name="cuda.sum.%s" % dtype)
    assert s.device == DEV and s.dtype == dtype
    want = torch.arange(1000, device=DEV).to(torch.float64) * N * (N + 1) / 2
    assert torch.equal(s.double(), want.to(dtype).double())
    if dtype.is_floating_point:
        a = hvd.allreduce(torch.full((7,), 2.0 * R, device=DEV, dtype=dtype), name="cuda.avg.%s" % dtype)
        assert torch.allclose(a.double(), torch.full((7,), float(N - 1), device=DEV, dtype=torch.float64))


def test_fused_grouped_allreduce_with_scale_factors():
    xs = [torch.full((n,), float(R + 1), device=DEV) for n in (1, 17, 70000)]
    out = hvd.grouped_allreduce(xs, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    for y in out:
        assert y.device == DEV
        assert torch.equal(y, torch.full_like(y, N * (N + 1) / 2))


def test_broadcast_allgather_alltoall_reducescatter():
    b = hvd.broadcast(torch.full((3,), float(R), device=DEV), root_rank=N - 1)
    assert torch.equal(b, torch.full((3,), float(N - 1), device=DEV))
    g = hvd.allgather(torch.full((R + 1, 2), float(R), device=DEV))
    assert g.device == DEV and g.shape == (N * (N + 1) // 2, 2)
    assert g[-1, 0].item() == N - 1
    a = hvd.alltoall(torch.arange(N, device=DEV, dtype=torch.float32) + 100 * R)
    assert torch.equal(a, torch.arange(N, device=DEV, dtype=torch.float32) * 100 + R)
    rs = hvd.reducescatter(torch.ones(N * 2, device=DEV), op=hvd.Sum)
    assert rs.device == DEV and torch.equal(rs, torch.full((2,), float(N), device=DEV))


def test_waits_for_work_queued_on_the_current_stream():
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.ones(1 << 22, device=DEV)
        x.mul_(R + 1)  # queued on `side`, not yet done when the collective is enqueued
        y = hvd.allreduce(x, op=hvd.Sum, name="cuda.stream")
    torch.cuda.synchronize()
    assert y[-1].item() == N * (N + 1) / 2


def test_distributed_optimizer_n_ranks_match_one_process():
    B, steps = 8 * N, 4
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 3)).to(DEV).double()
    reference = torch.nn.Sequential(torch.nn.Linear(5, 16), torch.nn.Tanh(),
                                    torch.nn.Linear(16, 3)).to(DEV).double()
    reference.load_state_dict(model.state_dict())
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters())
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    g = torch.Generator().manual_seed(1234)
    for _ in range(steps):
        x = torch.randn(B, 5, generator=g, dtype=torch.float64).to(DEV)
        y = torch.randn(B, 3, generator=g, dtype=torch.float64).to(DEV)
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(x), y).backward()
        ref_opt.step()
        opt.zero_grad()
        shard = slice(R * B // N, (R + 1) * B // N)
        torch.nn.functional.mse_loss(model(x[shard]), y[shard]).backward()
        opt.step()
    for (name, p), q in zip(model.named_parameters(), reference.parameters()):
        assert p.device == DEV
        assert torch.allclose(p, q, rtol=1e-12, atol=1e-12), (name, (p - q).abs().max().item())


def test_adasum_on_the_device_as_horovod():
    # Summed within the host, Adasum across hosts, divided by the ranks per host (Horovod's
    # postscale / local_size): orthogonal tensors give their sum / local_size, as Horovod's
    # test_adasum_pytorch.py expects. Where the hosts are not a power of two: its refusal.
    xs = [torch.zeros(n, device=DEV) for n in (1, 3 * N + 1, 70001)]
    for x in xs:
        x[R::N] = R + 1
    hosts = N // hvd.local_size()
    if hosts & (hosts - 1):
        with pytest.raises(NotImplementedError, match="non-power of 2 nodes"):
            hvd.grouped_allreduce(xs, op=hvd.Adasum)
        return
    for x, y in zip(xs, hvd.grouped_allreduce(xs, op=hvd.Adasum, name="cuda.adasum")):
        want = (torch.arange(x.numel(), device=DEV) % N + 1).float() / hvd.local_size()
        assert y.device == DEV and torch.allclose(y, want, rtol=1e-6)
