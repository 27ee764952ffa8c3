"""Collectives built into a TensorFlow 1 graph: a ``tf.Graph`` (``tf.compat.v1``) that a
``tf.compat.v1.Session`` runs.

Two things differ from ``tf.function``, where TensorFlow's automatic control dependencies
run the stateful ops of a function in program order on every rank:

- A Session runs the ops of one ``Session.run`` in whatever order its threads take them,
  a different one on each rank, so call order cannot pair unnamed collectives. As
  Horovod names a collective in a graph after its op, kolo names an unnamed one after
  its op's name scope (``KoloAllreduce``, ``KoloAllreduce_3``,
  ``gradients/.../KoloAllgather``): TensorFlow makes it unique within the graph, and it
  is the same on every rank that builds the same graph. The collective pairs by that name.
- A collective waits for the other ranks. Run as a ``tf.numpy_function`` it would hold
  one of the Session's inter-op threads meanwhile (by default one per CPU core); with more
  collectives ready than threads, each rank could hold all its threads with collectives
  that the other ranks have not started, and wait for ever. So the wait runs in the
  ``IteratorGetNext`` op of a tf.data iterator, which TensorFlow runs on a thread of its
  own: a ``receive`` op (a ``tf.numpy_function`` that returns at once) takes the inputs,
  and the iterator's dataset, one element each time the op runs, runs the collective
  on them.

Collectives inside control flow or a function of a TF1 graph (``tf.cond``,
``tf.while_loop``, a ``tf.function`` called while the graph is built) are refused: a
Session runs them in no fixed order either, and neither remedy above reaches inside them.
"""
import numpy as np
import tensorflow as tf

from kolo.tensorflow.errors import raising_tf_errors


def building(what):
    """Whether the collective ``what`` is being built into a TF1 graph (not executed
    eagerly, not traced by tf.function). Raises NotImplementedError inside control flow
    or a function of a TF1 graph."""
    if tf.compat.v1.executing_eagerly_outside_functions():
        return False  # eager code, or a tf.function traced from it
    if not tf.compat.v1.get_default_graph().building_function:
        return True
    raise NotImplementedError(
        "kolo.tensorflow.%s inside tf.cond, tf.while_loop or a function of a TF1 graph "
        "(tf.compat.v1) is not supported: a Session runs such ops in no fixed order, so "
        "the ranks could pair different collectives. Build the collective in the graph "
        "itself, outside the control flow, or run eagerly or in a tf.function" % what)


class _Handoff:
    """Takes the inputs of one collective op from its ``receive`` op to its ``run`` op, one
    step at a time. The arrays share the input tensors' memory and keep it alive."""

    def __init__(self, kernel):
        self._kernel = kernel
        self._inputs = None

    def receive(self, *arrays):
        # A step that failed between receive and run left its inputs here, never sent:
        # this step's replace them.
        self._inputs = [np.asarray(a) for a in arrays]
        return np.int64(0)

    def run(self):
        inputs, self._inputs = self._inputs, None
        if inputs is None:
            raise RuntimeError("kolo: a TF1-graph collective ran before its inputs arrived")
        try:
            return tuple(raising_tf_errors(self._kernel, inputs))
        except (StopIteration, IndexError) as e:
            # tf.data would take these for the end of its data and end the iterator.
            raise RuntimeError("%s: %s" % (type(e).__name__, e)) from None


def _one_element_per_step(handoff, dtypes, shapes):
    """An endless dataset whose every element is the result of ``handoff.run``, computed
    only when an element is asked for (no prefetching, which would run it early)."""
    def element(_):
        outs = tf.numpy_function(tf.autograph.experimental.do_not_convert(handoff.run), [],
                                 list(dtypes), stateful=True, name="collective")
        for out, shape in zip(outs, shapes):
            out.set_shape(shape)
        return tuple(outs)

    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    options.autotune.enabled = False
    dataset = tf.data.Dataset.from_tensors(np.int64(0)).repeat().map(element)
    return dataset.with_options(options)


def collective(make_kernel, name, tensors, dtypes, shapes, what):
    """The outputs (a list) of the collective ``make_kernel(name)`` on ``tensors``, as ops
    of the default TF1 graph; an unnamed collective is named after its name scope."""
    with tf.name_scope("Kolo" + what.title()) as scope:
        handoff = _Handoff(make_kernel(name or scope.rstrip("/")))
        iterator = tf.compat.v1.data.make_one_shot_iterator(
            _one_element_per_step(handoff, dtypes, shapes))
        received = tf.numpy_function(tf.autograph.experimental.do_not_convert(handoff.receive),
                                     list(tensors), tf.int64, stateful=True, name="receive")
        with tf.control_dependencies([received]):
            return list(iterator.get_next(name="run"))
