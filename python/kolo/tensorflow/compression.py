"""Gradient compression for allreduce, as in Horovod's ``horovod.tensorflow.compression``."""
import tensorflow as tf

from kolo.common.compression import (  # noqa: F401
    CastCompressor, Compressor, NoneCompressor, compressors)


class _TensorFlowCast(CastCompressor):
    is_floating = staticmethod(lambda tensor: tensor.dtype.is_floating)
    cast = staticmethod(tf.cast)


FP16Compressor, BF16Compressor, Compression = compressors(_TensorFlowCast, tf.float16,
                                                          tf.bfloat16)
