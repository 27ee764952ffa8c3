"""kolo.tensorflow.DistributedGradientTape (Horovod 0.28, horovod/tensorflow/__init__.py):
gradients averaged (op, gradient_predivide_factor, groups, compression), None kept,
IndexedSlices (an embedding's gradient) reduced sparse and with sparse_as_dense=True, and
training equivalence: N ranks with BATCH/N samples each end with the weights of one
process training on the whole BATCH (computed on every rank with plain TF/Keras),
to rtol=1e-5, atol=1e-6 (float32).
"""
import numpy as np
import pytest
import tensorflow as tf

import keras
import kolo.tensorflow as hvd

from tf_common import (BATCH, F64, LR, N, R, STEPS, assert_same_on_every_rank,
                       assert_weights_close, global_data, initial_weights, make_model, mse,
                       reference_train, up)


def _tape_grads(dtape_kwargs, persistent=False, sources=2):
    a = tf.Variable(tf.constant([1.0, 2.0, 3.0], F64))
    b = tf.Variable(tf.constant([[1.0, -1.0]], F64))
    unused = tf.Variable(tf.constant(1.0, F64))
    with tf.GradientTape(persistent=persistent) as tape:
        loss = (tf.reduce_sum(a * up(R, (3,))) + tf.reduce_sum(b * up(R, (1, 2), 1)))
    tape = hvd.DistributedGradientTape(tape, **dtape_kwargs)
    return tape, loss, [a, b, unused][:sources + 1]


def _mean(shape, i=0):
    return np.mean([up(k, shape, i).numpy() for k in range(N)], axis=0)


@pytest.mark.parametrize("kwargs", [{}, {"op": hvd.Average}, {"gradient_predivide_factor": 2.0},
                                    {"groups": 1}, {"num_groups": 2},
                                    {"compression": hvd.Compression.fp16}],
                         ids=["default", "average", "predivide", "groups1", "num_groups2",
                              "fp16"])
def test_distributed_gradient_tape_averages(kwargs):
    tape, loss, srcs = _tape_grads(kwargs)
    ga, gb, gu = tape.gradient(loss, srcs)
    tol = 1e-3 if "compression" in kwargs else 1e-12
    assert np.allclose(ga.numpy(), _mean((3,)), rtol=tol, atol=tol)
    assert np.allclose(gb.numpy(), _mean((1, 2), 1), rtol=tol, atol=tol)
    assert gu is None  # a source the loss does not use keeps its None
    assert ga.dtype == F64


def test_distributed_gradient_tape_sum_and_groups_as_lists():
    tape, loss, srcs = _tape_grads({"op": hvd.Sum})
    ga, gb, _ = tape.gradient(loss, srcs)
    assert np.allclose(ga.numpy(), _mean((3,)) * N)
    assert np.allclose(gb.numpy(), _mean((1, 2), 1) * N)
    a = tf.Variable(tf.ones(2, F64))
    b = tf.Variable(tf.ones(2, F64))
    with tf.GradientTape() as t:
        loss = tf.reduce_sum(a * (R + 1.0)) + tf.reduce_sum(b * (R + 2.0))
    t = hvd.DistributedGradientTape(t, groups=[[a, b]])
    ga, gb = t.gradient(loss, [a, b])
    assert np.allclose(ga.numpy(), [(N + 1) / 2.0] * 2)
    assert np.allclose(gb.numpy(), [(N + 3) / 2.0] * 2)


def test_num_groups_stands_for_groups_only_where_groups_is_not_given():
    # Horovod's rule: the deprecated num_groups warns, and groups, when given, is kept
    # (here an invalid one, so that which of the two was taken shows).
    with pytest.warns(DeprecationWarning, match="num_groups"):
        with pytest.raises(ValueError, match="groups should be a non-negative integer"):
            hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1),
                                     num_groups=2, groups=-1)


def test_distributed_gradient_tape_keeps_persistence():
    tape, loss, srcs = _tape_grads({}, persistent=True, sources=1)
    g1 = tape.gradient(loss, srcs[:1])[0]
    g2 = tape.gradient(loss, srcs[:1])[0]
    assert np.allclose(g1.numpy(), _mean((3,))) and np.allclose(g2.numpy(), g1.numpy())
    assert isinstance(tape, tf.GradientTape)


def test_distributed_gradient_tape_takes_output_gradients():
    a = tf.Variable(tf.constant([1.0, 2.0], F64))
    with tf.GradientTape() as tape:
        target = a * 3.0  # a vector target: output_gradients weight it
    tape = hvd.DistributedGradientTape(tape)
    (g,) = tape.gradient(target, [a], output_gradients=[up(R, (2,))])
    assert np.allclose(g.numpy(), 3.0 * _mean((2,)))


def test_gradient_takes_horovods_use_generic_names():
    # Horovod's gradient(target, sources, output_gradients=None, use_generic_names=False):
    # the fourth argument, also positionally; the gradients are the same averages.
    for generic in ("positional", "keyword", "local_and_global"):
        tape, loss, srcs = _tape_grads({}, sources=2)
        if generic == "positional":
            ga, gb, gu = tape.gradient(loss, srcs, None, True)
        elif generic == "keyword":
            ga, gb, gu = tape.gradient(loss, srcs, use_generic_names=True)
        else:
            local, shared = tape.get_local_and_global_gradients(loss, srcs, None, True)
            assert local == [] and all(s is v for (s, _), v in zip(shared, srcs))
            ga, gb, gu = [g for _, g in shared]
        assert np.allclose(ga.numpy(), _mean((3,))) and gu is None, generic
        assert np.allclose(gb.numpy(), _mean((1, 2), 1)), generic


def test_gradient_predivide_factor_needs_average():
    # Horovod refuses it in DistributedGradientTape(); refusing it at gradient() (on every
    # rank, before anything is sent) keeps the promise too.
    a = tf.Variable(tf.ones(2, F64))
    with pytest.raises(ValueError, match="gradient_predivide_factor"):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(a)
        tape = hvd.DistributedGradientTape(tape, op=hvd.Sum, gradient_predivide_factor=2.0)
        tape.gradient(loss, [a])
    assert np.allclose(hvd.allreduce(tf.ones(1), op=hvd.Sum).numpy(), N)


# --- IndexedSlices: an embedding's gradient ---------------------------------------------

VOCAB, DIM = 6, 2


def _ids(r):
    return [r % VOCAB, (r + 2) % VOCAB, 0, (3 * r + 1) % VOCAB]


def _dense_grad(r):
    """d/d table of sum(gather(table, ids_r) * up_r): every rank's, computed locally."""
    g = np.zeros((VOCAB, DIM))
    w = up(r, (4, DIM)).numpy()
    for p, i in enumerate(_ids(r)):
        g[i] += w[p]
    return g


def _table():
    return (np.arange(VOCAB * DIM).reshape(VOCAB, DIM) * 0.1).astype(np.float32)


@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("sparse_as_dense", [False, True])
def test_embedding_gradient_through_distributed_gradient_tape(sparse_as_dense, mode):
    layer = keras.layers.Embedding(VOCAB, DIM)
    layer.build((None,))
    layer.embeddings.assign(_table())
    opt = keras.optimizers.SGD(learning_rate=1.0)
    kinds = []

    def step(ids, w):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(ids) * w)
        tape = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
        (g,) = tape.gradient(loss, layer.trainable_variables)
        kinds.append(isinstance(g, tf.IndexedSlices))
        dense = tf.convert_to_tensor(g)
        opt.apply_gradients([(g, layer.embeddings)])
        return dense

    if mode == "function":
        step = tf.function(step)
    dense = step(tf.constant(_ids(R)), tf.cast(up(R, (4, DIM)), tf.float32))
    want = np.mean([_dense_grad(k) for k in range(N)], axis=0)
    assert kinds[0] is (not sparse_as_dense)
    assert np.allclose(dense.numpy(), want, rtol=1e-6, atol=1e-6)
    got = keras.ops.convert_to_numpy(layer.embeddings)
    assert np.allclose(got, _table() - want, rtol=1e-6, atol=1e-6)
    assert_same_on_every_rank([got])


# --- equivalence: N ranks x BATCH/N samples == 1 process x BATCH samples ---------------

@pytest.mark.parametrize("mode", ["eager", "function"])
def test_distributed_gradient_tape_training_matches_one_process(mode):
    x, y = global_data()
    w0 = initial_weights(0)
    want = reference_train(w0, x, y, momentum=0.5)

    model = make_model()
    model.set_weights(w0)
    opt = keras.optimizers.SGD(learning_rate=LR, momentum=0.5)

    def step(xb, yb):
        with tf.GradientTape() as tape:
            loss = mse(model, xb, yb)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    if mode == "function":
        step = tf.function(step)
    b = BATCH // N
    for s in range(STEPS):
        rows = slice(s * BATCH + R * b, s * BATCH + (R + 1) * b)
        step(tf.constant(x[rows]), tf.constant(y[rows]))
    assert_weights_close(model.get_weights(), want)
    assert_same_on_every_rank(model.get_weights())
