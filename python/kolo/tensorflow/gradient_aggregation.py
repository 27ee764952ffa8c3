"""Horovod's local aggregation of a ``tf.compat.v1`` optimizer's gradients over
``backward_passes_per_step`` N > 1 passes in a TF1 graph (Horovod's
``LocalGradientAggregationHelper``): each run of the training op adds its gradients to
local sums, and every N-th run reduces the sums over the ranks and applies them; the other
runs change no variable.

The state is Horovod's: a ``tf.int32`` counter and one sum per gradient, made with
``tf.compat.v1.get_variable`` in the scope ``aggregation_variables_<name><rank>`` (another
wrapper of the same name: ``..._1``) and kept in ``tf.compat.v1.GraphKeys.LOCAL_VARIABLES``
(``local_variables_initializer()`` initializes them, as ``MonitoredTrainingSession`` does;
a broadcast of the global variables leaves them alone). One run, each step after the one
before:

1. counter = 0: the sums are zeroed (a new round of passes begins);
2. every sum += its gradient; counter += 1;
3. counter = N: the sums are reduced over the ranks (inside ``tf.cond``), counter = 0,
   and the results divided by N with ``average_aggregated_gradients``; otherwise the
   gradients of this pass come back as they are (step 4 ignores them);
4. ``apply_gradients``: counter = 0: the wrapped optimizer applies the reduced gradients;
   otherwise only ``global_step`` (if given) advances, so that it counts every run.

A collective inside ``tf.cond`` needs kolo's TensorFlow ops (kolo.tensorflow.op_library);
through ``tf.numpy_function`` kolo refuses collectives inside control flow of a TF1 graph
(kolo.tensorflow.tf1_graph), and so this aggregation too, when it is made.
"""
import tensorflow as tf

from kolo.common.basics import rank
from kolo.common.gradient_groups import replace_at
from kolo.tensorflow import op_library


def require_collectives_in_control_flow(what):
    """Raises NotImplementedError naming why, when ``what`` is built into a TF1 graph where
    kolo's collectives cannot run inside tf.cond (the tf.numpy_function path)."""
    if tf.compat.v1.executing_eagerly_outside_functions() or op_library.ops() is not None:
        return
    raise NotImplementedError(
        "%s is not supported where kolo's collectives run through tf.numpy_function (%s): "
        "it reduces inside tf.cond, and a TF1 graph's Session could pair different "
        "collectives of the ranks there. kolo's TensorFlow ops run inside tf.cond; they are "
        "used unless KOLO_TF_OPS=0, where an op library ships for this TensorFlow or a C++ "
        "compiler builds one. Otherwise pass backward_passes_per_step=1"
        % (what, op_library.fallback_reason()))


def _as_list(outputs):
    """tf.cond's outputs as a list (it may unpack a list of one)."""
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


class LocalGradientAggregation:
    """The counter and sums of one optimizer's gradients (made by compute_gradients()),
    and the graph of steps 1-4 above."""

    def __init__(self, passes, average_aggregated_gradients, sparse_as_dense, name):
        self._passes = int(passes)
        self._average = bool(average_aggregated_gradients)
        self._sparse_as_dense = sparse_as_dense
        self._name = name
        self._counter = None

    def _dense(self, grad):
        if isinstance(grad, tf.IndexedSlices):
            if not self._sparse_as_dense:  # Horovod's words
                raise ValueError("IndexedSlices are not supported when "
                                 "`backward_passes_per_step` > 1 and `sparse_as_dense` is "
                                 "False.")
            return tf.convert_to_tensor(grad)
        return grad

    def _make_variables(self, grads, variables):
        scope = "aggregation_variables_%s%d" % (self._name, rank())
        local = tf.compat.v1.GraphKeys.LOCAL_VARIABLES
        # A scope of its own (Horovod's name, "_1", ... after it): Horovod's reuse of the
        # scope would have two wrappers of one name share a counter, which each advances.
        with tf.compat.v1.variable_scope(None, default_name=scope):
            self._counter = tf.compat.v1.get_variable(
                "aggregation_counter", shape=(), dtype=tf.int32, trainable=False,
                initializer=tf.compat.v1.zeros_initializer(), collections=[local])
            sums = []
            for i, (grad, var) in enumerate(zip(grads, variables)):
                shape = grad.shape if grad.shape.is_fully_defined() else var.shape
                sums.append(tf.compat.v1.get_variable(
                    str(i), initializer=tf.zeros(shape, grad.dtype), trainable=False,
                    collections=[local, "aggregating_collection"]))
        return sums

    def compute_gradients(self, grads, variables, reduce):
        """Steps 1-3: ``grads`` (None where a variable has none) with the reduced sums in
        place on every N-th run; ``reduce(grads, variables)`` is the optimizer's
        reduction over the ranks."""
        if self._counter is not None:
            raise ValueError(
                "compute_gradients() (or minimize()) of DistributedOptimizer %r with "
                "backward_passes_per_step > 1 was called a second time; its pass counter "
                "and gradient sums serve one training op. Make one DistributedOptimizer "
                "per training op" % self._name)
        present = [i for i, g in enumerate(grads) if g is not None]
        dense = [self._dense(grads[i]) for i in present]
        present_vars = [variables[i] for i in present]
        sums = self._make_variables(dense, present_vars)
        zeroed = tf.cond(tf.equal(self._counter, 0),
                         lambda: tf.group(*[s.assign(tf.zeros_like(s)) for s in sums]),
                         tf.no_op)
        with tf.control_dependencies([zeroed]):
            added = [s.assign_add(g) for s, g in zip(sums, dense)]
        with tf.control_dependencies(added):
            counted = self._counter.assign_add(1)
        if not dense:
            return list(grads)
        with tf.control_dependencies([counted]):
            out = _as_list(tf.cond(tf.equal(self._counter, self._passes),
                                 lambda: self._reduced(sums, present_vars, reduce),
                                 lambda: [tf.identity(g) for g in dense]))
        return replace_at(list(grads), present, lambda _: out)

    def _reduced(self, sums, variables, reduce):
        reduced = reduce([s.read_value() for s in sums], variables)
        with tf.control_dependencies([g.op for g in reduced]):
            reset = self._counter.assign(0)
        with tf.control_dependencies([reset]):
            if self._average:
                return [g / tf.cast(self._passes, g.dtype) for g in reduced]
            return [tf.identity(g) for g in reduced]

    def apply_gradients(self, apply, grads, global_step):
        """Step 4: the op that runs ``apply()`` (the wrapped optimizer's apply_gradients)
        on the runs whose compute_gradients() reduced, and advances ``global_step`` on
        the others."""
        if self._counter is None:
            raise ValueError(
                "apply_gradients() of DistributedOptimizer %r with backward_passes_per_step "
                "> 1 needs the gradients of its compute_gradients() (which aggregates them "
                "over the passes); minimize() calls both" % self._name)
        def count_the_run():
            if global_step is None:
                return tf.no_op()
            return tf.group(global_step.assign_add(tf.constant(1, global_step.dtype),
                                                   read_value=False))
        with tf.control_dependencies([g.op for g in grads if g is not None]):
            return tf.group(tf.cond(tf.equal(self._counter, 0), lambda: tf.group(apply()),
                                    count_the_run))
