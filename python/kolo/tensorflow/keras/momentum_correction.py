"""Horovod's momentum correction (Goyal et al., "Accurate, Large Minibatch SGD") for Keras 3
optimizers, used by the learning-rate callbacks.

When a callback changes the learning rate from ``old`` to ``new`` before a batch, Horovod
sets the optimizer's momentum to ``momentum * new / old`` for that one batch. A Keras 3
optimizer keeps ``momentum`` as a Python number that its compiled step reads as a
constant, so assigning it changes nothing. The same step is had through the momentum
buffers, which are variables: SGD and RMSprop multiply the buffer by ``momentum`` and by
nothing else, so scaling the buffers by ``r = new / old`` before the step gives the buffer
Horovod's step gives; Nesterov SGD also adds ``momentum * buffer`` to the variable, so after
the step ``momentum * (r - 1) * buffer`` more is added. A buffer that the step did not
update (a variable without a gradient, or a DistributedOptimizer call that only
accumulates) gets its value from before the batch back, as Horovod's would keep it.
"""
import keras
import tensorflow as tf


class MomentumBuffers:
    """The correction for one Keras SGD or RMSprop optimizer (built, momentum > 0)."""

    def __init__(self, optimizer, buffers):
        self.optimizer = optimizer
        self._buffers = list(buffers)
        self._variables = list(optimizer._trainable_variables)  # buffer i is variable i's
        self._nesterov = bool(getattr(optimizer, "nesterov", False))
        self._momentum = float(optimizer.momentum)
        self._before = [tf.Variable(tf.zeros(b.shape, b.dtype), trainable=False)
                        for b in self._buffers]
        self._ratio = None

    @tf.function
    def _scale(self, ratio):
        for buffer, before in zip(self._buffers, self._before):
            before.assign(buffer)
            buffer.assign(before * tf.cast(ratio, buffer.dtype))  # as _settle computes it

    @tf.function
    def _settle(self, ratio):
        for buffer, before, variable in zip(self._buffers, self._before, self._variables):
            r = tf.cast(ratio, buffer.dtype)
            updated = tf.reduce_any(tf.not_equal(tf.convert_to_tensor(buffer), before * r))
            if self._nesterov:
                extra = tf.cast(self._momentum, buffer.dtype) * (r - 1) * buffer
                variable.assign_add(tf.where(updated, extra, tf.zeros_like(extra)))
            buffer.assign(tf.where(updated, tf.convert_to_tensor(buffer), before))

    def begin(self, ratio):
        """Before the batch whose learning rate changed by ``ratio``."""
        self._ratio = tf.constant(ratio, tf.float64)
        self._scale(self._ratio)

    def end(self):
        """After that batch."""
        if self._ratio is not None:
            self._settle(self._ratio)
            self._ratio = None


def for_optimizer(optimizer, trainable_variables):
    """The correction for ``optimizer``, or None when kolo knows no way to apply it (an
    optimizer other than SGD or RMSprop that keeps momentum as a number)."""
    if isinstance(optimizer, keras.optimizers.SGD):
        name = "momentums"
    elif isinstance(optimizer, keras.optimizers.RMSprop):
        name = "_momentums"
    else:
        return None
    if not optimizer.built:
        optimizer.build(trainable_variables)
    return MomentumBuffers(optimizer, getattr(optimizer, name))
