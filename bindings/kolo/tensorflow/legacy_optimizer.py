"""Horovod's ``DistributedOptimizer`` for TensorFlow 1 optimizers
(``tf.compat.v1.train.Optimizer``: ``GradientDescentOptimizer``, ``MomentumOptimizer``,
``AdamOptimizer``, ...), in a TF1 graph run by a Session or eagerly.

As Horovod's ``_DistributedOptimizer``, the wrapper is an optimizer of its own whose
``compute_gradients()`` returns the wrapped optimizer's gradients averaged over the ranks
(``minimize()`` calls it), and whose other methods are the wrapped optimizer's. The
reduction is ``DistributedGradientTape``'s (kolo.tensorflow.gradients): one grouped
allreduce of the dense gradients, tf.IndexedSlices gathered, local variables kept.
"""
import tensorflow as tf

from kolo.tensorflow import gradients as _gradients


class _DistributedOptimizer(tf.compat.v1.train.Optimizer):
    """Wraps ``optimizer``: its gradients are averaged (``settings['op']``) over the set's
    ranks in compute_gradients(), then applied by ``optimizer`` itself."""

    def __init__(self, optimizer, name, use_locking, settings, scale_local_gradients):
        if name is None:
            name = "Distributed%s" % type(optimizer).__name__
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._kolo_settings = settings
        self._kolo_local = _gradients.LocalVariables()
        self.process_set = settings["process_set"]
        self.scale_local_gradients = scale_local_gradients

    def register_local_var(self, var):
        """Horovod's: the gradient of ``var`` is not reduced; compute_gradients() returns
        this rank's (divided by the set's size with scale_local_gradients)."""
        self._kolo_local.add(var)

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's ``(gradient, variable)`` pairs, the gradients averaged
        over the ranks (under the name scope ``<name>_Allreduce``, as Horovod's)."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        with tf.name_scope(self.get_name() + "_Allreduce"):
            reduced = _gradients._reduce_shared_gradients(
                list(grads), list(variables), self._kolo_local, self.scale_local_gradients,
                self._kolo_settings)
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                               name=name)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name, use_locking, compression, sparse_as_dense,
                         backward_passes_per_step, op, gradient_predivide_factor, groups,
                         process_set, scale_local_gradients):
    """Horovod's wrapper of a tf.compat.v1 optimizer (kolo.tensorflow.DistributedOptimizer
    checks the common arguments first)."""
    if int(backward_passes_per_step) > 1:
        if tf.executing_eagerly():
            raise ValueError("backward_passes_per_step > 1 is not yet supported for "
                             "_LegacyOptimizer with eager execution.")
        raise NotImplementedError(
            "backward_passes_per_step > 1 with a tf.compat.v1 optimizer in a TF1 graph is not "
            "supported: Horovod reduces the aggregated gradients inside tf.cond, and kolo's "
            "collectives cannot run inside control flow of a TF1 graph. Pass "
            "backward_passes_per_step=1, or use a keras.optimizers optimizer "
            "(kolo.tensorflow.keras.DistributedOptimizer takes backward_passes_per_step)")
    settings = dict(op=op, compression=compression, sparse_as_dense=sparse_as_dense,
                    gradient_predivide_factor=gradient_predivide_factor, groups=groups,
                    process_set=process_set)
    return _DistributedOptimizer(optimizer, name, use_locking, settings,
                                 scale_local_gradients)


def is_legacy_optimizer(optimizer):
    return isinstance(optimizer, tf.compat.v1.train.Optimizer)

