"""DistributedDataParallel on backend "kolo": N ranks with B/N samples each train exactly
as one process with all B samples (float32, 5 SGD steps: parameters within rtol 1e-5 /
atol 1e-6: only the order of the additions differs), and as DDP on gloo does; comm hooks,
static_graph, bucket views, unused parameters, no_sync and the timeline's bucket names."""
import json
import os

import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powersgd
from torch.nn.parallel import DistributedDataParallel as DDP

BATCH = 12  # divides among 2 and 3 ranks
STEPS = 5
RTOL, ATOL = 1e-5, 1e-6


class Net(torch.nn.Module):
    def __init__(self, unused=False):
        super().__init__()
        self.a = torch.nn.Linear(8, 32)
        self.b = torch.nn.Linear(32, 16)
        self.c = torch.nn.Linear(16, 4)
        self.unused = torch.nn.Linear(4, 4) if unused else None

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))


def data():
    g = torch.Generator().manual_seed(7)
    return torch.randn(STEPS, BATCH, 8, generator=g), torch.randn(STEPS, BATCH, 4, generator=g)


def train(model, rank, size, local=True, **ddp_kwargs):
    """STEPS of SGD; with local=True every rank takes its B/N slice through DDP."""
    torch.manual_seed(0)
    net = model()
    if local:
        net = DDP(net, bucket_cap_mb=0.002, **ddp_kwargs)  # several buckets
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    xs, ys = data()
    per = BATCH // size
    for x, y in zip(xs, ys):
        if local:
            x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in (net.module if local else net).parameters()]


def assert_params(got, want, what, rtol=RTOL, atol=ATOL):
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        torch.testing.assert_close(g, w, rtol=rtol, atol=atol, msg=lambda m: "rank %d %s, "
                                   "parameter %d: %s" % (dist.get_rank(), what, i, m))


def assert_same_on_every_rank(params, what):
    flat = torch.cat([p.reshape(-1) for p in params])
    every = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(every, flat)
    for r, other in enumerate(every):
        assert torch.equal(other, flat), "%s: rank %d's parameters differ from rank %d's" % (
            what, r, dist.get_rank())


@pytest.fixture(scope="module")
def one_process():
    return train(Net, 0, 1, local=False)


def test_equals_one_process(rank, size, one_process):
    got = train(Net, rank, size)
    assert_params(got, one_process, "DDP on kolo vs one process")
    assert_same_on_every_rank(got, "DDP on kolo")


def test_same_as_gloo(rank, size):
    gloo = dist.new_group(backend="gloo")
    assert dist.get_backend(gloo) == "gloo"
    want = train(Net, rank, size, process_group=gloo)
    got = train(Net, rank, size)
    assert_params(got, want, "DDP on kolo vs DDP on gloo")


@pytest.mark.parametrize("kwargs", [
    {"static_graph": True},
    {"gradient_as_bucket_view": True},
    {"gradient_as_bucket_view": True, "static_graph": True},
], ids=["static_graph", "bucket_view", "bucket_view+static_graph"])
def test_ddp_options(rank, size, one_process, kwargs):
    assert_params(train(Net, rank, size, **kwargs), one_process, "DDP %s" % kwargs)


def test_unused_parameters(rank, size, one_process):
    got = train(lambda: Net(unused=True), rank, size, find_unused_parameters=True)
    assert_params(got[:6], one_process, "find_unused_parameters")


def hooked(hook, state=None):
    def register(net):
        net.register_comm_hook(state, hook)
    return register


def train_with_hook(rank, size, register, **kwargs):
    torch.manual_seed(0)
    net = DDP(Net(), bucket_cap_mb=0.002, **kwargs)
    register(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    xs, ys = data()
    per = BATCH // size
    for x, y in zip(xs, ys):
        opt.zero_grad()
        out = net(x[rank * per:(rank + 1) * per])
        torch.nn.functional.mse_loss(out, y[rank * per:(rank + 1) * per]).backward()
        opt.step()
    return [p.detach().clone() for p in net.module.parameters()]


def test_comm_hook_allreduce(rank, size, one_process):
    got = train_with_hook(rank, size, lambda n: n.register_comm_hook(
        None, default_hooks.allreduce_hook))
    assert_params(got, one_process, "allreduce_hook")


def test_comm_hook_fp16(rank, size, one_process):
    got = train_with_hook(rank, size, lambda n: n.register_comm_hook(
        None, default_hooks.fp16_compress_hook))
    assert_params(got, one_process, "fp16_compress_hook", rtol=1e-2, atol=1e-3)
    assert_same_on_every_rank(got, "fp16_compress_hook")


def test_comm_hook_python_future_chain(rank, size, one_process):
    """A hook of our own: two allreduces per bucket, the second started by the first's
    future callback (on kolo's completion thread)."""
    calls = []

    def hook(state, bucket):
        buf = bucket.buffer()
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def halve_then_sum(f):
            t = f.value()[0] / size
            calls.append(bucket.index())
            return dist.all_reduce(t / 2, async_op=True).get_future().wait()[0] * 2 / size

        return fut.then(halve_then_sum)

    got = train_with_hook(rank, size, lambda n: n.register_comm_hook(None, hook))
    assert calls, "the hook never ran"
    assert_params(got, one_process, "a chained Python hook")


def test_comm_hook_powersgd(rank, size):
    """PowerSGD runs allreduces from future callbacks; it must train alike on every rank."""
    state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                   start_powerSGD_iter=2, min_compression_rate=0.1)
    got = train_with_hook(rank, size, lambda n: n.register_comm_hook(
        state, powersgd.powerSGD_hook))
    assert_same_on_every_rank(got, "powerSGD_hook")


def test_no_sync_accumulation(rank, size, one_process):
    """Two micro-batches per step, the first under no_sync(): the same gradient."""
    torch.manual_seed(0)
    net = DDP(Net(), bucket_cap_mb=0.002)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    xs, ys = data()
    per = BATCH // size
    for x, y in zip(xs, ys):
        x, y = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        opt.zero_grad()
        half = per // 2 if per % 2 == 0 else per
        parts = [(x[:half], y[:half]), (x[half:], y[half:])] if half < per else [(x, y)]
        for i, (px, py) in enumerate(parts):
            loss = torch.nn.functional.mse_loss(net(px), py, reduction="sum") / (
                per * y.shape[1])
            if i + 1 < len(parts):
                with net.no_sync():
                    loss.backward()
            else:
                loss.backward()
        opt.step()
    got = [p.detach().clone() for p in net.module.parameters()]
    assert_params(got, one_process, "no_sync accumulation")


def test_timeline_records_buckets(rank, size, tmp_path):
    import kolo.torch as kt
    path = os.path.join(str(tmp_path), "timeline.json")
    box = [path]
    dist.broadcast_object_list(box, src=0)  # rank 0's path: only rank 0 writes
    kt.start_timeline(box[0])
    train(Net, rank, size)
    kt.stop_timeline()
    if rank == 0:
        text = open(box[0]).read()
        assert "ddp.bucket0." in text and "ddp.bucket1." in text, text[:2000]
        json.loads(text.rstrip().rstrip(",") + ("" if text.rstrip().endswith("]") else "]"))
    dist.barrier()
