"""The core reads the tensors itself, through the torch adapter's reader: allreduce_async(_)
and grouped_allreduce_async(_) hand kolo._core the tensor or the whole list, and the
reader's checks run in C++ (bindings/tensor_reader.cc), the words for a failed one coming
from the adapter. Results, names and refusals of a whole list must be those of each tensor
on its own (every rank runs the same tests in order)."""
import inspect

import pytest
import torch

import kolo.torch as hvd
from kolo.common import engine, names
from kolo.torch import _tensors

hvd.init()
R, N = hvd.rank(), hvd.size()

# Every dtype kolo moves, in one group (bool reduces with Sum as "or").
MIXED = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
         torch.int16, torch.int32, torch.int64, torch.bool]


def mixed(rank, n=5):
    """One tensor per dtype of MIXED, of different shapes (0-d and empty included)."""
    out = []
    for i, dtype in enumerate(MIXED):
        v = (torch.arange(n * (i % 3 + 1)) + rank + i) % 7
        out.append((v % 2 == 0) if dtype == torch.bool else v.to(dtype))
    out.append(torch.tensor(float(rank + 1)))   # 0-d
    out.append(torch.empty(0, 3))               # no elements (data_ptr may be 0)
    out.append(torch.ones(2, 3, 4) * (rank + 1))
    return out


def per_tensor(tensors, op):
    """The reference: every tensor reduced on its own."""
    return [hvd.allreduce(t, op=op, name="lists.ref.%d" % i) for i, t in enumerate(tensors)]


@pytest.mark.parametrize("op", [hvd.Sum, hvd.Max, hvd.Min], ids=["sum", "max", "min"])
def test_grouped_in_place_mixed_dtypes_equals_per_tensor(op):
    tensors = mixed(R)
    want = per_tensor(mixed(R), op)
    out = hvd.grouped_allreduce_(tensors, op=op, name="lists.inplace")
    assert isinstance(out, tuple) and len(out) == len(tensors)
    for i, (o, t, w) in enumerate(zip(out, tensors, want)):
        assert o is t, i  # in place: the inputs themselves
        assert o.dtype == w.dtype and o.shape == w.shape, i
        assert torch.equal(o, w), (i, o, w)


def test_grouped_out_of_place_leaves_the_inputs():
    tensors = mixed(R)
    out = hvd.synchronize(hvd.grouped_allreduce_async(tensors, op=hvd.Sum, name="lists.out"))
    for i, (o, t, w) in enumerate(zip(out, mixed(R), per_tensor(mixed(R), hvd.Sum))):
        assert o is not tensors[i]
        assert torch.equal(o, w), (i, o, w)
        assert torch.equal(tensors[i], t), i  # untouched


def test_grouped_average_and_scale_factors():
    tensors = [torch.ones(3) * (R + 1), torch.ones(2, dtype=torch.float64) * (R + 1)]
    total = N * (N + 1) / 2
    out = hvd.grouped_allreduce_(tensors, name="lists.avg")  # Average is the default
    assert out[0].tolist() == [total / N] * 3 and out[1].tolist() == [total / N] * 2
    out = hvd.grouped_allreduce_([torch.ones(2)], op=hvd.Sum, prescale_factor=2.0,
                                 postscale_factor=0.5, name="lists.scale")
    assert out[0].tolist() == [float(N)] * 2


def test_grouped_takes_any_sequence_and_keeps_a_copy_of_it():
    a, b = torch.ones(2), torch.ones(3)
    out = hvd.grouped_allreduce_((a, b), op=hvd.Sum, name="lists.tuple")
    assert out[0] is a and out[1] is b and a.tolist() == [N] * 2
    out = hvd.grouped_allreduce_((t for t in [torch.ones(1)]), op=hvd.Sum, name="lists.gen")
    assert out[0].tolist() == [N]
    # The list the caller passed may change after the call; the result is what was submitted.
    tensors = [torch.ones(2)]
    h = hvd.grouped_allreduce_async_(tensors, op=hvd.Sum, name="lists.mutated")
    tensors.append(torch.zeros(1))
    assert len(hvd.synchronize(h)) == 1


def test_parameters_are_tensors():
    p = torch.nn.Parameter(torch.ones(3) * (R + 1))
    with torch.no_grad():
        hvd.grouped_allreduce_([p], op=hvd.Sum, name="lists.param")
        hvd.allreduce_(p, op=hvd.Sum, name="lists.param1")
    assert p.tolist() == [N * N * (N + 1) / 2] * 3


def test_per_tensor_in_place_and_out_of_place():
    x = torch.arange(6, dtype=torch.float64).view(2, 3) + R
    y = hvd.synchronize(hvd.allreduce_async(x, op=hvd.Sum, name="lists.one"))
    want = sum(torch.arange(6, dtype=torch.float64).view(2, 3) + r for r in range(N))
    assert torch.equal(y, want) and torch.equal(x, torch.arange(6.).double().view(2, 3) + R)
    assert hvd.synchronize(hvd.allreduce_async_(x, op=hvd.Sum, name="lists.one_")) is x
    assert torch.equal(x, want)
    z = torch.tensor(R + 1)  # 0-d, int64
    assert hvd.allreduce_(z, op=hvd.Sum, name="lists.zero_d").item() == N * (N + 1) // 2


# Refusals: every rank refuses alike here (test_torch_refusals.py has one rank refuse). The
# errors are the adapter's words for the reader's checks, naming the first input that fails.
GROUPED_REFUSALS = [
    ([], ValueError, "^grouped_allreduce needs at least one tensor$"),
    ([torch.ones(2), 3], TypeError, "^grouped_allreduce input 1 must be a torch.Tensor, got int$"),
    ([torch.ones(2), torch.ones(4, 4).t(), torch.zeros(2, dtype=torch.complex64)], ValueError,
     "^grouped_allreduce input 1 is not contiguous; call .contiguous\\(\\) first$"),
    ([torch.zeros(2, dtype=torch.complex64), torch.ones(4, 4).t()], TypeError,
     "^grouped_allreduce input 0 has dtype torch.complex64, which kolo does not support"),
    ([torch.ones(1), torch.ones(2).to_sparse()], ValueError,
     "^grouped_allreduce input 1 is sparse; kolo moves dense tensors"),
]


@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "out_of_place"])
@pytest.mark.parametrize("case", range(len(GROUPED_REFUSALS)))
def test_grouped_refusals_name_the_first_bad_input(case, in_place):
    tensors, error, message = GROUPED_REFUSALS[case]
    call = hvd.grouped_allreduce_async_ if in_place else hvd.grouped_allreduce_async
    with pytest.raises(error, match=message) as raised:
        call(tensors, name="lists.refused.%d.%d" % (case, in_place))
    if error is TypeError and "dtype" in message:
        assert isinstance(raised.value, _tensors.UnsupportedDtypeError)


@pytest.mark.parametrize("in_place", [True, False], ids=["in_place", "out_of_place"])
def test_per_tensor_refusals(in_place):
    call = hvd.allreduce_async_ if in_place else hvd.allreduce_async
    with pytest.raises(ValueError, match="^allreduce input is not contiguous"):
        call(torch.ones(4, 4).t(), name="lists.nc")
    with pytest.raises(_tensors.UnsupportedDtypeError, match="^allreduce input has dtype torch.comp"):
        call(torch.zeros(2, dtype=torch.complex128), name="lists.dtype")
    with pytest.raises(TypeError, match="^allreduce input must be a torch.Tensor, got list$"):
        call([1.0, 2.0], name="lists.list")
    with pytest.raises(ValueError, match="^allreduce input is sparse"):
        call(torch.ones(2).to_sparse(), name="lists.sparse")
    # The names of refused calls are free: the same names work now.
    x = torch.ones(2)
    assert hvd.allreduce_(x, op=hvd.Sum, name="lists.nc").tolist() == [N] * 2


def test_grouped_member_names_are_taken_while_pending():
    # Members of a group named "lists.g" are "lists.g.0", "lists.g.1" (member_name).
    assert names.member_name("lists.g", 1, 2) == "lists.g.1"
    if R == 0:
        h = hvd.grouped_allreduce_async_([torch.ones(1), torch.ones(1)], name="lists.g")
        with pytest.raises(ValueError, match="'lists.g.1' is already pending"):
            hvd.allreduce_async_(torch.ones(1), name="lists.g.1")
        hvd.barrier()
        hvd.synchronize(h)
    else:
        hvd.barrier()
        hvd.grouped_allreduce_([torch.ones(1), torch.ones(1)], name="lists.g")


def test_an_adapter_without_words_for_a_check_gets_a_type_error():
    # A tensor the reader refuses but whose adapter raises nothing for that check: the core
    # says so instead of reducing something it could not read.
    reader = engine.tensor_reader("attributes", torch.Tensor, {}, lambda t, what, i, c: None,
                                  _tensors.stream)
    with pytest.raises(TypeError, match="^probe input 0: kolo could not read the tensor "
                                        "\\(a Tensor; check 'dtype' failed\\)$"):
        engine.grouped_allreduce_async(reader, [torch.ones(1)], None, "probe", "lists.probe",
                                       hvd.Sum, 1.0, 1.0, 0)


def test_a_tensor_on_a_device_kolo_cannot_reach_is_refused():
    with pytest.raises(ValueError, match="^allreduce input is on device meta; kolo moves"):
        hvd.allreduce_async_(torch.empty(2, device="meta"), name="lists.meta")


def test_a_reader_of_an_unknown_protocol_is_refused():
    with pytest.raises(ValueError, match="unknown reader protocol 'dlpack'"):
        engine.tensor_reader("dlpack", torch.Tensor, {}, _tensors.refuse)


def test_blocking_allreduces_tell_the_core_that_their_caller_waits(monkeypatch):
    # allreduce_, grouped_allreduce_ and allreduce wait at once, in the same call into the
    # core that starts them (waits, which implies caller_waits): the core then wakes no
    # thread for them, and the calling thread runs the round when no other thread is
    # running one (KOLO_CALLER_RUNS; test/mpi/caller_runs_test.cc pins that). Which thread runs a given round is not promised: under load the background
    # thread may run all of them, so this checks what the binding says, and the results.
    told = []
    for entry in ("allreduce_async", "grouped_allreduce_async"):
        real = getattr(engine, entry)

        def spy(*args, _real=real, _entry=entry, **kwargs):
            waits = inspect.signature(_real).bind(*args, **kwargs).arguments
            told.append((_entry, waits.get("waits", False)))
            return _real(*args, **kwargs)
        monkeypatch.setattr(engine, entry, spy)
    before = engine.cycle_stats()
    for _ in range(3):
        x = torch.ones(4)
        assert hvd.allreduce_(x, op=hvd.Sum, name="lists.blocking").tolist() == [N] * 4
        ys = hvd.grouped_allreduce_([torch.ones(2), torch.ones(3)], op=hvd.Sum,
                                    name="lists.blocking.g")
        assert [y.tolist() for y in ys] == [[N] * 2, [N] * 3]
        assert hvd.allreduce(torch.ones(1), op=hvd.Sum, name="lists.blocking.o").tolist() == [N]
    assert hvd.synchronize(hvd.allreduce_async_(torch.ones(1), op=hvd.Sum,
                                                name="lists.later")).tolist() == [N]
    after = engine.cycle_stats()
    assert told == [("allreduce_async", True), ("grouped_allreduce_async", True),
                    ("allreduce_async", True)] * 3 + [("allreduce_async", False)], told
    ran = after["by_callers"] + after["by_background"] - before["by_callers"] \
        - before["by_background"]
    assert ran >= 1, (before, after)
