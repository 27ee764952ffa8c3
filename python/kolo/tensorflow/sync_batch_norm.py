"""Batch normalization whose statistics cover every rank's batch (Horovod's
``horovod.tensorflow.SyncBatchNormalization``), for Keras 3."""
import keras
import tensorflow as tf

from kolo.tensorflow import mpi_ops as _ops


class SyncBatchNormalization(keras.layers.BatchNormalization):
    """keras.layers.BatchNormalization that, in training, normalizes with the mean and
    variance of the batches of all ranks together: the same output and moving statistics
    as one BatchNormalization over the concatenated batch. Gradients flow through the
    allreduce of the sums. The ranks must call it together (each training step).

    Horovod's signature: ``fused`` first (False; True or None raise Horovod's ValueError),
    then keyword arguments only. Keras 3's layer has no fused kernel, so ``fused`` goes no
    further. Without ``name``, Keras names the layer (``sync_batch_normalization``, then
    ``..._1``, ...), where Horovod gives every one that name, which a Keras model with two
    of them refuses."""

    def __init__(self, fused=False, *, process_set=_ops.global_process_set, **kwargs):
        if fused in (True, None):
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        super().__init__(**kwargs)
        self._process_set = process_set

    def _moments(self, inputs, mask):
        if mask is not None:
            raise NotImplementedError("SyncBatchNormalization does not take a mask")
        axes = list(self._reduction_axes)
        compute = tf.float32 if inputs.dtype in (tf.float16, tf.bfloat16) else inputs.dtype
        x = tf.cast(inputs, compute)
        count = tf.cast(tf.reduce_prod(tf.gather(tf.shape(x), axes)), compute)
        total, squares, n = _ops._grouped_allreduce(
            [tf.reduce_sum(x, axes), tf.reduce_sum(tf.square(x), axes), tf.reshape(count, [1])],
            op=_ops.Sum, process_set=self._process_set)
        mean = total / n
        variance = tf.maximum(squares / n - tf.square(mean), 0)
        return tf.cast(mean, inputs.dtype), tf.cast(variance, inputs.dtype)
