"""kolo.torch against Horovod 0.28's torch API, continued (see test_horovod_compat.py):
autograd gradients by Horovod's backward rules, process-set variants, optimizer behaviour,
objects. Runs under kolorun at np=2 and np=3; every rank runs the same tests in order.
"""
import warnings

import pytest
import torch

import kolo.torch as hvd

from compat_common import F64, N, R, SUB, grads, leaf, mean_up, reducescatter_rows, up
import object_checks  # test/common, on the path through compat_common


@pytest.fixture(scope="module")
def ps():
    s = hvd.add_process_set(SUB)
    yield s
    assert hvd.remove_process_set(s) is True


# --- autograd: Horovod's backward rules ------------------------------------------------

@pytest.mark.parametrize("op,pre,post", [("Average", 1.0, 1.0), ("Sum", 2.0, 0.25),
                                         ("Max", 1.0, 1.0)])
def test_allreduce_gradient(op, pre, post):
    op = getattr(hvd, op)
    x = leaf(3, 2)
    (g,) = grads(hvd.allreduce(x, op=op, prescale_factor=pre, postscale_factor=post), [x])
    every = [up(k, (3, 2)) for k in range(N)]
    want = {hvd.Average: sum(every) / N, hvd.Sum: sum(every),
            hvd.Max: torch.stack(every).max(0).values}[op] * pre * post
    assert torch.allclose(g, want)


def test_grouped_allreduce_gradient():
    a, b = leaf(3), leaf(2, 2)
    ga, gb = grads(hvd.grouped_allreduce([a, b], op=hvd.Sum), [a, b])
    assert torch.allclose(ga, sum(up(k, (3,), 0) for k in range(N)))
    assert torch.allclose(gb, sum(up(k, (2, 2), 1) for k in range(N)))


def _my_rows(full, dims, r):
    start = sum(dims[:r])
    return full[start:start + dims[r]]


def test_allgather_gradient_is_the_average_then_this_ranks_rows():
    x = leaf(R + 1, 2)
    out = hvd.allgather(x)
    dims = [r + 1 for r in range(N)]
    (g,) = grads(out, [x])
    assert torch.allclose(g, _my_rows(mean_up(range(N), out.shape), dims, R))


def test_grouped_allgather_gradient():
    a, b = leaf(R + 1, 2), leaf(2, 3)
    outs = hvd.grouped_allgather([a, b])
    ga, gb = grads(outs, [a, b])
    assert torch.allclose(ga, _my_rows(mean_up(range(N), outs[0].shape, 0),
                                       [r + 1 for r in range(N)], R))
    assert torch.allclose(gb, _my_rows(mean_up(range(N), outs[1].shape, 1), [2] * N, R))


def test_broadcast_gradient_is_the_average_on_the_root_and_zero_elsewhere():
    root = N - 1
    x = leaf(4)
    (g,) = grads(hvd.broadcast(x, root), [x])
    want = mean_up(range(N), (4,)) if R == root else torch.zeros(4, dtype=F64)
    assert torch.allclose(g, want)


@pytest.mark.parametrize("with_splits", [True, False])
def test_alltoall_gradient_is_the_reverse_alltoall(with_splits):
    def splits_of(r):
        return [(r + j) % 2 + 1 for j in range(N)] if with_splits else [1] * N
    x = leaf(sum(splits_of(R)), 2)
    res = hvd.alltoall(x, splits_of(R) if with_splits else None)
    out = res[0] if with_splits else res
    (g,) = grads(out, [x])
    want = []
    for j in range(N):  # the rows this rank sent to rank j get rank j's upstream gradient
        rows_j = sum(splits_of(s)[j] for s in range(N))
        offset = sum(splits_of(s)[j] for s in range(R))
        want.append(up(j, (rows_j, 2))[offset:offset + splits_of(R)[j]])
    assert torch.allclose(g, torch.cat(want))


@pytest.mark.parametrize("op,pre,post", [("Average", 1.0, 1.0), ("Sum", 1.0, 1.0),
                                         ("Sum", 2.0, 0.5)])
def test_reducescatter_gradient_is_the_allgather_scaled_as_horovod(op, pre, post):
    op = getattr(hvd, op)
    rows = 2 * N + 1
    x = leaf(rows, 2)
    (g,) = grads(hvd.reducescatter(x, op=op, prescale_factor=pre, postscale_factor=post), [x])
    factor = (N if op == hvd.Sum else 1) * pre * post  # Horovod: no 1/size for Average
    want = torch.cat([up(k, (reducescatter_rows(rows, k, N), 2)) for k in range(N)]) * factor
    assert torch.allclose(g, want)


def test_grouped_reducescatter_gradient():
    a, b = leaf(N, 2), leaf(N + 1)
    ga, gb = grads(hvd.grouped_reducescatter([a, b], op=hvd.Sum), [a, b])
    assert torch.allclose(ga, torch.cat([up(k, (1, 2), 0) for k in range(N)]) * N)
    assert torch.allclose(gb, torch.cat([up(k, (reducescatter_rows(N + 1, k, N),), 1)
                                         for k in range(N)]) * N)


# --- process sets --------------------------------------------------------------------

def test_process_set_objects_follow_horovod(ps):
    assert ps.ranks == SUB and type(ps.process_set_id) is int and ps.process_set_id > 0
    assert ps.size() == len(SUB) and ps.included() == (R in SUB)
    if R in SUB:
        assert ps.rank() == SUB.index(R)
    else:
        with pytest.raises(ValueError, match="Process is not part of provided process set"):
            ps.rank()
    assert str(ps) == "ProcessSet(process_set_id=%d, ranks=%s, mpi_comm=None)" % (
        ps.process_set_id, SUB)
    again = hvd.ProcessSet(SUB)
    hvd.init(process_sets=[again])  # already initialized: finds the registered set
    assert again.process_set_id == ps.process_set_id
    loose = hvd.ProcessSet([1, 0])
    assert loose.ranks == [0, 1] and loose.process_set_id is None
    assert loose.size() is None and loose.rank() is None and loose.included() == (R < 2)
    with pytest.raises(ValueError, match="list of process ranks"):
        hvd.ProcessSet(["a"])
    g = hvd.global_process_set
    assert g.process_set_id == 0 and g.ranks == list(range(N)) and g.size() == N
    assert g.rank() == R and g.included()
    with pytest.raises(ValueError, match="duplicate process set"):
        hvd.add_process_set(list(SUB))
    with pytest.raises(ValueError, match="duplicate process set"):
        hvd.add_process_set(range(N))
    assert hvd.remove_process_set(g) is False and hvd.remove_process_set(loose) is False
    extra = hvd.add_process_set([r for r in range(N) if r not in SUB][:1])
    assert hvd.remove_process_set(extra) is True and extra.process_set_id is None
    assert hvd.remove_process_set(extra) is False
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.ones(1), process_set=extra)


def test_process_set_collectives(ps):
    x = torch.full((2,), float(R + 1))
    if R not in SUB:
        calls = [
            lambda: hvd.allreduce(x, process_set=ps),
            lambda: hvd.allreduce_(x, process_set=ps),
            lambda: hvd.grouped_allreduce([x], process_set=ps),
            lambda: hvd.grouped_allreduce_([x], process_set=ps),
            lambda: hvd.allgather(x, process_set=ps),
            lambda: hvd.grouped_allgather([x], process_set=ps),
            lambda: hvd.broadcast(x, SUB[0], process_set=ps),
            lambda: hvd.alltoall(x, process_set=ps),
            lambda: hvd.reducescatter(x, process_set=ps),
            lambda: hvd.grouped_reducescatter([x], process_set=ps),
            lambda: hvd.sparse_allreduce_async(x.to_sparse(), "s", hvd.Sum, process_set=ps),
            lambda: hvd.barrier(process_set=ps),
            lambda: hvd.broadcast_object(1, SUB[0], process_set=ps),
        ]
        for call in calls:
            with pytest.raises(ValueError, match="not a member of process set"):
                call()
        return
    n, me = len(SUB), SUB.index(R)
    total = float(sum(r + 1 for r in SUB))
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps), torch.full((2,), total))
    y = x.clone()
    assert torch.allclose(hvd.allreduce_(y, process_set=ps), torch.full((2,), total / n))
    assert torch.equal(hvd.grouped_allreduce([x], op=hvd.Sum, process_set=ps)[0],
                       torch.full((2,), total))
    assert torch.equal(hvd.grouped_allreduce_([x.clone()], op=hvd.Sum, process_set=ps)[0],
                       torch.full((2,), total))
    gathered = torch.cat([torch.full((2,), float(r + 1)) for r in SUB])
    assert torch.equal(hvd.allgather(x, process_set=ps), gathered)
    assert torch.equal(hvd.grouped_allgather([x], process_set=ps)[0], gathered)
    root = SUB[-1]  # a global rank, as in Horovod
    assert torch.equal(hvd.broadcast(x, root, process_set=ps), torch.full((2,), root + 1.0))
    with pytest.raises(ValueError, match="root_rank %d is not a member" % (N + 5)):
        hvd.broadcast(x, N + 5, process_set=ps)
    rows = torch.arange(float(n)) + 10 * R
    assert torch.equal(hvd.alltoall(rows, process_set=ps),
                       torch.tensor([10.0 * r + me for r in SUB]))
    block = torch.ones(n, 2) * (R + 1)
    assert torch.equal(hvd.reducescatter(block, op=hvd.Sum, process_set=ps),
                       torch.full((1, 2), total))
    assert torch.equal(hvd.grouped_reducescatter([block], op=hvd.Sum, process_set=ps)[0],
                       torch.full((1, 2), total))
    assert hvd.barrier(process_set=ps) is None
    assert hvd.broadcast_object({"r": R}, root, process_set=ps) == {"r": root}
    assert hvd.allgather_object(R, process_set=ps) == SUB


def test_process_set_gradients(ps):
    if R not in SUB:
        return
    n = len(SUB)
    x = leaf(R + 1, 2)
    out = hvd.allgather(x, process_set=ps)
    (g,) = grads(out, [x])
    assert torch.allclose(g, _my_rows(mean_up(SUB, out.shape), [r + 1 for r in SUB],
                                      SUB.index(R)))
    x = leaf(3)
    root = SUB[-1]
    (g,) = grads(hvd.broadcast(x, root, process_set=ps), [x])
    assert torch.allclose(g, mean_up(SUB, (3,)) if R == root else torch.zeros(3, dtype=F64))
    x = leaf(n, 2)
    (g,) = grads(hvd.reducescatter(x, op=hvd.Sum, process_set=ps), [x])
    assert torch.allclose(g, torch.cat([up(k, (1, 2)) for k in SUB]) * n)


def test_distributed_optimizer_on_a_process_set(ps):
    model = torch.nn.Linear(3, 1, bias=False)
    torch.nn.init.zeros_(model.weight)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=1.0),
                                   named_parameters=model.named_parameters(), process_set=ps)
    model(torch.ones(1, 3) * (R + 1)).sum().backward()
    opt.step()
    grad = sum(r + 1 for r in SUB) / len(SUB) if R in SUB else R + 1.0
    assert torch.allclose(model.weight, torch.full((1, 3), -grad))


# --- optimizer, state, objects ---------------------------------------------------------

class Net(torch.nn.Module):
    """One frozen parameter, one never used: both have no gradient."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.a = torch.nn.Linear(3, 4)
        self.b = torch.nn.Linear(4, 2)
        self.unused = torch.nn.Linear(2, 2)
        self.a.bias.requires_grad_(False)

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


def _groups_of(net):
    return [{"params": [net.a.weight, net.a.bias, net.unused.weight]},
            {"params": [net.b.weight, net.b.bias, net.unused.bias], "lr": 0.05 * (R + 1)}]


def _state_summary(opt):
    sd = opt.state_dict()
    state = {k: {n: (v.tolist() if torch.is_tensor(v) else v) for n, v in s.items()}
             for k, s in sd["state"].items()}
    return state, [{k: v for k, v in g.items() if k != "params"} for g in sd["param_groups"]]


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.SGD(ps, lr=0.1),  # torch 1.13: momentum_buffer None in state
    lambda ps: torch.optim.Adam(ps, lr=0.01 * (R + 1)),
], ids=["sgd-momentum", "sgd", "adam"])
@pytest.mark.parametrize("stepped_on", ["root", "all", "none"])
def test_broadcast_optimizer_state_with_gradient_less_parameters(make, stepped_on):
    net = Net()
    opt = make(_groups_of(net))
    if stepped_on == "all" or (stepped_on == "root" and R == 0):
        net(torch.randn(2, 3) * (R + 1)).sum().backward()  # unused: grad None
        opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    summaries = hvd.allgather_object(_state_summary(opt))
    assert all(s == summaries[0] for s in summaries)


def test_broadcast_optimizer_state_of_a_distributed_optimizer():
    net = Net()
    opt = hvd.DistributedOptimizer(torch.optim.Adam(_groups_of(net), lr=0.01 * (R + 1)))
    net(torch.randn(2, 3)).sum().backward()
    opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=N - 1)
    summaries = hvd.allgather_object(_state_summary(opt))
    assert all(s == summaries[0] for s in summaries)


def test_distributed_optimizer_without_named_parameters():
    net = Net()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(_groups_of(net), lr=0.0))
    names = sorted(opt._parameter_names.values())
    assert names == ["allreduce.noname.%d.%d" % (i, j) for i in range(2) for j in range(3)]
    net(torch.ones(1, 3) * (R + 1)).sum().backward()
    opt.step()
    gathered = hvd.allgather(net.b.weight.grad.unsqueeze(0))
    assert all(torch.equal(gathered[0], gathered[r]) for r in range(N))
    assert torch.equal(net.unused.weight.grad, torch.zeros(2, 2))  # reduced as zeros
    with pytest.raises(TypeError, match="call it"):
        hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                 named_parameters=net.named_parameters)


def _linear_grads_after(opt_kwargs, passes=1):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters(), **opt_kwargs)
    for _ in range(passes):
        model(torch.ones(2, 3) * (R + 1)).sum().backward()
    opt.step()
    return model, opt, [p.grad.clone() for p in model.parameters()]


def test_distributed_optimizer_groups_give_the_same_gradients():
    _, _, plain = _linear_grads_after({})
    model, _, by_int = _linear_grads_after({"groups": 2})
    assert all(torch.allclose(a, b) for a, b in zip(plain, by_int))
    torch.manual_seed(0)
    with pytest.warns(DeprecationWarning, match="num_groups"):
        _, _, by_num = _linear_grads_after({"num_groups": 3})
    assert all(torch.allclose(a, b) for a, b in zip(plain, by_num))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters(),
                                   groups=[[model[0].weight, model[1].weight]])
    model(torch.ones(2, 3) * (R + 1)).sum().backward()
    opt.step()
    assert all(torch.allclose(p.grad, q) for p, q in zip(model.parameters(), plain))
    w = model[0].weight
    with pytest.raises(ValueError, match="only appear once"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), groups=[[w, w]])
    # The deprecated num_groups stands for groups only where groups is not given.
    with pytest.warns(DeprecationWarning, match="num_groups"):
        with pytest.raises(ValueError, match="only appear once"):
            hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                     num_groups=2, groups=[[w, w]])
    with pytest.raises(ValueError, match="non-negative integer or a list"):
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), groups=-1)


def test_set_backward_passes_per_step_and_load_state_dict():
    _, _, once = _linear_grads_after({})
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 1))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters())
    opt.set_backward_passes_per_step(2)
    assert opt.backward_passes_per_step == 2
    model(torch.ones(2, 3) * (R + 1)).sum().backward()
    with pytest.raises(AssertionError, match="zero_grad\\(\\) was called after"):
        opt.zero_grad()  # as Horovod: an accumulation is under way
    opt.load_state_dict(opt.state_dict())  # forgets it (Horovod's load_state_dict)
    opt.zero_grad()
    for _ in range(2):
        model(torch.ones(2, 3) * (R + 1)).sum().backward()
    opt.step()
    assert all(torch.allclose(p.grad, 2 * q) for p, q in zip(model.parameters(), once))


def test_step_after_synchronize_warns_as_horovod_and_reduces_once():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=model.named_parameters(), op=hvd.Sum)
    model(torch.ones(1, 3)).sum().backward()
    opt.synchronize()
    with pytest.warns(UserWarning, match="optimizer.step\\(\\) called without "
                                         "optimizer.skip_synchronize\\(\\) context after "
                                         "optimizer.synchronize\\(\\)"):
        opt.step()
    assert torch.equal(model.bias.grad, torch.full((1,), float(N)))  # not reduced twice
    opt.zero_grad()
    model(torch.ones(1, 3)).sum().backward()
    opt.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with opt.skip_synchronize():
            opt.step()
        opt.zero_grad()
        model(torch.ones(1, 3)).sum().backward()
        opt.step()


def _embedding_rows(r):
    return torch.tensor([r % 4, (r + 1) % 4, 2])  # row 2 on every rank, twice on rank 1


def _dense_embedding_grad(r):
    g = torch.zeros(4, 3)
    for i in _embedding_rows(r).tolist():
        g[i] += (r + 1)
    return g


@pytest.mark.parametrize("sparse_as_dense", [False, True])
@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_sparse_gradients_through_distributed_optimizer(sparse_as_dense, op):
    op = getattr(hvd, op)
    emb = torch.nn.Embedding(4, 3, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                   named_parameters=emb.named_parameters(), op=op,
                                   sparse_as_dense=sparse_as_dense)
    before = emb.weight.detach().clone()
    (emb(_embedding_rows(R)) * (R + 1)).sum().backward()
    opt.step()
    want = sum(_dense_embedding_grad(r) for r in range(N)) / (N if op == hvd.Average else 1)
    assert emb.weight.grad.is_sparse
    assert torch.allclose(emb.weight.grad.to_dense(), want)
    assert torch.allclose(emb.weight.detach(), before - want)


def test_sparse_gradient_missing_on_some_ranks_after_the_first_step():
    emb = torch.nn.Embedding(4, 3, sparse=True)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(emb.parameters(), lr=1.0),
                                   named_parameters=emb.named_parameters(), op=hvd.Sum)
    for step in range(2):
        opt.zero_grad(set_to_none=True)
        if step == 0 or R == 0:  # then only rank 0 has a gradient
            (emb(_embedding_rows(R)) * (R + 1)).sum().backward()
        opt.step()
    assert emb.weight.grad.is_sparse
    assert torch.allclose(emb.weight.grad.to_dense(), _dense_embedding_grad(0))


def test_sparse_allreduce_async_returns_a_callable():
    t = _dense_embedding_grad(R).to_sparse()
    handle = hvd.sparse_allreduce_async(t, "compat.sparse", hvd.Average)
    assert callable(handle)
    out = handle()
    assert out.is_sparse and not out.is_coalesced() and out.shape == t.shape
    assert torch.allclose(out.to_dense(), sum(_dense_embedding_grad(r) for r in range(N)) / N)
    out = hvd.synchronize(hvd.sparse_allreduce_async(t, None, hvd.Sum))  # kolo: callable too
    assert torch.allclose(out.to_dense(), sum(_dense_embedding_grad(r) for r in range(N)))
    with pytest.raises(ValueError, match="sparse"):
        hvd.allreduce(t)


def test_broadcast_parameters_forms():
    def fresh():
        return torch.full((2,), float(R))
    d = {"b": fresh(), "a": fresh()}
    hvd.broadcast_parameters(d, root_rank=N - 1)
    assert all(torch.equal(v, torch.full((2,), N - 1.0)) for v in d.values())
    plain, named = [fresh(), fresh()], [("x", fresh())]
    hvd.broadcast_parameters(plain, root_rank=0)
    hvd.broadcast_parameters(named, root_rank=0)
    assert all(torch.equal(t, torch.zeros(2)) for t in plain + [named[0][1]])
    model = torch.nn.Linear(2, 2)
    torch.nn.init.constant_(model.weight, float(R))
    hvd.broadcast_parameters(model.named_parameters(), root_rank=0)  # kolo: iterables too
    assert torch.equal(model.weight, torch.zeros(2, 2))
    with pytest.raises(ValueError, match="invalid params of type"):
        hvd.broadcast_parameters(torch.ones(2), root_rank=0)


def test_broadcast_and_allgather_objects():
    obj = {"rank": R, "list": [R] * 3}
    got = hvd.broadcast_object(obj, root_rank=N - 1)
    assert got == {"rank": N - 1, "list": [N - 1] * 3}
    if R == N - 1:
        assert got is obj  # the root keeps its own object
    assert hvd.broadcast_object("x" * R) == ""  # root_rank defaults to 0
    assert hvd.allgather_object((R, "r%d" % R)) == [(r, "r%d" % r) for r in range(N)]


def test_objects_of_different_types_on_different_ranks_without_names():
    # The common pattern: only the root has the object, the others pass None. (Named by
    # type, as in Horovod, the ranks' requests would never pair and the job would hang.)
    state = {"epoch": 3} if R == 0 else None
    assert hvd.broadcast_object(state) == {"epoch": 3}
    assert hvd.allgather_object("r0" if R == 0 else R) == ["r0"] + list(range(1, N))


class Point:
    """A user's class: broadcast_object takes any picklable object, as Horovod's."""

    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, Point) and other.x == self.x


def test_broadcast_object_takes_any_picklable_object():
    import numpy as np
    got = hvd.broadcast_object([Point(R), np.arange(3) * R, {R, -1}], root_rank=N - 1)
    assert got[0] == Point(N - 1)
    assert np.array_equal(got[1], np.arange(3) * (N - 1)) and got[2] == {N - 1, -1}


def test_objects_pickle_with_cloudpickle_where_it_is_installed():
    # As Horovod's torch binding: lambdas and classes defined in a function arrive whole.
    object_checks.with_cloudpickle(hvd.broadcast_object, hvd.allgather_object, R, N)


def test_objects_pickle_with_pickle_without_cloudpickle(monkeypatch):
    object_checks.without_cloudpickle(hvd.broadcast_object, hvd.allgather_object, R, N,
                                      monkeypatch)


def test_sync_batch_norm_signature():
    bn = hvd.SyncBatchNorm(3, eps=1e-3, momentum=0.2, affine=False, track_running_stats=True)
    assert isinstance(bn, torch.nn.modules.batchnorm._BatchNorm)
    assert bn.eps == 1e-3 and bn.momentum == 0.2 and not bn.affine


def test_unsupported_dtype_is_a_value_error_as_in_horovod():
    for fn in (hvd.allreduce, hvd.allgather, lambda t: hvd.broadcast(t, 0)):
        with pytest.raises(ValueError, match="does not support"):
            fn(torch.ones(2, dtype=torch.complex64))


def test_a_name_stays_taken_until_synchronized_and_is_free_after_release():
    # However fast the first one completed, a second start of the same collective under
    # its name is refused until the first is synchronized (Horovod: until it completes,
    # so whether the second call fails depends on timing).
    from kolo.torch import mpi_ops
    t = torch.ones(3)
    h = hvd.allreduce_async(t, name="held")
    while not hvd.poll(h):
        pass
    with pytest.raises(ValueError, match="handle has not been synchronized yet"):
        hvd.allreduce_async(t, name="held")
    assert hvd.allgather(t, name="held").shape == (3 * N,)  # another collective may use it
    mpi_ops._release(h)  # abandoned: free once it completes
    assert torch.equal(hvd.synchronize(hvd.allreduce_async(t, name="held", op=hvd.Sum)),
                       torch.full((3,), float(N)))


def test_a_step_that_fails_leaves_no_gradient_name_taken():
    # One parameter's reduction fails on every rank (its dtype differs between ranks); the
    # others' handles are abandoned with the step, and the next step must still run.
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.ones(4)) for _ in range(3)]
    if R == 1:
        params[1] = torch.nn.Parameter(torch.ones(4, dtype=torch.float64))
    named = [("p%d" % i, p) for i, p in enumerate(params)]
    opt = hvd.DistributedOptimizer(torch.optim.SGD(params, lr=0.1), named_parameters=named)
    sum(p.float().sum() for p in params).backward()
    with pytest.raises(hvd.HorovodInternalError, match="Mismatched data types"):
        opt.step()
    params[1].data = params[1].data.float()
    params[1].grad = None
    opt.zero_grad()
    sum(p.sum() for p in params).backward()
    opt.step()
    assert all(torch.allclose(p, torch.full((4,), 0.9)) for p in params)
