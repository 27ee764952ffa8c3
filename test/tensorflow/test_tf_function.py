"""kolo.tensorflow's collectives inside tf.function (graph mode): the same values as eagerly,
static shapes as Horovod's ops infer them (allreduce/broadcast: the input's; allgather,
alltoall, reducescatter: the input's but dim 0), retracing, repeated calls, and
jit_compile=True: allreduce as an XLA custom call, the other collectives refused with an error
that names jit_compile.
"""
import numpy as np
import pytest
import tensorflow as tf

import kolo.tensorflow as hvd
from kolo.tensorflow import op_library

from tf_common import (N, R, as_np, assert_equal, const, expect, ids, reducescatter_rows,
                       val)

FN_DTYPES = [tf.float32, tf.float64, tf.int32, tf.int64, tf.bfloat16, tf.uint8]
FN_DTYPES_BOOL = FN_DTYPES + [tf.bool]


def total(every):
    return np.stack(every).astype(np.float64).sum(0)


@pytest.mark.parametrize("dtype", FN_DTYPES, ids=ids(FN_DTYPES))
def test_allreduce_in_tf_function(dtype):
    shapes = []

    @tf.function
    def f(x):
        out = hvd.allreduce(x, op=hvd.Sum)
        shapes.append(out.shape.as_list())
        return out, hvd.allreduce(x, op=hvd.Max, name="tf.fn.max")

    every = [val(r, (2, 3)) for r in range(N)]
    s, m = f(const(every[R], dtype))
    assert s.dtype == dtype and shapes == [[2, 3]]
    assert_equal(s, total(every))
    assert_equal(m, np.stack(every).max(0))
    # A second call runs the collectives again, on the new values (no retrace).
    twice = [val(r + 1, (2, 3)) for r in range(N)]
    s, _ = f(const(twice[R], dtype))
    assert_equal(s, total(twice))
    assert len(shapes) == 1


def test_allreduce_average_and_scales_in_tf_function():
    @tf.function
    def f(x):
        return (hvd.allreduce(x), hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0,
                                                 postscale_factor=1.5))

    every = [val(r, (4,), "avg") for r in range(N)]
    avg, scaled = f(const(every[R], tf.float32))
    assert_equal(avg, total(every) / N)
    assert_equal(scaled, total(every) * 3)


@pytest.mark.parametrize("dtype", FN_DTYPES, ids=ids(FN_DTYPES))
def test_grouped_allreduce_in_tf_function(dtype):
    @tf.function
    def f(a, b):
        return hvd.grouped_allreduce([a, b], op=hvd.Sum)

    a = [val(r, (3,)) for r in range(N)]
    b = [val(r, (2, 2)) for r in range(N)]
    out = f(const(a[R], dtype), const(b[R], dtype))
    assert len(out) == 2 and out[1].shape == (2, 2)
    assert_equal(out[0], total(a))
    assert_equal(out[1], total(b))


@pytest.mark.parametrize("dtype", FN_DTYPES_BOOL, ids=ids(FN_DTYPES_BOOL))
def test_allgather_in_tf_function(dtype):
    shapes = []

    @tf.function
    def f(x):
        out = hvd.allgather(x)
        shapes.append(out.shape.as_list())
        return out

    every = [val(r, (r + 1, 2)) for r in range(N)]
    out = f(const(every[R], dtype))
    assert_equal(out, np.concatenate([expect(e, dtype) for e in every]))
    assert shapes[0][1:] == [2]


def test_allgather_in_tf_function_with_an_unknown_first_dim_retraces_nothing():
    traces = []

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float64)])
    def f(x):
        traces.append(1)
        return hvd.allgather(x, name="tf.fn.ag")

    for step in range(2):
        every = [val(r + step, (r + step + 1, 3)) for r in range(N)]
        assert_equal(f(const(every[R], tf.float64)), np.concatenate(every))
    assert len(traces) == 1


def test_grouped_allgather_in_tf_function():
    @tf.function
    def f(a, b):
        return hvd.grouped_allgather([a, b])

    a = [val(r, (r + 1, 2)) for r in range(N)]
    b = [val(r, (1,)) for r in range(N)]
    out = f(const(a[R], tf.float32), const(b[R], tf.float32))
    assert_equal(out[0], np.concatenate(a))
    assert_equal(out[1], np.concatenate(b))


@pytest.mark.parametrize("dtype", FN_DTYPES_BOOL, ids=ids(FN_DTYPES_BOOL))
def test_broadcast_in_tf_function(dtype):
    @tf.function
    def f(x):
        out = hvd.broadcast(x, N - 1)
        assert out.shape.as_list() == [2, 3]
        return out

    out = f(const(val(R, (2, 3)), dtype))
    assert_equal(out, expect(val(N - 1, (2, 3)), dtype))


def test_broadcast_variables_in_tf_function():
    v = [tf.Variable(const(val(R, (3,)), tf.float32)),
         tf.Variable(const(val(R, (2,)), tf.int64))]

    @tf.function
    def f():
        hvd.broadcast_variables(v, root_rank=N - 1)

    f()
    assert_equal(v[0], val(N - 1, (3,)))
    assert_equal(v[1], val(N - 1, (2,)))


def _splits(r):
    return [(r + j) % 2 + 1 for j in range(N)]


@pytest.mark.parametrize("dtype", FN_DTYPES_BOOL, ids=ids(FN_DTYPES_BOOL))
def test_alltoall_in_tf_function(dtype):
    shapes = []

    @tf.function
    def f(x, splits):
        out, received = hvd.alltoall(x, splits)
        shapes.append(out.shape.as_list())
        return out, received

    x = np.concatenate([np.full((s, 2), 3 * R + j) for j, s in enumerate(_splits(R))])
    out, received = f(const(x, dtype), tf.constant(_splits(R), tf.int32))
    want = np.concatenate([np.full((_splits(s)[R], 2), 3 * s + R) for s in range(N)])
    assert_equal(out, expect(want, dtype))
    assert received.numpy().tolist() == [_splits(s)[R] for s in range(N)]
    assert shapes[0][1:] == [2]


def test_alltoall_without_splits_in_tf_function():
    @tf.function
    def f(x):
        return hvd.alltoall(x)

    x = np.concatenate([np.full((1, 2), 3 * R + j) for j in range(N)])
    out = f(const(x, tf.float32))
    assert isinstance(out, tf.Tensor)
    assert_equal(out, np.concatenate([np.full((1, 2), 3 * s + R) for s in range(N)]))


@pytest.mark.parametrize("dtype", FN_DTYPES, ids=ids(FN_DTYPES))
def test_reducescatter_in_tf_function(dtype):
    shapes = []

    @tf.function
    def f(x):
        out = hvd.reducescatter(x, op=hvd.Sum)
        shapes.append(out.shape.as_list())
        return out

    rows = 2 * N + 1
    every = [val(r, (rows, 2)) for r in range(N)]
    out = f(const(every[R], dtype))
    start = sum(reducescatter_rows(rows, k, N) for k in range(R))
    assert_equal(out, total(every)[start:start + reducescatter_rows(rows, R, N)])
    assert shapes[0][1:] == [2]


def test_grouped_reducescatter_in_tf_function():
    @tf.function
    def f(a):
        return hvd.grouped_reducescatter([a, a * 2], op=hvd.Sum)

    every = [val(r, (N, 2)) for r in range(N)]
    out = f(const(every[R], tf.float32))
    assert_equal(out[0], total(every)[R:R + 1])
    assert_equal(out[1], 2 * total(every)[R:R + 1])


def test_collectives_in_a_loop_inside_tf_function():
    @tf.function
    def f(x):
        for _ in tf.range(3):
            x = hvd.allreduce(x, op=hvd.Sum)
        return x

    out = f(tf.constant([float(R + 1)]))
    assert_equal(out, [N * (N + 1) / 2.0 * N * N])


@pytest.mark.parametrize("which", ["allreduce", "allgather", "broadcast"])
def test_jit_compile_runs_allreduce_and_refuses_the_rest_naming_jit_compile(which):
    # kolo's ops: allreduce is an XLA custom call; the others are refused when traced.
    # Through tf.numpy_function (KOLO_TF_OPS=0) every collective is refused.
    call = {"allreduce": lambda x: hvd.allreduce(x, op=hvd.Sum),
            "allgather": lambda x: hvd.allgather(x),
            "broadcast": lambda x: hvd.broadcast(x, 0)}[which]
    f = tf.function(call, jit_compile=True)
    if which == "allreduce" and op_library.ops() is not None:
        assert_equal(f(tf.ones((2, 2)) * (R + 1)), np.full((2, 2), N * (N + 1) / 2.0))
        return
    with pytest.raises(Exception, match="jit_compile"):
        f(tf.ones((2, 2)))
    # Refused on every rank before anything was sent: the ranks are still in step.
    assert_equal(hvd.allreduce(tf.ones(1), op=hvd.Sum, name="tf.fn.after_jit"), [float(N)])


def test_gradient_inside_tf_function():
    x = tf.Variable(tf.constant([1.0, 2.0], tf.float64) * (R + 1))

    @tf.function
    def f():
        with tf.GradientTape() as tape:
            y = hvd.allreduce(x, op=hvd.Sum)
            loss = tf.reduce_sum(y * tf.constant([1.0, 3.0], tf.float64) * (R + 1))
        return tape.gradient(loss, x)

    g = f()
    # allreduce's gradient is the same allreduce of the upstream gradients.
    assert_equal(g, np.array([1.0, 3.0]) * N * (N + 1) / 2)
    assert as_np(g).dtype == np.float64
