"""kolo.torch's Adasum against the NumPy float64 reference of the whole algorithm
(test/common/adasum_reference.py), under kolorun at np=2 and np=4 (python.torch.np2,
python.adasum.np4); at np=3 every rank gets Horovod's refusal (python.torch.np3).
Every rank computes every rank's input from one seed, so each checks the full result."""
import os
import re
import sys

import numpy as np
import pytest
import torch

import kolo.torch as hvd

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common"))
from adasum_reference import adasum as reference, check, close, self_check  # noqa: E402
from adasum_reference import inputs as rank_inputs  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
POWER_OF_TWO = N & (N - 1) == 0
NOT_POWER_OF_TWO = "Running Adasum with non-power of 2 ranks is not supported yet."
DTYPES = {torch.float16: np.float16, torch.float32: np.float32, torch.float64: np.float64}
# Odd lengths, lengths below the number of ranks, one tensor larger than a few pages.
SIZES = [1, 3, 2 * N + 1, 17, 4099]


def every_rank(seed, sizes, np_dtype):
    """Every rank's tensors (as NumPy arrays of ``np_dtype``), the same on every rank."""
    return rank_inputs(seed, sizes, np_dtype, N)


def mine(every):
    return [torch.from_numpy(a.copy()) for a in every[R]]


def expect(every, outputs, np_dtype, factor=1.0):
    check(every, [o.detach().numpy() for o in outputs], np_dtype, factor, R)


def refused_everywhere(call):
    """Where the job's size is not a power of two, Horovod's refusal on every rank."""
    if POWER_OF_TWO:
        return False
    with pytest.raises(NotImplementedError, match=re.escape(NOT_POWER_OF_TWO)):
        call()
    return True


def test_the_reference_equals_the_pairwise_tree():
    self_check()


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_allreduce_one_tensor_at_a_time_matches_the_reference(dtype):
    inputs = every_rank(1, SIZES, DTYPES[dtype])
    tensors = mine(inputs)
    if refused_everywhere(lambda: hvd.allreduce(tensors[0], op=hvd.Adasum)):
        return
    outputs = [hvd.allreduce(t, op=hvd.Adasum, name="adasum.one.%d" % i)
               for i, t in enumerate(tensors)]
    expect(inputs, outputs, DTYPES[dtype])
    assert all(torch.equal(t, torch.from_numpy(a)) for t, a in zip(tensors, inputs[R]))


@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_grouped_and_async_allreduces_are_fused_and_match_the_reference(dtype):
    inputs = every_rank(2, SIZES, DTYPES[dtype])
    if refused_everywhere(lambda: hvd.grouped_allreduce(mine(inputs), op=hvd.Adasum)):
        return
    expect(inputs, hvd.grouped_allreduce(mine(inputs), op=hvd.Adasum, name="adasum.group"),
           DTYPES[dtype])
    # All in flight at once: the fusion planner puts them in one buffer.
    handles = [hvd.allreduce_async(t, op=hvd.Adasum, name="adasum.async.%d" % i)
               for i, t in enumerate(mine(inputs))]
    expect(inputs, [hvd.synchronize(h) for h in handles], DTYPES[dtype])
    # In place, and op=2: Horovod's code of Adasum.
    tensors = mine(inputs)
    hvd.grouped_allreduce_(tensors, op=2, name="adasum.inplace")
    expect(inputs, tensors, DTYPES[dtype])


def test_prescale_and_postscale_as_horovod():
    inputs = every_rank(3, SIZES, np.float32)
    if refused_everywhere(lambda: hvd.allreduce(mine(inputs)[0], op=hvd.Adasum)):
        return
    out = [hvd.allreduce(t, op=hvd.Adasum, prescale_factor=0.5, postscale_factor=3.0,
                         name="adasum.scaled.%d" % i) for i, t in enumerate(mine(inputs))]
    expect(inputs, out, np.float32, factor=1.5)  # Adasum(k a, k b) = k Adasum(a, b)
    t = mine(inputs)[2]
    hvd.allreduce_(t, op=hvd.Adasum, postscale_factor=2.0, name="adasum.scaled.inplace")
    want = reference([[ranks[2].astype(np.float64)] for ranks in inputs])[0] * 2.0
    assert close(np.float32, want, t.numpy())


def test_the_gradient_is_the_adasum_of_the_incoming_gradients():
    # Horovod's HorovodAllreduce.backward: the same allreduce (op included) of the gradient.
    inputs = every_rank(4, [5], np.float64)
    grads = every_rank(5, [5], np.float64)
    x = torch.from_numpy(inputs[R][0].copy()).requires_grad_()
    if refused_everywhere(lambda: hvd.allreduce(x, op=hvd.Adasum)):
        return
    y = hvd.allreduce(x, op=hvd.Adasum, name="adasum.forward")
    y.backward(torch.from_numpy(grads[R][0].copy()))
    expect(grads, [x.grad], np.float64)


def test_integer_tensors_and_other_process_sets_are_refused_on_every_rank():
    if not refused_everywhere(lambda: hvd.allreduce(torch.ones(2), op=hvd.Adasum)):
        with pytest.raises(hvd.HorovodInternalError,
                           match="float16, float32 and float64 tensors.*not int64"):
            hvd.allreduce(torch.ones(2, dtype=torch.int64), op=hvd.Adasum)
    ps = hvd.add_process_set([0, 1] if N > 2 else [1])  # [0, 1] is the global set at np=2
    try:
        if ps.included():
            with pytest.raises(NotImplementedError,
                               match="Adasum does not support non-global process sets yet."):
                hvd.allreduce(torch.ones(2), op=hvd.Adasum, process_set=ps)
        with pytest.raises(NotImplementedError,
                           match="Adasum does not support non-global process sets yet."):
            hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=1),
                                     op=hvd.Adasum, process_set=ps)
    finally:
        hvd.remove_process_set(ps)
    # Nothing was left behind: the same name works at once.
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum, name="adasum.after"),
                       torch.full((2,), float(N)))


# --- DistributedOptimizer(op=Adasum): Horovod's _DistributedAdasumOptimizer --------------

def model_and_batch():
    torch.manual_seed(0)  # the same model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    g = torch.Generator().manual_seed(100 + R)  # each rank its own batch
    return model, torch.randn(6, 4, generator=g), torch.randn(6, 2, generator=g)


def local_deltas(lr, momentum, steps=1):
    """What the wrapped optimizer alone changes on this rank, parameter by parameter."""
    model, x, y = model_and_batch()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    return [(p.detach() - b).numpy() for p, b in zip(model.parameters(), before)], before


def test_distributed_optimizer_combines_each_parameters_update_with_adasum():
    deltas, start = local_deltas(lr=0.1, momentum=0.5)
    # Every rank's deltas, to compute the expected result here.
    every = [[] for _ in range(N)]
    for d in deltas:
        gathered = hvd.allgather(torch.from_numpy(d.reshape(1, -1).copy()), name=None)
        for r in range(N):
            every[r].append(gathered[r].numpy())
    model, x, y = model_and_batch()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum)
    loss = torch.nn.functional.mse_loss(model(x), y)
    # The first parameter's hook starts an allreduce, which refuses at np=3.
    if refused_everywhere(loss.backward):
        return
    loss.backward()
    with pytest.raises(AssertionError, match="before optimizer.step"):
        opt.zero_grad()
    with pytest.raises(AssertionError, match="Skipping synchronization is not supported"):
        opt.skip_synchronize()
    opt.step()
    want = reference(every)
    for p, s, w in zip(model.parameters(), start, want):
        # p - start in float32 loses the bits of start (|start| ~ 0.5, |delta| ~ 0.01).
        assert np.allclose(w, (p.detach() - s).numpy().reshape(-1), rtol=0, atol=1e-6), R
    # A second step works (handles cleared, delays reset), and the ranks agree.
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    assert torch.equal(hvd.broadcast(flat, 0, name="adasum.opt.agree"), flat)
