"""Every torch.distributed collective on backend "kolo", per dtype and reduce op, against
the values computed locally from what every rank contributed."""
import pytest
import torch
import torch.distributed as dist

INT_DTYPES = [torch.uint8, torch.int8, torch.int32, torch.int64]
FLOAT_DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
OPS = {
    "SUM": (dist.ReduceOp.SUM, lambda xs: sum(xs[1:], xs[0].clone())),
    "AVG": (dist.ReduceOp.AVG, lambda xs: sum(xs[1:], xs[0].clone()) / len(xs)),
    "MIN": (dist.ReduceOp.MIN, lambda xs: torch.stack(xs).min(0).values),
    "MAX": (dist.ReduceOp.MAX, lambda xs: torch.stack(xs).max(0).values),
    "PRODUCT": (dist.ReduceOp.PRODUCT, lambda xs: torch.stack(xs).prod(0)),
}


def values(r, dtype, n=6):
    """Rank r's input: small numbers, so that products of 3 ranks fit in int8."""
    return ((torch.arange(n) % 3) + 1 + (r % 2)).to(dtype)


def reference(op, size, dtype):
    xs = [values(r, torch.float64) for r in range(size)]
    return OPS[op][1](xs)


def check(got, want, dtype, what):
    tol = {torch.float16: 1e-2, torch.bfloat16: 2e-2}.get(dtype, 1e-6)
    assert got.dtype == dtype, what
    torch.testing.assert_close(got.double(), want.double(), rtol=tol, atol=tol,
                               msg=lambda m: "rank %d %s: %s" % (dist.get_rank(), what, m))


@pytest.mark.parametrize("dtype", INT_DTYPES + FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_allreduce(rank, size, dtype, op):
    if op == "AVG" and not dtype.is_floating_point:
        return  # AVG of integers is not defined by torch.distributed (gloo refuses it)
    t = values(rank, dtype)
    dist.all_reduce(t, op=OPS[op][0])
    check(t, reference(op, size, dtype).to(dtype), dtype, "all_reduce %s" % op)


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.bfloat16], ids=str)
def test_allreduce_async_future(rank, size, dtype):
    t = values(rank, dtype)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    work.wait()
    assert work.is_completed() and work.is_success()
    want = reference("SUM", size, dtype).to(dtype)
    check(t, want, dtype, "async all_reduce")
    check(fut.wait(), want * 2, dtype, "the future's callback")


def test_allreduce_scalar_and_many(rank, size):
    s = torch.tensor(float(rank))
    dist.all_reduce(s)
    assert s.item() == sum(range(size))
    works = [dist.all_reduce(torch.full((100 + i,), float(rank)), async_op=True)
             for i in range(20)]
    for w in works:
        w.wait()
        assert w.get_future().value()[0][0].item() == sum(range(size))


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.float16, torch.float32,
                                   torch.float64], ids=str)
def test_broadcast(rank, size, dtype):
    for root in range(size):
        t = values(rank, dtype) + rank
        dist.broadcast(t, src=root)
        check(t, values(root, dtype) + root, dtype, "broadcast from %d" % root)


@pytest.mark.parametrize("dtype", [torch.int8, torch.int32, torch.bfloat16, torch.float32],
                         ids=str)
def test_all_gather(rank, size, dtype):
    out = [torch.empty(2, 3, dtype=dtype) for _ in range(size)]
    dist.all_gather(out, values(rank, dtype).view(2, 3))
    for r in range(size):
        check(out[r], values(r, dtype).view(2, 3), dtype, "all_gather part %d" % r)
    flat = torch.empty(size * 6, dtype=dtype)
    dist.all_gather_into_tensor(flat, values(rank, dtype))
    check(flat, torch.cat([values(r, dtype) for r in range(size)]), dtype,
          "all_gather_into_tensor")
    stacked = torch.empty(size, 6, dtype=dtype)
    dist.all_gather_into_tensor(stacked, values(rank, dtype))
    check(stacked, torch.stack([values(r, dtype) for r in range(size)]), dtype,
          "all_gather_into_tensor (stacked)")


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("op", ["SUM", "AVG", "MAX"])
def test_reduce_scatter(rank, size, dtype, op):
    if op == "AVG" and not dtype.is_floating_point:
        return
    full = [values(r, torch.float64, 4 * size) * (1 + torch.arange(4 * size) % 2)
            for r in range(size)]
    want = OPS[op][1](full).view(size, 4)[rank].to(dtype)
    mine = full[rank].to(dtype)
    out = torch.empty(4, dtype=dtype)
    dist.reduce_scatter_tensor(out, mine, op=OPS[op][0])
    check(out, want, dtype, "reduce_scatter_tensor %s" % op)
    assert torch.equal(mine, full[rank].to(dtype)), "the input changed"
    out2 = torch.empty(4, dtype=dtype)
    dist.reduce_scatter(out2, list(mine.view(size, 4).unbind(0)), op=OPS[op][0])
    check(out2, want, dtype, "reduce_scatter %s" % op)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32], ids=str)
def test_all_to_all(rank, size, dtype):
    # Even: row block j goes to rank j.
    inp = (torch.arange(size * 2) + 100 * rank).to(dtype)
    out = torch.empty(size * 2, dtype=dtype)
    dist.all_to_all_single(out, inp)
    want = torch.cat([(torch.arange(size * 2) + 100 * r)[2 * rank:2 * rank + 2]
                      for r in range(size)]).to(dtype)
    check(out, want, dtype, "all_to_all_single")
    # Uneven: rank r sends j + 1 rows to rank j.
    send = [j + 1 for j in range(size)]
    inp = torch.full((sum(send), 2), float(rank)).to(dtype)
    out = torch.empty((size * (rank + 1), 2), dtype=dtype)
    dist.all_to_all_single(out, inp, output_split_sizes=[rank + 1] * size,
                           input_split_sizes=send)
    want = torch.cat([torch.full((rank + 1, 2), float(r)) for r in range(size)]).to(dtype)
    check(out, want, dtype, "all_to_all_single, uneven")
    # The list form: a tensor of rank + j + 1 elements for rank j.
    ins = [torch.full((rank + j + 1,), float(10 * rank + j)).to(dtype) for j in range(size)]
    outs = [torch.empty(r + rank + 1, dtype=dtype) for r in range(size)]
    dist.all_to_all(outs, ins)
    for r in range(size):
        check(outs[r], torch.full((r + rank + 1,), float(10 * r + rank)).to(dtype), dtype,
              "all_to_all from %d" % r)


def test_rooted(rank, size):
    root = size - 1
    t = torch.full((3,), float(rank + 1))
    dist.reduce(t, dst=root, op=dist.ReduceOp.MAX)
    assert t.tolist() == ([float(size)] * 3 if rank == root else [float(rank + 1)] * 3)
    gathered = [torch.empty(2) for _ in range(size)] if rank == root else None
    dist.gather(torch.full((2,), float(rank)), gathered, dst=root)
    if rank == root:
        assert [g.tolist() for g in gathered] == [[float(r)] * 2 for r in range(size)]
    out = torch.empty(2)
    dist.scatter(out, [torch.full((2,), float(10 + r)) for r in range(size)]
                 if rank == root else None, src=root)
    assert out.tolist() == [10.0 + rank] * 2


def test_barrier_and_objects(rank, size):
    dist.barrier()
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": r} for r in range(size)]
    box = [{"from": rank}]
    dist.broadcast_object_list(box, src=0)
    assert box == [{"from": 0}]


def test_unsupported_op_is_refused(rank):
    with pytest.raises(NotImplementedError, match="BAND"):
        dist.all_reduce(torch.ones(1, dtype=torch.int32), op=dist.ReduceOp.BAND)


def test_mismatch_raises_on_every_rank(rank, size):
    # Every rank calls it from the same line, with another shape on rank 1.
    t = torch.ones(3 if rank != 1 else 4)
    with pytest.raises(RuntimeError) as err:
        dist.all_reduce(t)
    text = str(err.value)
    assert "shape" in text and "rank 1" in text, text
    dist.barrier()  # the ranks go on together
    t = torch.ones(2)
    dist.all_reduce(t)
    assert t.tolist() == [float(size)] * 2


def test_sparse_allreduce_sums(rank, size):
    """A sparse COO tensor is summed in place, as with gloo; ranks hold different numbers
    of entries (rank 0 none), and entries that meet add up."""
    n = rank  # rank r holds entries 0..r-1 of dimension 0, each row [r, r]
    t = torch.sparse_coo_tensor(torch.arange(n).view(1, n), torch.full((n, 2), float(rank)),
                                [size, 2])
    dist.all_reduce(t)
    want = torch.zeros(size, 2)
    for r in range(size):
        want[:r] += r
    assert t.is_sparse and torch.equal(t.to_dense(), want), t.to_dense()
    with pytest.raises(NotImplementedError, match="sparse all_reduce sums"):
        dist.all_reduce(t, op=dist.ReduceOp.MAX)


def test_blocking_calls_wait_on_the_calling_thread(rank, size, monkeypatch):
    # async_op=False takes kolo.torch's blocking path: one call into the core starts the
    # operation and waits for it on the caller's thread (which runs kolo's round), with no
    # wait on a handle after it; async_op=True hands the Work to a completion thread, which
    # waits on the handle and completes its future.
    from kolo.common import engine
    import threading
    events = []

    def spied(what, real):
        def call(*args, **kwargs):
            events.append((what, threading.current_thread().name, kwargs.get("waits", False)))
            return real(*args, **kwargs)
        return call
    for what in ("allreduce_async", "allgather_async", "wait"):
        monkeypatch.setattr(engine, what, spied(what, getattr(engine, what)))
    here = threading.current_thread().name
    for i in range(5):
        t = torch.full((3,), float(rank + i))
        dist.all_reduce(t)
        assert t.tolist() == [float(sum(range(size)) + size * i)] * 3
    out = torch.empty(size, dtype=torch.int64)
    dist.all_gather_into_tensor(out, torch.tensor([rank]))
    assert out.tolist() == list(range(size))
    assert events == [("allreduce_async", here, True)] * 5 + [("allgather_async", here, True)], \
        events
    del events[:]
    work = dist.all_reduce(torch.ones(2), async_op=True)
    work.wait()
    assert [e[0] for e in events] == ["allreduce_async", "wait"], events
    assert not events[0][2] and events[1][1].startswith("kolo-c10d"), events


def test_coalesced_blocking_reduce_scatters_write_every_output(rank, size):
    # The coalescing manager hands kolo several reduce_scatter_tensor calls at once and waits
    # for the last Work only: the others' results are written all the same.
    outs = [torch.zeros(2) for _ in range(3)]
    with dist._coalescing_manager(async_ops=False):
        for k, out in enumerate(outs):
            dist.reduce_scatter_tensor(out, torch.full((2 * size,), float(rank + k)))
    for k, out in enumerate(outs):
        assert out.tolist() == [float(sum(range(size)) + size * k)] * 2, (k, out)


def _count_calls(monkeypatch, *names):
    """How often each of the engine's functions ``names`` is called from now on."""
    from kolo.common import engine
    calls = {name: 0 for name in names}

    def counted(name, real):
        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return call
    for name in names:
        monkeypatch.setattr(engine, name, counted(name, getattr(engine, name)))
    return calls


@pytest.mark.parametrize("async_ops", [False, True], ids=["blocking", "async"])
def test_coalesced_lists_are_one_grouped_call(rank, size, monkeypatch, async_ops):
    # A list from the coalescing manager is one grouped operation in the core (one call,
    # negotiated as a unit), as kolo.torch's grouped_* calls, not one operation per tensor;
    # 0-d and multi-dimensional tensors alike.
    calls = _count_calls(monkeypatch, "grouped_allreduce_async", "allreduce_async",
                         "grouped_allgather_async", "allgather_async",
                         "grouped_reducescatter_async", "reducescatter_async")
    reduced = [torch.tensor(float(rank)), torch.full((2, 3), float(rank + 1))]
    with dist._coalescing_manager(async_ops=async_ops) as cm:
        for t in reduced:
            dist.all_reduce(t)
    if async_ops:
        cm.wait()
    assert reduced[0].item() == sum(range(size))
    assert reduced[1].tolist() == [[float(sum(range(1, size + 1)))] * 3] * 2

    inputs = [torch.tensor(float(rank)), torch.full((2, 2), float(10 + rank))]
    gathered = [torch.zeros(size), torch.zeros(size * 2, 2)]
    with dist._coalescing_manager(async_ops=async_ops) as cm:
        for o, i in zip(gathered, inputs):
            dist.all_gather_into_tensor(o, i)
    if async_ops:
        cm.wait()
    assert gathered[0].tolist() == [float(r) for r in range(size)]
    assert gathered[1].tolist() == [[float(10 + r)] * 2 for r in range(size) for _ in range(2)]

    scattered = [torch.zeros(3), torch.zeros(1, 2)]
    with dist._coalescing_manager(async_ops=async_ops) as cm:
        for k, o in enumerate(scattered):
            full = torch.arange(float(size * o.numel())).view(size, *o.shape) + rank + k
            dist.reduce_scatter_tensor(o, full, op=dist.ReduceOp.AVG)
    if async_ops:
        cm.wait()
    for k, o in enumerate(scattered):
        n = o.numel()
        want = [rank * n + j + (size - 1) / 2 + k for j in range(n)]
        assert o.reshape(-1).tolist() == want, (k, o)
    assert calls == {"grouped_allreduce_async": 1, "allreduce_async": 0,
                     "grouped_allgather_async": 1, "allgather_async": 0,
                     "grouped_reducescatter_async": 1, "reducescatter_async": 0}, calls


def test_coalesced_reduce_scatter_max_and_bad_inputs(rank, size):
    # MAX reduces each input whole (kolo's reducescatter sums); a bad input is named by its
    # place in the list, on every rank alike.
    outs = [torch.zeros(2), torch.zeros(1)]
    with dist._coalescing_manager(async_ops=False):
        for k, o in enumerate(outs):
            dist.reduce_scatter_tensor(o, torch.full((size * o.numel(),), float(rank + k)),
                                       op=dist.ReduceOp.MAX)
    assert [o.tolist() for o in outs] == [[float(size - 1)] * 2, [float(size)]]
    with pytest.raises(ValueError, match="input 1 has %d elements" % (size + 1)):
        with dist._coalescing_manager(async_ops=False):
            dist.reduce_scatter_tensor(torch.zeros(1), torch.zeros(size))
            dist.reduce_scatter_tensor(torch.zeros(1), torch.zeros(size + 1))
    with pytest.raises(ValueError, match="allreduce_coalesced input 1 is not contiguous"):
        with dist._coalescing_manager(async_ops=False):
            dist.all_reduce(torch.ones(2))
            dist.all_reduce(torch.ones(2, 3).t())
