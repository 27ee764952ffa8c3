"""kolo.tensorflow's GPU kernels (bindings/tensorflow/kolo_tf_device.h) on eager GPU tensors:
the collective runs on the op's GPU kernel, through kolo's NCCL path after TensorFlow's
stream, and its result is a GPU tensor (a CPU kernel's result would be on the CPU: TensorFlow
would have copied the tensor to the host and back). Runs where TensorFlow sees a GPU for
every rank of the host and kolo has its GPU path and op library (scripts/gpu_check.sh's tf
step, docs/gpu.md); elsewhere every test skips, saying why."""
import numpy as np
import pytest
import tensorflow as tf

import kolo.tensorflow as hvd
from kolo.tensorflow import op_library

from tf_common import N, R

_GPUS = tf.config.list_physical_devices("GPU")
if not _GPUS:
    pytest.skip("TensorFlow %s sees no GPU here" % tf.__version__, allow_module_level=True)
if not hvd.cuda_built():
    pytest.skip("this kolo build has no GPU path (KOLO_WITH_CUDA)", allow_module_level=True)
if hvd.local_size() > len(_GPUS):
    pytest.skip("%d ranks on this host share %d GPU(s): NCCL needs one per rank"
                % (hvd.local_size(), len(_GPUS)), allow_module_level=True)
if op_library.ops() is None:
    pytest.skip("the op library is not used: %s" % op_library.fallback_reason(),
                allow_module_level=True)

GPU = "/GPU:%d" % hvd.local_rank()
SUM = N * (N + 1) // 2  # the ranks' (R + 1) summed
GPU_DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int64, tf.uint8, tf.int8]


def on_gpu(t):
    return "GPU" in t.device


@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=[d.name for d in GPU_DTYPES])
def test_allreduce_runs_on_the_gpu_kernel_and_leaves_the_result_on_the_gpu(dtype):
    with tf.device(GPU):
        x = tf.cast(tf.range(10) % 3, dtype) * (R + 1)
        y = hvd.allreduce(x, op=hvd.Sum, name="gpu.allreduce." + dtype.name)
    assert on_gpu(y), y.device
    np.testing.assert_array_equal(tf.cast(y, tf.float64).numpy(), (np.arange(10) % 3) * SUM)


def test_grouped_allreduce_averages_every_tensor_on_the_gpu():
    with tf.device(GPU):
        xs = [tf.fill([n], float(R + 1)) for n in (1, 17, 4096)]
        ys = hvd.grouped_allreduce(xs, name="gpu.grouped")
    for y, n in zip(ys, (1, 17, 4096)):
        assert on_gpu(y), y.device
        np.testing.assert_allclose(y.numpy(), np.full(n, SUM / N))


def test_allgather_with_rows_per_rank_allocates_its_result_on_the_gpu():
    with tf.device(GPU):
        x = tf.fill([R + 1, 3], float(R))
        y = hvd.allgather(x, name="gpu.allgather")
    assert on_gpu(y), y.device
    want = np.concatenate([np.full([r + 1, 3], float(r)) for r in range(N)])
    np.testing.assert_array_equal(y.numpy(), want)


def test_broadcast_alltoall_and_reducescatter_on_the_gpu():
    with tf.device(GPU):
        b = hvd.broadcast(tf.fill([5], float(R + 7)), root_rank=0, name="gpu.broadcast")
        x = tf.range(2 * N, dtype=tf.float32) + 100 * R
        swapped, received = hvd.alltoall(x, splits=[2] * N, name="gpu.alltoall")
        s = hvd.reducescatter(tf.ones([2 * N, 2]) * (R + 1), op=hvd.Sum, name="gpu.scatter")
    for t in (b, swapped, s):
        assert on_gpu(t), t.device
    np.testing.assert_array_equal(b.numpy(), np.full(5, 7.0))
    want = np.concatenate([np.arange(2 * R, 2 * R + 2) + 100 * r for r in range(N)])
    np.testing.assert_array_equal(swapped.numpy(), want)
    assert received.numpy().tolist() == [2] * N
    np.testing.assert_array_equal(s.numpy(), np.full([2, 2], float(SUM)))


def test_inside_tf_function_the_result_stays_on_the_gpu():
    @tf.function
    def step(x):
        return hvd.allreduce(x * 2, op=hvd.Sum, name="gpu.tf_function")

    with tf.device(GPU):
        y = step(tf.ones([8]) * (R + 1))
    assert on_gpu(y), y.device
    np.testing.assert_array_equal(y.numpy(), np.full(8, 2.0 * SUM))


@pytest.mark.parametrize("dtype", [tf.int32, tf.int16], ids=["int32", "int16"])
def test_dtypes_without_a_gpu_kernel_run_on_the_cpu_kernel(dtype):
    """int32 lives in host memory on TensorFlow's GPU devices, NCCL has no 16-bit integers:
    TensorFlow runs those on the CPU kernel, with the same result."""
    with tf.device(GPU):
        x = tf.cast(tf.range(6), dtype) * (R + 1)
        y = hvd.allreduce(x, op=hvd.Sum, name="gpu.cpu_kernel." + dtype.name)
    np.testing.assert_array_equal(y.numpy(), np.arange(6) * SUM)
