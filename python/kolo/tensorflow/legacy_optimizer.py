"""Horovod's ``DistributedOptimizer`` for TensorFlow 1 optimizers
(``tf.compat.v1.train.Optimizer``: ``GradientDescentOptimizer``, ``MomentumOptimizer``,
``AdamOptimizer``, ...), in a TF1 graph run by a Session or eagerly.

As Horovod's ``_DistributedOptimizer``, the wrapper is an optimizer of its own whose
``compute_gradients()`` returns the wrapped optimizer's gradients averaged over the ranks
(``minimize()`` calls it), and whose other methods are the wrapped optimizer's. The
reduction is ``DistributedGradientTape``'s (kolo.tensorflow.gradients): one grouped
allreduce of the dense gradients, tf.IndexedSlices gathered, local variables kept. With
``backward_passes_per_step`` N > 1 in a TF1 graph the gradients are summed over N runs and
reduced and applied every N-th run (kolo.tensorflow.gradient_aggregation).
"""
import tensorflow as tf

from kolo.common.ops import Adasum, groups_setting, predivided, reduce_op
from kolo.tensorflow import gradients as _gradients
from kolo.tensorflow.gradient_aggregation import (LocalGradientAggregation,
                                                  require_collectives_in_control_flow)

_ADASUM_PASSES = ("backward_passes_per_step > 1 with op=Adasum and a tf.compat.v1 optimizer in "
                  "a TF1 graph")


class _DistributedOptimizer(_gradients.SharedGradients, tf.compat.v1.train.Optimizer):
    """Wraps ``optimizer``: its gradients are averaged (``settings['op']``) over the set's
    ranks in compute_gradients(), then applied by ``optimizer`` itself; with ``passes``
    > 1, summed over that many runs first and applied every ``passes``-th run."""

    def __init__(self, optimizer, name, use_locking, scale_local_gradients, passes,
                 average_aggregated_gradients, **settings):
        if name is None:
            name = "Distributed%s" % type(optimizer).__name__
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._kolo_setup(scale_local_gradients, **settings)
        self._aggregation = None
        if passes > 1:
            self._aggregation = LocalGradientAggregation(
                passes, average_aggregated_gradients, settings["sparse_as_dense"], name)

    def register_local_var(self, var):
        """Horovod's: the gradient of ``var`` is not reduced; compute_gradients() returns
        this rank's (divided by the set's size with scale_local_gradients)."""
        self._kolo_local.add(var)

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's ``(gradient, variable)`` pairs, the gradients averaged
        over the ranks (under the name scope ``<name>_Allreduce``, as Horovod's); with
        backward_passes_per_step N > 1, the sums of N runs' gradients on every N-th run
        and this run's own gradients on the others."""
        pairs = self._optimizer.compute_gradients(*args, **kwargs)
        if not pairs:
            return pairs
        grads, variables = zip(*pairs)
        with tf.name_scope(self.get_name() + "_Allreduce"):
            if self._aggregation is None:
                reduced = self._kolo_reduce(list(grads), list(variables))
            else:
                reduced = self._aggregation.compute_gradients(list(grads), list(variables),
                                                              self._kolo_reduce)
        return list(zip(reduced, variables))

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        """The wrapped optimizer's; with backward_passes_per_step N > 1, only on every
        N-th run (the other runs advance ``global_step`` alone, as Horovod's)."""
        if self._aggregation is None:
            return self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                   name=name)
        grads_and_vars = list(grads_and_vars)
        return self._aggregation.apply_gradients(
            lambda: self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                    name=name),
            [g for g, _ in grads_and_vars], global_step)

    def get_slot(self, *args, **kwargs):
        return self._optimizer.get_slot(*args, **kwargs)

    def get_slot_names(self, *args, **kwargs):
        return self._optimizer.get_slot_names(*args, **kwargs)

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


class _DistributedAdasumOptimizer(tf.compat.v1.train.Optimizer):
    """Horovod's delta optimizer for op=Adasum: the wrapped optimizer applies this rank's
    gradients, then every ``backward_passes_per_step``-th step the variables' change since
    the last such step (the delta) is combined over the ranks with Adasum, and each
    variable becomes its start plus the combined delta.

    Horovod's ``_DistributedAdasumOptimizer`` describes this in its ``_apply_dense``
    methods, but its ``apply_gradients()`` (and so ``minimize()``) hands the gradients to
    the wrapped optimizer's, which never reaches them: under Horovod each rank trains on its
    own. kolo combines the deltas (docs/moving-from-horovod.md: protects data)."""

    def __init__(self, optimizer, name, use_locking, compression, backward_passes_per_step):
        if name is None:
            name = "DistributedDelta%s" % type(optimizer).__name__
        super().__init__(name=name, use_locking=use_locking)
        self._optimizer = optimizer
        self._compression = compression
        self._every = int(backward_passes_per_step)
        self._steps = None  # a tf.Variable, made with the first apply_gradients()

    def compute_gradients(self, *args, **kwargs):
        """The wrapped optimizer's, unreduced: the deltas are what travels."""
        return self._optimizer.compute_gradients(*args, **kwargs)

    def apply_gradients(self, grads_and_vars, global_step=None, name=None):
        grads_and_vars = list(grads_and_vars)
        variables = [v for g, v in grads_and_vars if g is not None]
        starts = [self._zeros_slot(v, "delta_start", self._name) for v in variables]
        if self._steps is None:
            with tf.init_scope():
                self._steps = tf.Variable(0, dtype=tf.int64, trainable=False,
                                          name=self._name + "_step_count")
        if tf.executing_eagerly():
            return self._apply_eagerly(grads_and_vars, variables, starts, global_step, name)
        if self._every > 1:
            require_collectives_in_control_flow(_ADASUM_PASSES)
        begin = tf.cond(tf.equal(self._steps, 0),
                        lambda: tf.group(*[s.assign(v) for s, v in zip(starts, variables)]),
                        tf.no_op)
        with tf.control_dependencies([begin]):
            apply = self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                    name=name)
        with tf.control_dependencies([apply]):
            if self._every == 1:
                exchanged = self._exchange(starts, variables)
            else:  # every N-th step, as Horovod's _is_comm_step
                exchanged = tf.cond(
                    tf.equal(self._steps % self._every, self._every - 1),
                    lambda: self._exchange(starts, variables), tf.no_op)
        with tf.control_dependencies([exchanged]):
            return self._steps.assign_add(1).op

    def _exchange(self, starts, variables):
        """In a graph: each variable becomes its start plus the Adasum of the ranks'
        changes since then, which becomes the next start."""
        deltas = [v.read_value() - s.read_value() for s, v in zip(starts, variables)]
        combined = self._combine(deltas)
        ends = [s.assign_add(d) for s, d in zip(starts, combined)]
        return tf.group(*[v.assign(e) for v, e in zip(variables, ends)])

    def _apply_eagerly(self, grads_and_vars, variables, starts, global_step, name):
        if int(self._steps.numpy()) == 0:
            for s, v in zip(starts, variables):
                s.assign(v)
        apply = self._optimizer.apply_gradients(grads_and_vars, global_step=global_step,
                                                name=name)
        if int(self._steps.numpy()) % self._every == self._every - 1:
            combined = self._combine([v - s for s, v in zip(starts, variables)])
            for s, v, d in zip(starts, variables, combined):
                v.assign(s.assign_add(d))
        self._steps.assign_add(1)
        return apply

    def _combine(self, deltas):
        if not deltas:
            return []
        return _gradients.grouped_allreduce(deltas, compression=self._compression, op=Adasum)

    def get_slot(self, var, name):
        mine = super().get_slot(var, name)
        return mine if mine is not None else self._optimizer.get_slot(var, name)

    def get_slot_names(self):
        return super().get_slot_names() + self._optimizer.get_slot_names()

    def variables(self, *args, **kwargs):
        return self._optimizer.variables(*args, **kwargs)


def DistributedOptimizer(optimizer, name, use_locking, compression, sparse_as_dense,
                         backward_passes_per_step, op, gradient_predivide_factor,
                         average_aggregated_gradients, num_groups, groups, process_set,
                         scale_local_gradients):
    """Horovod's wrapper of a tf.compat.v1 optimizer, with Horovod's refusals
    (kolo.tensorflow.DistributedOptimizer checks the arguments every optimizer shares)."""
    if op == Adasum:
        if process_set.process_set_id != 0:
            raise NotImplementedError("Adasum does not support process sets yet")
        if int(backward_passes_per_step) > 1:
            require_collectives_in_control_flow(_ADASUM_PASSES)
        return _DistributedAdasumOptimizer(optimizer, name, use_locking, compression,
                                           backward_passes_per_step)
    predivided(op, gradient_predivide_factor)  # Horovod's refusal of f != 1 but for Average
    reduce_op(op, None, "kolo.tensorflow")
    groups = groups_setting(num_groups, groups)
    if groups is not None and not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "tf.Variable.")
    passes = int(backward_passes_per_step)
    if passes > 1:
        if tf.executing_eagerly():
            raise ValueError("backward_passes_per_step > 1 is not yet supported for "
                             "_LegacyOptimizer with eager execution.")
        require_collectives_in_control_flow(
            "backward_passes_per_step > 1 with a tf.compat.v1 optimizer in a TF1 graph")
    return _DistributedOptimizer(optimizer, name, use_locking, scale_local_gradients, passes,
                                 average_aggregated_gradients, op=op,
                                 compression=compression, sparse_as_dense=sparse_as_dense,
                                 gradient_predivide_factor=gradient_predivide_factor,
                                 groups=groups, process_set=process_set)
