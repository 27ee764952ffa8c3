"""kolo.numpy under kolorun."""
import numpy as np
import pytest

import kolo.numpy as kn

kn.init()
R, N = kn.rank(), kn.size()


@pytest.mark.parametrize("dtype", [np.uint8, np.int16, np.uint16, np.int32, np.int64, np.float16,
                                   np.float32, np.float64])
def test_allreduce_sum_and_average(dtype):
    x = np.full(5, R + 1, dtype=dtype)
    assert np.array_equal(kn.allreduce(x, op=kn.Sum), np.full(5, N * (N + 1) // 2, dtype=dtype))
    if np.dtype(dtype).kind == "f":
        assert np.allclose(kn.allreduce(x), np.full(5, (N + 1) / 2))


def test_allgather_and_broadcast():
    g = kn.allgather(np.full((R + 1, 2), R, dtype=np.int32))
    assert g.shape == (N * (N + 1) // 2, 2)
    assert g[:, 0].tolist() == [r for r in range(N) for _ in range(r + 1)]
    b = kn.broadcast(np.arange(4.0) * (R + 1), 0)
    assert np.array_equal(b, np.arange(4.0))


def test_collectives_on_a_process_set():
    # Every rank registers the set (Horovod's rule); only its members call into it.
    odd = kn.add_process_set([r for r in range(N) if r % 2 == 1])
    try:
        if R % 2 == 1:
            members = list(range(1, N, 2))
            out = kn.allreduce(np.full(3, R, dtype=np.int64), op=kn.Sum, process_set=odd)
            assert out.tolist() == [sum(members)] * 3
            g = kn.allgather(np.full(1, R, dtype=np.int32), process_set=odd)
            assert g.tolist() == members
            b = kn.broadcast(np.full(2, R, dtype=np.float32), members[-1], process_set=odd)
            assert b.tolist() == [members[-1]] * 2
        else:
            with pytest.raises(ValueError, match=r"this rank \(%d\) is not a member of process set" % R):
                kn.allreduce(np.ones(1), process_set=odd)
    finally:
        kn.remove_process_set(odd)


def test_bad_input():
    with pytest.raises(TypeError, match="numpy.ndarray"):
        kn.allreduce([1, 2])
    with pytest.raises(ValueError, match="C-contiguous"):
        kn.allreduce(np.ones((3, 3))[:, 0])
    with pytest.raises(TypeError, match="does not support"):
        kn.allreduce(np.ones(2, dtype=np.complex64))


def test_unnamed_collectives_in_rank_dependent_branches_pair():
    # As in Horovod: the same collective, unnamed, on each side of a branch.
    if R == 0:
        b = kn.broadcast(np.arange(4.0), 0)
    else:
        b = kn.broadcast(np.zeros(4), 0)
    assert np.array_equal(b, np.arange(4.0))


def test_the_engines_stall_shutdown_time_reads_horovod_values_as_the_runtime(monkeypatch):
    # What kolo's torch.distributed backend compares its timeouts with: the settings table's
    # reading (Horovod's strtol for HOROVOD_*), not a parser of its own.
    from kolo.common import engine
    for name in ("KOLO_STALL_SHUTDOWN_TIME_SECONDS", "KOLO_STALL_CHECK_DISABLE",
                 "HOROVOD_STALL_CHECK_DISABLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "90s")
    assert engine.stall_shutdown_seconds() == 90
    monkeypatch.setenv("HOROVOD_STALL_CHECK_DISABLE", "true")  # Horovod: strtol("true") = 0
    assert engine.stall_shutdown_seconds() == 90
    monkeypatch.setenv("HOROVOD_STALL_CHECK_DISABLE", "1")
    assert engine.stall_shutdown_seconds() == 0
    monkeypatch.setenv("KOLO_STALL_SHUTDOWN_TIME_SECONDS", "12.5")  # the KOLO_ name wins
    monkeypatch.delenv("HOROVOD_STALL_CHECK_DISABLE")
    assert engine.stall_shutdown_seconds() == 12.5


def test_adasum_matches_the_reference():
    import os
    import re
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    "common"))
    from adasum_reference import adasum, close
    assert kn.Adasum == 2
    rng = np.random.default_rng(9)
    every = [rng.normal(size=2 * N + 1) for _ in range(N)]
    if N & (N - 1):
        with pytest.raises(NotImplementedError, match=re.escape(
                "Running Adasum with non-power of 2 ranks is not supported yet.")):
            kn.allreduce(every[R], op=kn.Adasum)
        return
    for dtype in (np.float16, np.float32, np.float64):
        inputs = [[x.astype(dtype)] for x in every]
        out = kn.allreduce(inputs[R][0], op=kn.Adasum, name="numpy.adasum.%s" % dtype.__name__)
        assert out.dtype == dtype
        assert close(dtype, adasum([[x[0].astype(np.float64)] for x in inputs])[0], out)
