"""kolo.torch against Horovod 0.28's documented torch API, name by name (the rows of
docs/moving-from-horovod.md): signatures, values, shapes, dtypes, return types, autograd
gradients by Horovod's backward rules, process-set variants, optimizer behaviour.

Runs under kolorun at np=2 and np=3; every rank runs the same tests in the same order.
The process-set tests use the set SUB: [0, 1] at np >= 3, [1] at np=2 (at np=2, [0, 1] is
the global set, which Horovod refuses to add twice), so both sizes have members and a
rank outside the set.
"""
import inspect
import signal
import time
import warnings

import pytest
import torch

import kolo.torch as hvd
from kolo import _core
from kolo.torch import mpi_ops

hvd.init()
R, N = hvd.rank(), hvd.size()
SUB = [0, 1] if N > 2 else [1]
F64 = torch.float64


def up(r, shape, i=0):
    """The upstream gradient rank r feeds into output i (deterministic, so every rank can
    compute every rank's)."""
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=F64).reshape(shape) % 5 + 1) * (r + 1) + i


def mean_up(ranks, shape, i=0):
    return sum(up(k, shape, i) for k in ranks) / len(ranks)


def grads(outputs, inputs):
    """d/d inputs of sum_i (output_i * up(R, output_i.shape, i))."""
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    loss = sum((o * up(R, o.shape, i)).sum() for i, o in enumerate(outputs))
    return torch.autograd.grad(loss, inputs)


def leaf(*shape, scale=1.0):
    g = torch.Generator().manual_seed(17 + R)
    return (torch.rand(*shape, generator=g, dtype=F64) * scale).requires_grad_()


def reducescatter_rows(rows, r, n):
    return rows // n + (1 if r < rows % n else 0)


@pytest.fixture(scope="module")
def ps():
    s = hvd.add_process_set(SUB)
    yield s
    assert hvd.remove_process_set(s) is True


# --- names, signatures, build queries --------------------------------------------------

HOROVOD_NAMES = """
elastic Compression allgather_object broadcast_object broadcast_optimizer_state
broadcast_parameters allreduce allreduce_async allreduce_ allreduce_async_ grouped_allreduce
grouped_allreduce_async grouped_allreduce_ grouped_allreduce_async_ sparse_allreduce_async
allgather allgather_async grouped_allgather grouped_allgather_async broadcast broadcast_async
broadcast_ broadcast_async_ alltoall alltoall_async reducescatter reducescatter_async
grouped_reducescatter grouped_reducescatter_async join barrier poll synchronize init shutdown
is_initialized start_timeline stop_timeline size local_size cross_size rank local_rank
cross_rank mpi_threads_supported mpi_enabled mpi_built gloo_enabled gloo_built nccl_built
ddl_built ccl_built cuda_built rocm_built ProcessSet global_process_set add_process_set
remove_process_set Average Sum Adasum Min Max Product HorovodInternalError
DistributedOptimizer SyncBatchNorm _check_has_gpu
""".split()


def test_every_public_name_of_horovod_torch_exists():
    missing = [n for n in HOROVOD_NAMES if not hasattr(hvd, n)]
    assert not missing
    assert hasattr(mpi_ops, "is_homogeneous")  # horovod.torch.mpi_ops has it, too
    assert hvd.HorovodInternalError is hvd.KoloInternalError
    assert issubclass(hvd.HorovodInternalError, RuntimeError)


_GPS = "process_set=global_process_set"
_SCALE = "prescale_factor=1.0, postscale_factor=1.0"
HOROVOD_SIGNATURES = {
    "allreduce": "tensor, average=None, name=None, compression=Compression.none, op=None, "
                 + _SCALE + ", " + _GPS,
    "allreduce_async": "tensor, average=None, name=None, op=None, " + _SCALE + ", " + _GPS,
    "allreduce_": "tensor, average=None, name=None, op=None, " + _SCALE + ", " + _GPS,
    "allreduce_async_": "tensor, average=None, name=None, op=None, " + _SCALE + ", " + _GPS,
    "grouped_allreduce": "tensors, average=None, name=None, compression=Compression.none, "
                         "op=None, " + _SCALE + ", " + _GPS,
    "grouped_allreduce_async": "tensors, average=None, name=None, op=None, " + _SCALE + ", "
                               + _GPS,
    "grouped_allreduce_": "tensors, average=None, name=None, op=None, " + _SCALE + ", " + _GPS,
    "grouped_allreduce_async_": "tensors, average=None, name=None, op=None, " + _SCALE + ", "
                                + _GPS,
    "sparse_allreduce_async": "tensor, name, op, " + _GPS,
    "allgather": "tensor, name=None, " + _GPS,
    "allgather_async": "tensor, name=None, " + _GPS,
    "grouped_allgather": "tensors, name=None, " + _GPS,
    "grouped_allgather_async": "tensors, name=None, " + _GPS,
    "broadcast": "tensor, root_rank, name=None, " + _GPS,
    "broadcast_async": "tensor, root_rank, name=None, " + _GPS,
    "broadcast_": "tensor, root_rank, name=None, " + _GPS,
    "broadcast_async_": "tensor, root_rank, name=None, " + _GPS,
    "alltoall": "tensor, splits=None, name=None, " + _GPS,
    "alltoall_async": "tensor, splits=None, name=None, " + _GPS,
    "reducescatter": "tensor, name=None, compression=Compression.none, op=Average, " + _GPS
                     + ", " + _SCALE,
    "reducescatter_async": "tensor, name=None, op=Average, " + _GPS + ", " + _SCALE,
    "grouped_reducescatter": "tensors, name=None, compression=Compression.none, op=Average, "
                             + _GPS + ", " + _SCALE,
    "grouped_reducescatter_async": "tensors, name=None, op=Average, " + _GPS + ", " + _SCALE,
    "join": "device=-1",
    "barrier": _GPS,
    "poll": "handle",
    "synchronize": "handle",
    "init": "comm=None, process_sets=None",
    "start_timeline": "file_path, mark_cycles=False",
    "broadcast_parameters": "params, root_rank",
    "broadcast_optimizer_state": "optimizer, root_rank",
    "broadcast_object": "obj, root_rank=0, name=None, " + _GPS,
    "add_process_set": "process_set",
    "remove_process_set": "process_set",
    "DistributedOptimizer": "optimizer, named_parameters=None, compression=Compression.none, "
                            "backward_passes_per_step=1, op=Average, "
                            "gradient_predivide_factor=1.0, num_groups=0, groups=None, "
                            "sparse_as_dense=False, " + _GPS,
}


def _render(fn):
    parts = []
    for p in inspect.signature(fn).parameters.values():
        if p.default is inspect.Parameter.empty:
            parts.append(p.name)
        elif p.default is hvd.Compression.none:
            parts.append(p.name + "=Compression.none")
        elif p.default is hvd.global_process_set:
            parts.append(p.name + "=global_process_set")
        elif p.name == "op" and p.default is not None:
            parts.append(p.name + "=" + {hvd.Average: "Average", hvd.Sum: "Sum"}[p.default])
        else:
            parts.append("%s=%r" % (p.name, p.default))
    return ", ".join(parts)


@pytest.mark.parametrize("name", sorted(HOROVOD_SIGNATURES))
def test_signature_is_horovods(name):
    assert _render(getattr(hvd, name)) == HOROVOD_SIGNATURES[name]


def test_build_and_runtime_queries_have_horovods_types():
    for name in ("mpi_built", "mpi_enabled", "gloo_built", "gloo_enabled", "ddl_built",
                 "ccl_built", "cuda_built", "rocm_built", "is_initialized",
                 "mpi_threads_supported", "_check_has_gpu"):
        assert type(getattr(hvd, name)()) is bool, name
    assert hvd.mpi_built() and hvd.mpi_enabled() and hvd.is_initialized()
    assert not (hvd.gloo_built() or hvd.gloo_enabled() or hvd.ddl_built() or hvd.ccl_built()
                or hvd.rocm_built())
    nccl = hvd.nccl_built()
    assert type(nccl) is int and nccl >= 0  # NCCL_VERSION_CODE or 0
    assert (nccl > 0) == hvd.cuda_built()
    assert type(mpi_ops.is_homogeneous()) is bool
    for name in ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size"):
        assert type(getattr(hvd, name)()) is int, name
    assert 0 <= R < N and 0 <= hvd.local_rank() < hvd.local_size()
    assert hvd.init() is None  # idempotent; returns None as Horovod's
    hvd.init(process_sets="dynamic")


def test_reduce_ops_and_adasum():
    ops = [hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product]
    assert all(type(op) is int for op in ops) and len(set(ops)) == 6
    x = torch.ones(2)
    for call in (lambda: hvd.allreduce(x, op=hvd.Adasum),
                 lambda: hvd.grouped_allreduce([x], op=hvd.Adasum),
                 lambda: hvd.DistributedOptimizer(torch.optim.SGD([torch.nn.Parameter(x)],
                                                                  lr=1.0), op=hvd.Adasum)):
        with pytest.raises(NotImplementedError, match="Adasum is not supported.*Average"):
            call()


def test_average_parameter_is_deprecated_and_exclusive_with_op():
    x = torch.full((2,), float(R + 1))
    with pytest.warns(DeprecationWarning, match="`average` has been replaced with `op`"):
        out = hvd.allreduce(x, average=False, name="compat.avg")
    assert torch.equal(out, torch.full((2,), N * (N + 1) / 2.0))
    with pytest.raises(ValueError, match="The op parameter supersedes average"):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_elastic_is_a_clear_not_implemented_error():
    assert set(hvd.elastic.__all__) == {"TorchState", "ElasticSampler", "run"}
    with pytest.raises(NotImplementedError, match="kolorun.*checkpoint"):
        hvd.elastic.run(lambda state: None)
    with pytest.raises(NotImplementedError, match="elastic"):
        hvd.elastic.TorchState(model=None)
    with pytest.raises(NotImplementedError, match="elastic"):
        hvd.elastic.ElasticSampler([])
    with pytest.raises(NotImplementedError):
        hvd.elastic.ObjectState  # noqa: B018


def test_compression():
    x = torch.ones(3, dtype=F64)
    c, ctx = hvd.Compression.fp16.compress(x)
    assert c.dtype == torch.float16 and hvd.Compression.fp16.decompress(c, ctx).dtype == F64
    i = torch.ones(3, dtype=torch.int32)
    assert hvd.Compression.fp16.compress(i)[0] is i
    assert hvd.Compression.none.compress(x) == (x, None)


# --- values, shapes, dtypes, return types ----------------------------------------------

def test_allreduce_family():
    x = torch.full((2, 3), float(R + 1))
    total = N * (N + 1) / 2.0
    out = hvd.allreduce(x, None, "compat.ar.pos", hvd.Compression.fp16, hvd.Sum)  # positional
    assert out.dtype == torch.float32 and torch.equal(out, torch.full((2, 3), total))
    assert torch.allclose(hvd.allreduce(x), torch.full((2, 3), total / N))  # Average default
    h = hvd.allreduce_async(x, op=hvd.Max)
    assert type(h) is int
    assert torch.equal(hvd.synchronize(h), torch.full((2, 3), float(N)))
    y = x.clone()
    assert hvd.allreduce_(y, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5) is y
    assert torch.equal(y, torch.full((2, 3), total))
    y = x.clone()
    assert hvd.synchronize(hvd.allreduce_async_(y, op=hvd.Min)) is y
    assert torch.equal(y, torch.ones(2, 3))
    assert torch.equal(x, torch.full((2, 3), float(R + 1)))  # untouched


def test_grouped_allreduce_family():
    a, b = torch.full((3,), float(R + 1)), torch.full((2, 2), 1.0, dtype=F64)
    total = N * (N + 1) / 2.0
    out = hvd.grouped_allreduce([a, b], None, "compat.gar", hvd.Compression.none, hvd.Sum)
    assert type(out) is list and torch.equal(out[0], torch.full((3,), total))
    assert out[1].dtype == F64 and torch.equal(out[1], torch.full((2, 2), float(N)))
    res = hvd.synchronize(hvd.grouped_allreduce_async([a, b], op=hvd.Sum))
    assert type(res) is tuple and res[0] is not a and torch.equal(res[0], out[0])
    a2, b2 = a.clone(), b.clone()
    res = hvd.grouped_allreduce_([a2, b2], op=hvd.Sum)
    assert type(res) is tuple and res[0] is a2 and res[1] is b2
    assert torch.equal(a2, out[0]) and torch.equal(b2, out[1])
    a3 = a.clone()
    res = hvd.synchronize(hvd.grouped_allreduce_async_([a3]))
    assert res == (a3,) and torch.allclose(a3, torch.full((3,), total / N))
    assert torch.equal(a, torch.full((3,), float(R + 1)))


def test_allgather_family():
    x = torch.full((R + 1, 2), R, dtype=torch.int16)
    want = torch.cat([torch.full((r + 1, 2), r, dtype=torch.int16) for r in range(N)])
    out = hvd.allgather(x, "compat.ag")
    assert out.dtype == torch.int16 and torch.equal(out, want)
    assert torch.equal(hvd.synchronize(hvd.allgather_async(x)), want)
    y = torch.full((1, 3), float(R))
    res = hvd.grouped_allgather([x, y], name="compat.gag")
    assert type(res) is tuple and torch.equal(res[0], want)
    assert torch.equal(res[1], torch.arange(float(N)).unsqueeze(1).expand(N, 3))
    h = hvd.grouped_allgather_async([y, x])
    assert hvd.poll(h) in (True, False)
    res = hvd.synchronize(h)
    assert type(res) is tuple and torch.equal(res[1], want)


def test_grouped_allgather_fails_as_a_whole():
    # Horovod negotiates a group as one unit: one disagreeing member fails all, everywhere.
    bad = torch.ones(1, 2 + (R == 0))
    with pytest.raises(hvd.HorovodInternalError, match="Group 'compat.gag.bad' failed"):
        hvd.grouped_allgather([torch.ones(1, 2), bad], name="compat.gag.bad")


def test_broadcast_family():
    root = N - 1
    x = torch.arange(4, dtype=torch.int64) * (R + 1)
    want = torch.arange(4, dtype=torch.int64) * (root + 1)
    assert torch.equal(hvd.broadcast(x, root, "compat.bc"), want)
    assert torch.equal(hvd.synchronize(hvd.broadcast_async(x, root)), want)
    assert torch.equal(x, torch.arange(4) * (R + 1))
    y = x.clone()
    assert hvd.broadcast_(y, root) is y and torch.equal(y, want)
    y = x.clone()
    assert hvd.synchronize(hvd.broadcast_async_(y, root)) is y and torch.equal(y, want)


def test_alltoall_family():
    splits = [(R + j) % 2 + 1 for j in range(N)]
    x = torch.cat([torch.full((s, 2), float(10 * R + j)) for j, s in enumerate(splits)])
    out, received = hvd.alltoall(x, splits, "compat.a2a")
    assert received.dtype == torch.int32 and received.tolist() == [(s + R) % 2 + 1
                                                                    for s in range(N)]
    want = torch.cat([torch.full(((s + R) % 2 + 1, 2), float(10 * s + R)) for s in range(N)])
    assert torch.equal(out, want)
    out2, received2 = hvd.alltoall(x, torch.tensor(splits, dtype=torch.int32))
    assert torch.equal(out2, want) and torch.equal(received2, received)
    even = torch.arange(float(N)) + 100 * R
    res = hvd.alltoall(even)  # no splits: the output alone
    assert isinstance(res, torch.Tensor)
    assert torch.equal(res, torch.tensor([100.0 * s + R for s in range(N)]))
    res = hvd.synchronize(hvd.alltoall_async(even))  # the async form: always a pair
    assert type(res) is tuple and res[1].tolist() == [1] * N


def test_reducescatter_family():
    rows = 2 * N + 1
    x = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) * (R + 1)
    total = torch.arange(rows * 2, dtype=torch.float32).reshape(rows, 2) * (N * (N + 1) / 2)
    mine = reducescatter_rows(rows, R, N)
    start = sum(reducescatter_rows(rows, r, N) for r in range(R))
    out = hvd.reducescatter(x, "compat.rs", hvd.Compression.none, hvd.Sum)  # positional
    assert out.shape == (mine, 2) and torch.equal(out, total[start:start + mine])
    avg = hvd.reducescatter(x)  # Average is the default
    assert torch.allclose(avg, total[start:start + mine] / N)
    scaled = hvd.synchronize(hvd.reducescatter_async(x, None, hvd.Sum, hvd.global_process_set,
                                                     2.0, 0.5))
    assert torch.equal(scaled, out)
    res = hvd.grouped_reducescatter([x, x[:N]], op=hvd.Sum)
    assert type(res) is list and torch.equal(res[0], out)
    assert torch.equal(res[1], total[:N][R:R + 1])
    res = hvd.synchronize(hvd.grouped_reducescatter_async([x], op=hvd.Sum))
    assert type(res) is tuple and torch.equal(res[0], out)
    with pytest.raises(ValueError, match="Average and Sum"):
        hvd.reducescatter(x, op=hvd.Max)


def test_join_returns_the_last_rank_to_join_on_every_rank():
    for last in range(N):
        time.sleep(0.3 if R == last else 0.0)
        got = hvd.join(device=-1)
        assert type(got) is int
        assert hvd.allgather(torch.tensor([got])).tolist() == [last] * N


def test_join_accepts_the_cpu_and_checks_a_cuda_device_before_joining():
    for device in (-1, "cpu", torch.device("cpu")):
        assert type(hvd.join(device=device)) is int
    # Refused on every rank before it joins, so no rank is left waiting in a join.
    with pytest.raises(ValueError, match=r"join\(device=-2\): device must be -1"):
        hvd.join(device=-2)
    with pytest.raises(ValueError, match=r"join\(device='cuda:99'\)"):
        hvd.join(device="cuda:99")
    with pytest.raises(ValueError, match=r"join\(device='tpu'\): not a device"):
        hvd.join(device="tpu")
    with pytest.raises(TypeError, match="device must be"):
        hvd.join(device=1.5)
    if _core.gpu_count() == 0:  # this machine (or build) cannot serve CUDA device 0
        with pytest.raises(ValueError, match=r"join\(device=0\): this (kolo build has no GPU "
                                             r"support|process sees 0 CUDA device)"):
            hvd.join(device=0)
    else:
        assert type(hvd.join(device=0)) is int
    assert hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item() == N  # all still in step


def test_barrier_returns_none():
    assert hvd.barrier() is None


def test_errors_are_horovod_internal_errors():
    with pytest.raises(hvd.HorovodInternalError, match="Mismatched allreduce tensor shapes"):
        hvd.allreduce(torch.ones(R + 1), name="compat.mismatch")


def test_synchronize_and_poll_of_unknown_handles():
    assert hvd.synchronize(987654321) is None
    with pytest.raises(ValueError, match="Handle 987654321 was not created or has been "
                                         "cleared"):
        hvd.poll(987654321)


def test_synchronize_keeps_the_handle_when_a_signal_interrupts_the_wait(monkeypatch):
    # Simulated: the first wait raises as a Ctrl-C would.
    real_wait, calls = mpi_ops._core.wait, []

    def interrupted_once(h):
        calls.append(h)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real_wait(h)
    monkeypatch.setattr(mpi_ops._core, "wait", interrupted_once)
    h = hvd.allreduce_async(torch.ones(2), name="compat.interrupt", op=hvd.Sum)
    with pytest.raises(KeyboardInterrupt):
        hvd.synchronize(h)
    assert torch.equal(hvd.synchronize(h), torch.full((2,), float(N)))
    g = hvd.grouped_allgather_async([torch.ones(1), torch.zeros(1)], name="compat.interrupt.g")
    calls.clear()
    with pytest.raises(KeyboardInterrupt):
        hvd.synchronize(g)
    assert [t.tolist() for t in hvd.synchronize(g)] == [[1.0] * N, [0.0] * N]


def test_synchronize_keeps_the_handle_when_an_alarm_fires():
    # Real: rank 0 waits for a partner that comes 1 s later; an alarm handler raises.
    class Alarm(Exception):
        pass

    def handler(*args):
        raise Alarm()
    x = torch.full((2,), float(R))
    if R != 0:
        time.sleep(1.0)
        assert torch.equal(hvd.allreduce(x, name="compat.alarm", op=hvd.Sum),
                           torch.full((2,), N * (N - 1) / 2.0))
        return
    h = hvd.allreduce_async(x, name="compat.alarm", op=hvd.Sum)
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        start = time.monotonic()
        with pytest.raises(Alarm):
            hvd.synchronize(h)
        assert time.monotonic() - start < 0.9
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert torch.equal(hvd.synchronize(h), torch.full((2,), N * (N - 1) / 2.0))


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


def test_sync_batch_norm_signature():
    bn = hvd.SyncBatchNorm(3, eps=1e-3, momentum=0.2, affine=False, track_running_stats=True)
    assert isinstance(bn, torch.nn.modules.batchnorm._BatchNorm)
    assert bn.eps == 1e-3 and bn.momentum == 0.2 and not bn.affine


def test_unsupported_dtype_is_a_value_error_as_in_horovod():
    for fn in (hvd.allreduce, hvd.allgather, lambda t: hvd.broadcast(t, 0)):
        with pytest.raises(ValueError, match="does not support"):
            fn(torch.ones(2, dtype=torch.complex64))
