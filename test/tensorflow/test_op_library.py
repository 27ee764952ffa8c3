"""kolo's TensorFlow op library: loaded for the TensorFlow that runs the tests (built
with kolo for it, or compiled for it on first import), or the tf.numpy_function path
when KOLO_TF_OPS=0 says so."""
import tensorflow as tf

import kolo.tensorflow as hvd
from kolo.common import engine
from kolo.tensorflow import op_library

from tf_common import N, R


def test_the_op_library_serves_this_tensorflow_unless_told_not_to():
    if not engine.tf_ops_enabled():
        assert op_library.ops() is None
        assert op_library.fallback_reason() == "KOLO_TF_OPS=0"
        return
    assert op_library.ops() is not None, (
        "TensorFlow %s: %s" % (tf.__version__, op_library.fallback_reason()))
    assert op_library.fallback_reason() == ""


def test_a_collective_is_one_kolo_op_in_the_graph():
    @tf.function
    def step(x):
        return hvd.allreduce(x, op=hvd.Sum, name="op_library.graph")

    x = tf.ones([3]) * (R + 1)
    assert step(x).numpy().tolist() == [N * (N + 1) / 2] * 3
    types = {op.type for op in step.get_concrete_function(x).graph.get_operations()}
    if op_library.ops() is None:
        assert "PyFunc" in types or "EagerPyFunc" in types, types
    else:
        assert "KoloGroupedAllreduce" in types and not types & {"PyFunc", "EagerPyFunc"}, types
