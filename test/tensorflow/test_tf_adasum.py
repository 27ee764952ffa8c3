"""kolo.tensorflow's Adasum (Horovod's: horovod/tensorflow/__init__.py and mpi_ops.py)
against the NumPy float64 reference of the whole algorithm (test/common/
adasum_reference.py): eagerly and inside tf.function, grouped, its gradient, and
DistributedGradientTape(op=Adasum); Horovod's refusals (np=3, other process sets, sparse
gradients, Keras optimizers) on every rank."""
import re

import numpy as np
import pytest
import tensorflow as tf

import kolo.tensorflow as hvd
import kolo.tensorflow.keras as hvd_keras
from kolo.tensorflow import op_library
from adasum_reference import check, inputs as rank_inputs  # test/common

from tf_common import N, R

POWER_OF_TWO = N & (N - 1) == 0
NOT_POWER_OF_TWO = re.escape("Running Adasum with non-power of 2 ranks is not supported yet.")
DTYPES = {tf.float16: np.float16, tf.float32: np.float32, tf.float64: np.float64}
SIZES = [1, 2 * N + 1, 300]


def every_rank(seed, sizes, np_dtype):
    return rank_inputs(seed, sizes, np_dtype, N)


def expect(every, outputs, np_dtype):
    check(every, outputs, np_dtype, rank=R)


@pytest.mark.parametrize("dtype", list(DTYPES), ids=lambda d: d.name)
def test_allreduce_eagerly_and_in_tf_function_matches_the_reference(dtype):
    inputs = every_rank(1, SIZES, DTYPES[dtype])
    mine = [tf.constant(a) for a in inputs[R]]
    if not POWER_OF_TWO:
        with pytest.raises(NotImplementedError, match=NOT_POWER_OF_TWO):
            hvd.allreduce(mine[0], op=hvd.Adasum)
        with pytest.raises(NotImplementedError, match=NOT_POWER_OF_TWO):
            tf.function(lambda: hvd.allreduce(mine[0], op=hvd.Adasum))()  # when traced
        return
    expect(inputs, [hvd.allreduce(t, op=hvd.Adasum).numpy() for t in mine], DTYPES[dtype])
    expect(inputs, [t.numpy() for t in hvd.grouped_allreduce(mine, op=hvd.Adasum)],
           DTYPES[dtype])
    fused = tf.function(lambda xs: hvd.grouped_allreduce(xs, op=hvd.Adasum))(mine)
    expect(inputs, [t.numpy() for t in fused], DTYPES[dtype])


def test_the_gradient_is_the_adasum_of_the_incoming_gradients():
    if not POWER_OF_TWO:
        return
    inputs, ups = every_rank(2, [6], np.float64), every_rank(3, [6], np.float64)
    x = tf.Variable(inputs[R][0])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(hvd.allreduce(x, op=hvd.Adasum) * tf.constant(ups[R][0]))
    expect(ups, [tape.gradient(loss, x).numpy()], np.float64)


def test_distributed_gradient_tape_reduces_the_gradients_with_adasum():
    # Horovod's tape hands op to its grouped allreduce of the gradients.
    xs = every_rank(4, [5 * 3], np.float64)
    w = tf.Variable(np.linspace(-1, 1, 3 * 2).reshape(3, 2))
    b = tf.Variable(np.zeros(2))
    x = tf.constant(xs[R][0].reshape(5, 3))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.tanh(x @ w + b) ** 2)
    local = tape.gradient(loss, [w, b], unconnected_gradients="zero")
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.tanh(x @ w + b) ** 2)
    tape = hvd.DistributedGradientTape(tape, op=hvd.Adasum)
    if not POWER_OF_TWO:
        with pytest.raises(NotImplementedError, match=NOT_POWER_OF_TWO):
            tape.gradient(loss, [w, b])
        return
    reduced = tape.gradient(loss, [w, b])
    gathered = [hvd.allgather(tf.reshape(g, (1, -1))).numpy() for g in local]
    every = [[g[r] for g in gathered] for r in range(N)]  # every rank's local gradients
    expect(every, [g.numpy().reshape(-1) for g in reduced], np.float64)


def test_horovods_refusals_on_every_rank():
    sparse = tf.IndexedSlices(tf.ones((1, 2)), tf.constant([0]), tf.constant([3, 2]))
    with pytest.raises(NotImplementedError, match="does not currently support sparse tensors"):
        hvd.allreduce(sparse, op=hvd.Adasum)
    sub = hvd.add_process_set([0, 1] if N > 2 else [1])
    try:
        if sub.included():
            with pytest.raises(NotImplementedError,
                               match="Adasum does not support non-global process sets yet."):
                hvd.allreduce(tf.ones(2), op=hvd.Adasum, process_set=sub)
    finally:
        hvd.remove_process_set(sub)
    import keras
    # Horovod's Adasum optimizer is a tf.compat.v1 one; its Keras paths refuse the op.
    with pytest.raises(ValueError, match="op == Adasum is not supported yet with Keras"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum)
    with pytest.raises(ValueError, match="Adasum does not support average_aggregated_gradients"):
        hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum,
                                 backward_passes_per_step=2, average_aggregated_gradients=True)
    with pytest.raises(ValueError, match="op currently only supports Average and Sum"):
        hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum)


def _delta_reference(lr, every_grads, w0):
    """The deltas' Adasum after one local step of gradient descent per rank (every rank's
    delta is -lr * its gradient), added to the start."""
    from adasum_reference import adasum
    return w0 + adasum([[-lr * g] for g in every_grads])[0]


def test_a_tf_compat_v1_optimizer_with_adasum_combines_the_deltas_eagerly():
    # Horovod's _DistributedAdasumOptimizer: each rank applies its own gradients, then the
    # variables' change is combined with Adasum (kolo: every backward_passes_per_step-th
    # step; Horovod's apply_gradients() never reaches this, see moving-from-horovod.md).
    grads = every_rank(5, [4, 4], np.float64)  # two steps' gradients of every rank
    w0 = np.linspace(-1.0, 1.0, 4)
    w = tf.Variable(w0)
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                   op=hvd.Adasum, backward_passes_per_step=2)
    assert opt.get_name() == "DistributedDeltaGradientDescentOptimizer"
    step = lambda k: opt.minimize(lambda: tf.reduce_sum(w * grads[R][k]), var_list=[w])
    if not POWER_OF_TWO:
        step(0)  # no exchange on the first of two passes
        with pytest.raises(NotImplementedError, match=NOT_POWER_OF_TWO):
            step(1)
        return
    step(0)
    assert np.allclose(w.numpy(), w0 - 0.5 * grads[R][0])  # this rank's own step
    step(1)
    summed = [g[0] + g[1] for g in grads]
    assert np.allclose(w.numpy(), _delta_reference(0.5, summed, w0), rtol=1e-12)
    sub = hvd.add_process_set([0, 1] if N > 2 else [1])
    try:
        with pytest.raises(NotImplementedError, match="Adasum does not support process sets"):
            hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                     op=hvd.Adasum, process_set=sub)
    finally:
        hvd.remove_process_set(sub)


def test_a_tf_compat_v1_optimizer_with_adasum_combines_the_deltas_in_a_session():
    grads = every_rank(6, [3, 3], np.float64)
    w0 = np.array([0.5, -1.0, 2.0])
    with tf.Graph().as_default():
        g = tf.compat.v1.placeholder(tf.float64, [3])
        w = tf.Variable(w0)
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.25),
                                       op=hvd.Adasum)
        if not POWER_OF_TWO:
            with pytest.raises(NotImplementedError, match=NOT_POWER_OF_TWO):
                opt.minimize(tf.reduce_sum(w * g), var_list=[w])
            return
        train = opt.minimize(tf.reduce_sum(w * g), var_list=[w])
        assert opt.get_slot(w, "delta_start") is not None
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            want = w0
            for k in range(2):
                sess.run(train, {g: grads[R][k]})
                want = _delta_reference(0.25, [every[k] for every in grads], want)
                assert np.allclose(sess.run(w), want, rtol=1e-12), k


def test_a_tf_compat_v1_optimizer_with_adasum_combines_every_nth_step_in_a_session():
    # backward_passes_per_step N: each rank takes its own steps, and on every N-th run the
    # change since the last exchange is combined with Adasum inside tf.cond (Horovod's
    # _is_comm_step); through tf.numpy_function kolo refuses, naming KOLO_TF_OPS.
    passes, lr, runs = 2, 0.25, 5
    grads = every_rank(7, [3] * runs, np.float64)
    w0 = np.array([1.5, -0.5, 0.25])
    with tf.Graph().as_default():
        g = tf.compat.v1.placeholder(tf.float64, [3])
        w = tf.Variable(w0)
        make = lambda: hvd.DistributedOptimizer(  # noqa: E731
            tf.compat.v1.train.GradientDescentOptimizer(lr), op=hvd.Adasum,
            backward_passes_per_step=passes)
        if op_library.ops() is None:
            with pytest.raises(NotImplementedError, match="tf.cond.*KOLO_TF_OPS"):
                make()
            return
        if not POWER_OF_TWO:
            with pytest.raises(NotImplementedError, match=NOT_POWER_OF_TWO):
                make().minimize(tf.reduce_sum(w * g), var_list=[w])
            return
        train = make().minimize(tf.reduce_sum(w * g), var_list=[w])
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            start, since = w0, [np.zeros(3) for _ in range(N)]  # every rank's own sum
            for k in range(runs):
                sess.run(train, {g: grads[R][k]})
                since = [s + every[k] for s, every in zip(since, grads)]
                if (k + 1) % passes:
                    want = start - lr * since[R]  # this rank's own steps
                else:
                    want = start = _delta_reference(lr, since, start)
                    since = [np.zeros(3) for _ in range(N)]
                assert np.allclose(sess.run(w), want, rtol=1e-12), k
