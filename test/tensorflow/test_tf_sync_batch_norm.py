"""kolo.tensorflow.SyncBatchNormalization (Horovod 0.28, horovod/tensorflow/sync_batch_norm.py:
a Keras BatchNormalization whose batch statistics are taken over every rank's batch). With
equal batches on every rank it equals one keras.layers.BatchNormalization on the
concatenated batch: the output rows, the moving statistics, the inference output, and the
gradients (the input's: of the sum of every rank's loss; gamma's and beta's: summed over the
ranks). float32, compared to rtol=atol=1e-4.
"""
import numpy as np
import pytest
import tensorflow as tf

import keras
import kolo.tensorflow as hvd

from tf_common import N, R, up

TOL = dict(rtol=1e-4, atol=1e-4)
GAMMA = np.array([1.5, 0.5, 2.0], np.float32)
BETA = np.array([0.1, -0.2, 0.3], np.float32)


def _x(r, shape):
    rng = np.random.default_rng(50 + r)
    return (rng.normal(size=shape) * (r + 1) + r).astype(np.float32)


def _pair(shape):
    sync = hvd.SyncBatchNormalization(momentum=0.9, epsilon=1e-3)
    ref = keras.layers.BatchNormalization(momentum=0.9, epsilon=1e-3)
    for layer in (sync, ref):
        layer.build((None,) + shape[1:])
        layer.gamma.assign(GAMMA)
        layer.beta.assign(BETA)
    return sync, ref


def _np(t):
    return keras.ops.convert_to_numpy(t)


SHAPES = [(4, 3), (2, 2, 3, 3)]  # per-rank batch ..., channels last


def test_is_a_keras_batch_normalization():
    assert issubclass(hvd.SyncBatchNormalization, keras.layers.BatchNormalization)


def test_takes_horovods_signature_fused_first():
    # Horovod's SyncBatchNormalization(fused=False, **kwargs): fused=False accepted, also
    # positionally; True and None refused with Horovod's ValueError.
    for layer in (hvd.SyncBatchNormalization(fused=False, momentum=0.5),
                  hvd.SyncBatchNormalization(False, axis=1)):
        assert isinstance(layer, keras.layers.BatchNormalization)
    assert layer.axis == 1
    for fused in (True, None):
        with pytest.raises(ValueError, match="does not support fused=True"):
            hvd.SyncBatchNormalization(fused=fused)
    # Two in one model: Keras names them apart (Horovod names both the same, which a
    # Keras model refuses); the config round trip keeps the layer.
    model = keras.Sequential([keras.Input((4,)), hvd.SyncBatchNormalization(fused=False),
                              hvd.SyncBatchNormalization(name="second")])
    first = model.layers[0]
    assert first.name.startswith("sync_batch_normalization") and model.layers[1].name == "second"
    again = hvd.SyncBatchNormalization.from_config(first.get_config())
    assert again.momentum == first.momentum and "fused" not in first.get_config()


@pytest.mark.parametrize("shape", SHAPES, ids=["2d", "4d"])
def test_statistics_over_all_ranks_equal_one_batch_norm_on_the_concatenated_batch(shape):
    sync, ref = _pair(shape)
    b = shape[0]
    full = np.concatenate([_x(r, shape) for r in range(N)])
    for step in range(2):  # twice: the moving statistics move twice
        out = sync(_x(R, shape) + step, training=True)
        want = ref(full + step, training=True)
        assert np.allclose(_np(out), _np(want)[R * b:(R + 1) * b], **TOL)
    assert np.allclose(_np(sync.moving_mean), _np(ref.moving_mean), **TOL)
    assert np.allclose(_np(sync.moving_variance), _np(ref.moving_variance), **TOL)
    # Inference uses the (synchronized) moving statistics: no communication, same output.
    assert np.allclose(_np(sync(_x(R, shape), training=False)),
                       _np(ref(_x(R, shape), training=False)), **TOL)


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_gradients_flow_through_the_synchronized_statistics(mode):
    shape = (4, 3)
    sync, ref = _pair(shape)
    b = shape[0]
    x = tf.Variable(_x(R, shape))

    def local():
        with tf.GradientTape() as tape:
            y = sync(x, training=True)
            loss = tf.reduce_sum(y * tf.cast(up(R, shape), tf.float32))
        return tape.gradient(loss, [x, sync.gamma, sync.beta])

    if mode == "function":
        local = tf.function(local)
    gx, ggamma, gbeta = local()
    assert gx is not None and ggamma is not None and gbeta is not None

    full = tf.Variable(np.concatenate([_x(r, shape) for r in range(N)]))
    with tf.GradientTape() as tape:
        y = ref(full, training=True)
        loss = tf.add_n([tf.reduce_sum(y[r * b:(r + 1) * b] * tf.cast(up(r, shape), tf.float32))
                         for r in range(N)])
    gfull, ggamma_ref, gbeta_ref = tape.gradient(loss, [full, ref.gamma, ref.beta])
    assert np.allclose(_np(gx), _np(gfull)[R * b:(R + 1) * b], **TOL)
    assert np.allclose(_np(hvd.allreduce(ggamma, op=hvd.Sum)), _np(ggamma_ref), **TOL)
    assert np.allclose(_np(hvd.allreduce(gbeta, op=hvd.Sum)), _np(gbeta_ref), **TOL)
