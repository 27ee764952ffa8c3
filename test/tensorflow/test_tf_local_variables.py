"""Local variables (Horovod's model-parallel support) and the helpers Horovod code imports
from ``hvd`` and ``hvd.util``.

A variable registered as local (DistributedGradientTape.register_local_source,
PartialDistributedGradientTape(local_layers=...), DistributedOptimizer.register_local_var,
PartialDistributedOptimizer(local_layers=...)) keeps this rank's gradient: it is not
reduced, so its shape may differ between ranks, and with scale_local_gradients=True (the
default) it is divided by the set's size, as Horovod does. The other gradients are
averaged. BroadcastGlobalVariablesCallback(local_variables=...) leaves such variables alone.
"""
import numpy as np
import pytest
import tensorflow as tf

import keras
import kolo.keras
import kolo.tensorflow as hvd
import kolo.tensorflow.keras as hvd_keras

from tf_common import N, R


def test_horovod_util_names():
    assert hvd._executing_eagerly() is True
    assert not tf.function(lambda: tf.constant(hvd._executing_eagerly()))().numpy()
    with tf.Graph().as_default():
        assert hvd.util._executing_eagerly() is False
    f = hvd.util._make_subgraph(lambda x: x * 2)
    assert f(tf.constant(3)).numpy() == 6 and hasattr(f, "get_concrete_function")
    calls = []
    cached = hvd.util._cache(lambda a, b: calls.append((a, b)) or len(calls))
    assert cached(1, 2) == 1 and cached(1, 2) == 1 and cached(2, 2) == 2
    v, w = tf.Variable(1.0), tf.Variable(2.0)
    refs = hvd.vars_to_refs([v, [w]])
    assert isinstance(refs, tuple) and hash(refs) is not None
    back = hvd.refs_to_vars(refs)
    assert back[0] is v and back[1][0] is w
    for name in ("_executing_eagerly", "_make_subgraph", "_cache", "vars_to_refs",
                 "refs_to_vars"):
        assert getattr(hvd, name) is getattr(hvd.util, name)


def _model(seed_rank):
    """Two Dense layers whose weights are the rank's number, so every gradient differs
    between ranks."""
    init = keras.initializers.Constant(float(seed_rank + 1))
    return keras.Sequential([keras.Input((3,)),
                             keras.layers.Dense(2, kernel_initializer=init, bias_initializer=init),
                             keras.layers.Dense(1, kernel_initializer=init, bias_initializer=init)])


def _loss(model):
    x = tf.constant([[1.0, 2.0, 3.0]]) * (R + 1)
    return tf.reduce_sum(model(x) ** 2)


def _own_grads(model):
    with tf.GradientTape() as tape:
        loss = _loss(model)
    return [g.numpy() for g in tape.gradient(loss, model.trainable_weights)]


@pytest.mark.parametrize("scale", [True, False])
def test_partial_distributed_gradient_tape_keeps_the_local_layer_gradients(scale):
    model = _model(R)
    own = _own_grads(model)
    every = hvd.allgather_object(own)
    local = model.layers[0]
    with tf.GradientTape() as tape:
        loss = _loss(model)
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=local,
                                              scale_local_gradients=scale)
    grads = tape.gradient(loss, model.trainable_weights)
    n_local = len(local.trainable_weights)
    for i, g in enumerate(grads):
        if i < n_local:
            want = own[i] / N if scale else own[i]
        else:
            want = np.mean([e[i] for e in every], axis=0)
        assert np.allclose(g.numpy(), want), (i, g.numpy(), want)
    with tf.GradientTape() as tape2:
        loss = _loss(model)
    tape2 = hvd.PartialDistributedGradientTape(tape2, local_layers=[local])
    local_pairs, global_pairs = tape2.get_local_and_global_gradients(loss,
                                                                     model.trainable_weights)
    assert [v is w for (v, _), w in zip(local_pairs, local.trainable_weights)] == [True] * n_local
    assert len(global_pairs) == len(model.trainable_weights) - n_local
    assert np.allclose(local_pairs[0][1].numpy(), own[0] / N)


def test_partial_distributed_gradient_tape_refuses_what_is_not_a_layer():
    with tf.GradientTape() as tape:
        pass
    with pytest.raises(ValueError, match="local layers"):
        hvd.PartialDistributedGradientTape(tape, local_layers=[tf.Variable(1.0)])


def test_register_local_source_in_a_tf_function_with_rank_dependent_shapes():
    # Model parallelism: each rank's local embedding has its own number of rows, which an
    # allreduce would refuse; registered as local, its gradient stays on the rank.
    table = tf.Variable(tf.ones([R + 2, 3]))
    shared = tf.Variable(tf.ones([3]))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(table * (R + 1.0)) + tf.reduce_sum(shared * (R + 1.0))
        tape = hvd.DistributedGradientTape(tape)
        tape.register_local_source(table)
        return tape.gradient(loss, [table, shared])

    g_table, g_shared = step()
    assert np.allclose(g_table.numpy(), np.full([R + 2, 3], (R + 1.0) / N))
    assert np.allclose(g_shared.numpy(), np.full([3], (N + 1) / 2))


def test_keras_distributed_optimizer_register_local_var():
    local = keras.Variable(np.zeros([R + 2], np.float32))
    shared = keras.Variable(np.zeros([2], np.float32))
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0))
    opt.register_local_var(local)
    g = float(R + 1)
    opt.apply_gradients([(tf.fill([R + 2], g), local), (tf.fill([2], g), shared)])
    assert np.allclose(keras.ops.convert_to_numpy(local), -g / N)
    assert np.allclose(keras.ops.convert_to_numpy(shared), -(N + 1) / 2)


def test_keras_partial_distributed_optimizer_trains_the_local_layer_locally():
    model = _model(R)
    own = _own_grads(model)
    every = hvd.allgather_object(own)
    start = [w.numpy() for w in model.trainable_weights]
    opt = hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(learning_rate=0.01),
                                                local_layers=[model.layers[0]],
                                                scale_local_gradients=False)
    with tf.GradientTape() as tape:
        loss = _loss(model)
    grads = tape.gradient(loss, model.trainable_weights)
    opt.apply_gradients(zip(grads, model.trainable_weights))
    for i, (w, w0) in enumerate(zip(model.trainable_weights, start)):
        g = own[i] if i < 2 else np.mean([e[i] for e in every], axis=0)
        assert np.allclose(w.numpy(), w0 - 0.01 * g, rtol=1e-5, atol=1e-6), i
    assert kolo.keras.PartialDistributedOptimizer is hvd_keras.PartialDistributedOptimizer


@pytest.mark.parametrize("local_layers", [0, 1, 2])
def test_compute_gradients_of_a_partial_distributed_optimizer(local_layers):
    # Horovod's test_partial_distributed_optimizer, with the variables themselves as keys
    # (its own code keys them by Variable.ref(), which Keras 3 variables lack): the local
    # layers' gradients are this rank's divided by the size, the others are reduced.
    model = _model(R)
    with tf.GradientTape(persistent=True) as tape:
        loss = _loss(model)
    own = tape.gradient(loss, model.trainable_weights)
    opt = hvd_keras.PartialDistributedOptimizer(keras.optimizers.Adam(), sparse_as_dense=True,
                                                local_layers=model.layers[:local_layers])
    pairs = opt._compute_gradients(loss, model.trainable_weights, tape=tape)
    assert [v for _, v in pairs] == model.trainable_weights
    local = {id(v) for layer in model.layers[:local_layers] for v in layer.trainable_weights}
    every = hvd.allgather_object([g.numpy() for g in own])
    for i, ((g, v), mine) in enumerate(zip(pairs, own)):
        if id(v) in local:
            assert np.allclose(mine.numpy(), N * g.numpy()), i
        else:
            assert np.allclose(g.numpy(), np.mean([e[i] for e in every], axis=0)), i
            assert not np.allclose(g.numpy(), mine.numpy()), i
    callable_pairs = opt._compute_gradients(lambda: _loss(model), model.trainable_weights)
    assert all(np.allclose(a.numpy(), b.numpy()) for (a, _), (b, _) in zip(callable_pairs,
                                                                            pairs))
    with pytest.raises(ValueError, match="`tape` is required"):
        opt._compute_gradients(loss, model.trainable_weights)


def test_broadcast_callback_leaves_local_variables_alone():
    model = _model(R)
    model.layers[1].trainable = False
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.0)),
                  loss="mse")
    local = model.layers[0].kernel
    callback = hvd_keras.callbacks.BroadcastGlobalVariablesCallback(N - 1,
                                                                    local_variables=local)
    model.fit(np.ones([2, 3], np.float32), np.ones([2, 1], np.float32), batch_size=2,
              epochs=1, verbose=0, callbacks=[callback])
    assert np.allclose(local.numpy(), R + 1.0)  # its own value
    assert np.allclose(model.layers[0].bias.numpy(), N)  # rank N - 1's
    assert np.allclose(model.layers[1].kernel.numpy(), N)
    with pytest.raises(ValueError, match="local variables"):
        hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[1.0])
