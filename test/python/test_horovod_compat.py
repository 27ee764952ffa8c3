"""kolo.torch against Horovod 0.28's documented torch API, name by name (the rows of
docs/moving-from-horovod.md): signatures, values, shapes, dtypes, return types, autograd
gradients by Horovod's backward rules, the collectives' values, and errors
(autograd, process sets and the optimizer: test_horovod_compat_training.py).

Runs under kolorun at np=2 and np=3; every rank runs the same tests in the same order.
The process-set tests use the set SUB: [0, 1] at np >= 3, [1] at np=2 (at np=2, [0, 1] is
the global set, which Horovod refuses to add twice), so both sizes have members and a
rank outside the set.
"""
import inspect
import signal

import pytest
import torch

import kolo.torch as hvd
from kolo import _core
from kolo.torch import mpi_ops

from compat_common import F64, N, R, SUB, reducescatter_rows


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
    "broadcast_optimizer_state": "optimizer, root_rank, model=None",
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


def test_reduce_ops_are_horovods_codes():
    # Horovod's ReduceOp: Average 0, Sum 1, Adasum 2, Min 3, Max 4, Product 5; an integer
    # means Horovod's op (test/python/test_torch_adasum.py runs Adasum itself).
    ops = [hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product]
    assert ops == [0, 1, 2, 3, 4, 5] and all(type(op) is int for op in ops)
    x = torch.arange(4.0) + R
    assert torch.equal(hvd.allreduce(x, op=3, name="compat.op3"),
                       hvd.allreduce(x, op=hvd.Min, name="compat.min"))
    assert torch.equal(hvd.allreduce(x, op=5, name="compat.op5"),
                       hvd.allreduce(x, op=hvd.Product, name="compat.prod"))
    with pytest.raises(ValueError, match="op must be one of"):
        hvd.allreduce(x, op=6)


def test_average_parameter_is_deprecated_and_exclusive_with_op():
    x = torch.full((2,), float(R + 1))
    with pytest.warns(DeprecationWarning, match="`average` has been replaced with `op`"):
        out = hvd.allreduce(x, average=False, name="compat.avg")
    assert torch.equal(out, torch.full((2,), N * (N + 1) / 2.0))
    with pytest.raises(ValueError, match="The op parameter supersedes average"):
        hvd.allreduce(x, average=True, op=hvd.Sum)


def test_elastic_has_horovods_names_and_commits():
    """horovod.torch.elastic's names; TorchState with a model, an optimizer, an
    ElasticSampler and an object synced from rank 0, committed and restored (the elastic
    suite is test/elastic)."""
    assert set(hvd.elastic.__all__) == {"TorchState", "ElasticSampler", "run"}
    from kolo.common.elastic import ObjectState, State, run_fn  # noqa: F401
    from kolo.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
    assert HorovodInternalError is hvd.HorovodInternalError
    assert HostsUpdatedInterrupt(True).skip_sync is True
    model = torch.nn.Linear(3, 2).double()
    with torch.no_grad():
        model.weight.fill_(R + 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sampler = hvd.elastic.ElasticSampler(list(range(10)))
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=R)
    state.sync()
    assert torch.equal(model.weight, torch.ones(2, 3, dtype=F64)) and state.epoch == 0
    sampler.record_batch(0, 2)
    state.epoch = 1
    state.commit()
    with torch.no_grad():
        model.weight.add_(1)
    sampler.set_epoch(5)
    state.epoch = 2
    state.restore()
    assert torch.equal(model.weight, torch.ones(2, 3, dtype=F64)) and state.epoch == 1
    assert sampler.epoch == 0 and sampler.processed_num == min(2 * N, 10)

    @hvd.elastic.run
    def train(state):
        return state.epoch
    assert train(state) == 1


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
    for op in (hvd.Max, hvd.Adasum):  # Horovod: HorovodInternalError; kolo's also a ValueError
        with pytest.raises(hvd.HorovodInternalError, match="only supports AVERAGE and SUM"):
            hvd.reducescatter(x, op=op)
        with pytest.raises(ValueError, match="only supports AVERAGE and SUM"):
            hvd.reducescatter(x, op=op)


def test_join_returns_the_last_rank_to_join_on_every_rank():
    for last in range(N):
        if R == last:
            # Joined ranks contribute zeros, so this allreduce completes only once every
            # other rank is inside join(): rank `last` joins last by construction.
            alone = hvd.allreduce(torch.ones(1), op=hvd.Sum, name="compat.join.last%d" % last)
            assert alone.tolist() == [1.0]
        got = hvd.join(device=-1)
        assert type(got) is int
        assert hvd.allgather(torch.tensor([got])).tolist() == [last] * N


def test_join_accepts_any_device_and_refuses_what_is_not_one_before_joining():
    # A CUDA device needs no GPU: kolo's zeros follow each allreduce's device, and Horovod's
    # tests call join(hvd.local_rank()) on machines without one.
    for device in (-1, "cpu", torch.device("cpu"), 0, R, "cuda:99"):
        assert type(hvd.join(device=device)) is int
    # Refused on every rank before it joins, so no rank is left waiting in a join.
    with pytest.raises(ValueError, match=r"join\(device=-2\): device must be -1"):
        hvd.join(device=-2)
    with pytest.raises(ValueError, match=r"join\(device='tpu'\): not a device"):
        hvd.join(device="tpu")
    with pytest.raises(TypeError, match="device must be"):
        hvd.join(device=1.5)
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


def test_a_blocking_call_that_an_alarm_interrupts_still_completes():
    # A blocking call starts and waits in one call into the core; an alarm handler that
    # raises inside it leaves the operation to complete without a waiter: the tensor gets
    # its result, and the name is free again afterwards.
    class Alarm(Exception):
        pass

    def handler(*args):
        raise Alarm()
    x = torch.full((2,), float(R))
    want = torch.full((2,), N * (N - 1) / 2.0)
    if R != 0:
        assert hvd.broadcast_object(None, root_rank=0, name="compat.alarm_.go") == "go"
        assert torch.equal(hvd.allreduce_(x, name="compat.alarm_", op=hvd.Sum), want)
    else:
        old = signal.signal(signal.SIGALRM, handler)
        try:
            signal.setitimer(signal.ITIMER_REAL, 0.2)
            with pytest.raises(Alarm):  # the partners wait for rank 0: only the alarm ends it
                hvd.allreduce_(x, name="compat.alarm_", op=hvd.Sum)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
            hvd.broadcast_object("go", root_rank=0, name="compat.alarm_.go")
    # Every rank runs the responses in one order: past the barrier, rank 0's interrupted
    # allreduce has completed too.
    hvd.barrier()
    assert torch.equal(x, want), x
    y = torch.ones(1)
    assert hvd.allreduce_(y, name="compat.alarm_", op=hvd.Sum).tolist() == [float(N)]


def test_synchronize_keeps_the_handle_when_an_alarm_fires():
    # Real: rank 0 waits for partners that come only after its alarm fired (they wait for
    # its go-ahead, a broadcast it sends afterwards); an alarm handler raises.
    class Alarm(Exception):
        pass

    def handler(*args):
        raise Alarm()
    x = torch.full((2,), float(R))
    if R != 0:
        assert hvd.broadcast_object(None, root_rank=0, name="compat.alarm.go") == "go"
        assert torch.equal(hvd.allreduce(x, name="compat.alarm", op=hvd.Sum),
                           torch.full((2,), N * (N - 1) / 2.0))
        return
    h = hvd.allreduce_async(x, name="compat.alarm", op=hvd.Sum)
    old = signal.signal(signal.SIGALRM, handler)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        with pytest.raises(Alarm):  # the partners wait for rank 0: only the alarm ends it
            hvd.synchronize(h)
        assert not hvd.poll(h), "the allreduce completed without its partners"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        hvd.broadcast_object("go", root_rank=0, name="compat.alarm.go")
    assert torch.equal(hvd.synchronize(h), torch.full((2,), N * (N - 1) / 2.0))
