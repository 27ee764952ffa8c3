"""kolo.jax's collectives inside jax.jit: results, shapes and dtypes as eagerly; a jitted
function called several times (the compiled function runs its collectives every call, with
the new inputs); several collectives in one jitted function, ordered with the computation
around them on every rank; pytrees inside jit.
"""
import numpy as np
import pytest
import jax
import jax.numpy as jnp

import kolo.jax as kj
from kolo import _core
from kolo.jax import _xla

from jax_common import (N, NUMERIC, R, WITH_BOOL, assert_array, assert_equal, const, expect,
                        ids, reducescatter_rows, val)
from test_jax_ops import KIND, OPS, reduce_np


@pytest.mark.parametrize("op", OPS)
def test_allreduce_in_jit_every_op(op):
    every = [val(r, (2, 3), KIND[op]) for r in range(N)]
    f = jax.jit(lambda x: kj.allreduce(x, op=getattr(kj, op)))
    out = f(const(every[R], jnp.float32))
    assert_array(out, jnp.float32, (2, 3))
    assert_equal(out, reduce_np(op, every))


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
def test_allreduce_in_jit_every_dtype_with_scales(dtype):
    every = [val(r, (4,)) for r in range(N)]
    f = jax.jit(lambda x: kj.allreduce(x, op=kj.Sum, prescale_factor=2.0,
                                       postscale_factor=1.5))
    out = f(const(every[R], dtype))
    assert_array(out, dtype, (4,))
    assert_equal(out, reduce_np("Sum", every) * 3)


@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_allgather_stack_and_broadcast_in_jit(dtype):
    every = [val(r, (2, 2)) for r in range(N)]

    @jax.jit
    def f(x):
        return kj.allgather(x, stack=True), kj.allgather(x), kj.broadcast(x, root_rank=N - 1)

    s, c, b = f(const(every[R], dtype))
    assert_array(s, dtype, (N, 2, 2))
    assert_equal(s, np.stack([expect(e, dtype) for e in every]))
    assert_array(c, dtype, (2 * N, 2))
    assert_equal(c, np.concatenate([expect(e, dtype) for e in every]))
    assert_array(b, dtype, (2, 2))
    assert_equal(b, expect(every[N - 1], dtype))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int64, jnp.bool_],
                         ids=ids([jnp.float32, jnp.int64, jnp.bool_]))
def test_alltoall_in_jit(dtype):
    # Even splits (splits=None): the output's shape is the input's, known when tracing.
    every = [val(r, (2 * N, 3)) + 2 * r for r in range(N)]
    out = jax.jit(kj.alltoall)(const(every[R], dtype))
    assert_array(out, dtype, (2 * N, 3))
    assert_equal(out, np.concatenate([expect(every[r], dtype)[2 * R:2 * R + 2]
                                      for r in range(N)]))


def test_alltoall_with_splits_in_jit_is_refused_clearly():
    # The received row count is only known when it runs: not possible with a static shape.
    x = jnp.ones((N,), jnp.float32)
    with pytest.raises(NotImplementedError, match="jit"):
        jax.jit(lambda x: kj.alltoall(x, splits=[1] * N))(x)


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_reducescatter_in_jit(op, dtype):
    rows = 2 * N + 1
    every = [val(r, (rows, 2), KIND[op]) for r in range(N)]
    out = jax.jit(lambda x: kj.reducescatter(x, op=getattr(kj, op)))(const(every[R], dtype))
    mine = reducescatter_rows(rows, R, N)
    start = sum(reducescatter_rows(rows, r, N) for r in range(R))
    assert_array(out, dtype, (mine, 2))
    assert_equal(out, reduce_np(op, every)[start:start + mine])


def test_a_jitted_function_called_several_times():
    calls = []

    @jax.jit
    def f(x, k):
        calls.append(1)  # counts traces, not calls
        return kj.allreduce(x * k, op=kj.Sum) + 1.0

    for step in range(4):
        x = jnp.full((3,), float(R + step))
        out = f(x, jnp.float32(step + 1))
        want = sum(float(r + step) for r in range(N)) * (step + 1) + 1.0
        assert_array(out, jnp.float32, (3,))
        assert_equal(out, [want] * 3)
    assert len(calls) == 1  # traced once: the collective ran in the compiled function


def test_collectives_are_ordered_with_the_computation():
    @jax.jit
    def f(x):
        a = kj.allreduce(x * 2.0, op=kj.Sum)          # depends on x
        b = kj.allgather(a[:1] + float(R), stack=True)  # depends on a
        c = kj.broadcast(jnp.sum(b) + x, root_rank=N - 1)
        d = kj.allreduce(c * c, op=kj.Max)
        return a, b, c, d

    x = jnp.asarray([R + 1.0, 2.0])
    a, b, c, d = f(x)
    a_want = np.array([2.0 * sum(r + 1 for r in range(N)), 4.0 * N])
    b_want = np.array([[a_want[0] + r] for r in range(N)])
    c_want = b_want.sum() + np.array([N * 1.0, 2.0])  # root N-1's x
    assert_equal(a, a_want)
    assert_equal(b, b_want)
    assert_equal(c, c_want)
    assert_equal(d, c_want * c_want)


def test_independent_collectives_in_one_jitted_function():
    # No data dependence between them: they still must run in the same order on all ranks.
    @jax.jit
    def f(x, y, z):
        return (kj.allreduce(x, op=kj.Sum), kj.allgather(y, stack=True),
                kj.broadcast(z, root_rank=0), kj.allreduce(y, op=kj.Min))

    for step in range(3):
        x = jnp.full((2,), R + step, jnp.int32)
        y = jnp.full((3,), R * 2.0 + step, jnp.float64)
        z = jnp.full((1,), R + 10 * step, jnp.int16)
        a, b, c, d = f(x, y, z)
        assert_equal(a, [sum(r + step for r in range(N))] * 2)
        assert_equal(b, np.stack([np.full(3, r * 2.0 + step) for r in range(N)]))
        assert_equal(c, [10 * step])
        assert_equal(d, [float(step)] * 3)


def test_a_collective_whose_result_is_unused_still_runs_on_every_rank():
    # If XLA dropped the unused allreduce on some ranks, the next collective would pair
    # with it and hang or mix values.
    @jax.jit
    def f(x):
        kj.allreduce(x, op=kj.Sum, name="jit.unused")
        return x + 1

    f(jnp.ones(2))
    assert_equal(kj.allreduce(jnp.ones(2), op=kj.Sum), [float(N)] * 2)


def test_pytree_in_jit():
    @jax.jit
    def f(tree):
        return kj.allreduce(tree, op=kj.Sum), kj.broadcast(tree, root_rank=N - 1)

    tree = {"a": [jnp.full((2,), float(R)), None], "b": (jnp.asarray(R, jnp.int32),),
            "c": None}
    s, b = f(tree)
    assert jax.tree.structure(s) == jax.tree.structure(tree)
    assert jax.tree.structure(b) == jax.tree.structure(tree)
    assert s["a"][1] is None and s["c"] is None
    assert_equal(s["a"][0], [N * (N - 1) / 2] * 2)
    assert_array(s["b"][0], jnp.int32, ())
    assert int(s["b"][0]) == N * (N - 1) // 2
    assert_equal(b["a"][0], [N - 1.0] * 2)
    assert int(b["b"][0]) == N - 1


def test_collective_in_a_fori_loop_inside_jit():
    # A collective inside lax.fori_loop inside jit: runs once per iteration, in order.
    @jax.jit
    def f(x):
        return jax.lax.fori_loop(0, 3, lambda i, v: kj.allreduce(v, op=kj.Sum) / N + i, x)

    x = jnp.asarray([float(R)])
    v = np.mean(np.arange(N))  # after iteration 0: the mean + 0
    v = v + 1  # iteration 1: mean of equal values + 1
    v = v + 2
    assert_equal(f(x), [v])


def test_a_build_with_xla_ffi_headers_uses_them():
    # kolo._core carries the FFI handler when it was built against XLA's FFI headers; then
    # this JAX must take it (else kolo.jax would quietly fall back to the io_callback).
    if not hasattr(_core, "xla_ffi_handlers"):
        pytest.skip("kolo was built without XLA's FFI headers: allreduce in jit uses an "
                    "io_callback")
    assert _xla.available
    text = jax.jit(lambda t: kj.allreduce(t, op=kj.Sum)).lower(
        {"a": jnp.ones(3), "b": jnp.ones((2, 2), jnp.int32)}).as_text()
    assert "custom_call @kolo_allreduce" in text
    assert text.count("output_operand_alias<") == 2  # each result is its leaf's buffer


@pytest.mark.skipif(not _xla.available, reason="allreduce in jit uses an io_callback here")
def test_allreduce_in_jit_runs_in_place_on_a_donated_buffer():
    f = jax.jit(lambda x: kj.allreduce(x, op=kj.Sum), donate_argnums=0)
    for step in range(3):
        x = jnp.full((1000,), float(R + step))
        where = x.unsafe_buffer_pointer()
        out = f(x)
        assert out.unsafe_buffer_pointer() == where  # no copy in or out
        assert_equal(out, [float(sum(r + step for r in range(N)))] * 1000)


def test_an_eager_collective_waits_for_the_jitted_ones_dispatched_before_it():
    # JAX may dispatch a jitted function asynchronously (0.10 runs computations with
    # host callbacks synchronously on the CPU; kolo.jax does not rely on it): its
    # collectives may still wait for the computation before them when Python goes on to
    # an eager collective. Rank 0's allreduce in jit comes late (a long loop first);
    # every rank must still submit the jitted allreduce before the eager one.
    @jax.jit
    def f(x, n):
        x = jax.lax.fori_loop(0, n, lambda i, v: v * 1.0000001, x)
        return kj.allreduce(x, op=kj.Sum)

    late = f(jnp.ones(4), jnp.int32(3_000_000 if R == 0 else 0))
    eager = kj.allreduce(jnp.full((4,), float(R)), op=kj.Sum)
    assert_equal(eager, [float(sum(range(N)))] * 4)
    assert np.all(np.asarray(late) >= N)
