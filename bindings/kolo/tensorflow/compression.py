"""Gradient compression for allreduce, as in Horovod's ``horovod.tensorflow.compression``."""
import tensorflow as tf

from kolo.common.compression import CastCompressor, Compressor, NoneCompressor  # noqa: F401


class _TensorFlowCast(CastCompressor):
    is_floating = staticmethod(lambda tensor: tensor.dtype.is_floating)
    cast = staticmethod(tf.cast)


class FP16Compressor(_TensorFlowCast):
    """Casts floating tensors to float16 for the allreduce and back."""
    dtype = tf.float16


class BF16Compressor(_TensorFlowCast):
    """Casts floating tensors to bfloat16 for the allreduce and back."""
    dtype = tf.bfloat16


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
