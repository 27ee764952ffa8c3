"""kolo's TensorFlow op library: loaded for the TensorFlow that runs the tests (built
with kolo for it, or compiled for it on first import), or the tf.numpy_function path
when KOLO_TF_OPS=0 says so."""
import pytest
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


# The ops that move tensors, which have GPU kernels where kolo's core has its GPU path.
_TENSOR_OPS = ["KoloAllreduce", "KoloGroupedAllreduce", "KoloAllgather", "KoloGroupedAllgather",
               "KoloBroadcast", "KoloGroupedBroadcast", "KoloReducescatter",
               "KoloGroupedReducescatter", "KoloAlltoall"]


def _kernels(op):
    from tensorflow.python.framework import kernels
    return {k.device_type: k for k in kernels.get_registered_kernels_for_op(op).kernel}


def test_gpu_kernels_are_registered_where_kolo_has_its_gpu_path():
    """Built with kolo's GPU path (the build's library, and the one compiled on first
    import), the tensor ops have GPU kernels for the dtypes NCCL carries in a GPU's memory;
    int32 (host memory on TensorFlow's GPU devices) and 16-bit integers (not in NCCL) stay
    on the CPU kernels, as do join and barrier; alltoall's splits are host memory. Without
    the GPU path, CPU kernels only."""
    if op_library.ops() is None:
        pytest.skip("the op library is not used here: %s" % op_library.fallback_reason())
    for op in _TENSOR_OPS:
        kernels = _kernels(op)
        assert set(kernels) == ({"CPU", "GPU"} if hvd.cuda_built() else {"CPU"}), (op, kernels)
        assert not kernels["CPU"].constraint, op  # the CPU kernels take every dtype
        if "GPU" not in kernels:
            continue
        (types,) = [c.allowed_values.list.type for c in kernels["GPU"].constraint
                    if c.name == "T"]
        assert {tf.as_dtype(t) for t in types} == {
            tf.uint8, tf.int8, tf.int64, tf.float16, tf.bfloat16, tf.float32, tf.float64,
            tf.bool}, op
        host = ["splits", "received_splits"] if op == "KoloAlltoall" else []
        assert list(kernels["GPU"].host_memory_arg) == host, op
    for op in ["KoloJoin", "KoloBarrier"]:
        assert set(_kernels(op)) == {"CPU"}, op


def test_an_op_placed_on_a_missing_gpu_runs_on_the_cpu_kernel():
    """Where TensorFlow has no GPU (this CPU wheel, a CPU-only node) a collective asked for
    on /GPU:0 runs on the CPU kernel (TensorFlow's soft placement), with the same result."""
    if tf.config.list_physical_devices("GPU"):
        pytest.skip("this TensorFlow has a GPU: test_tf_gpu.py covers it")
    with tf.device("/GPU:0"):
        x = tf.ones([4]) * (R + 1)
        y = hvd.allreduce(x, op=hvd.Sum, name="op_library.soft_placement")
    assert "CPU" in y.device
    assert y.numpy().tolist() == [N * (N + 1) / 2] * 4
