"""Gradient compression for allreduce, as in Horovod's ``horovod.tensorflow.compression``."""
import tensorflow as tf


class Compressor:
    """Turns a tensor into what is sent and back."""
    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class NoneCompressor(Compressor):
    pass


class _CastCompressor(Compressor):
    dtype = None

    @classmethod
    def compress(cls, tensor):
        if tensor.dtype.is_floating and tensor.dtype != cls.dtype:
            return tf.cast(tensor, cls.dtype), tensor.dtype
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor if ctx is None else tf.cast(tensor, ctx)


class FP16Compressor(_CastCompressor):
    """Casts floating tensors to float16 for the allreduce and back."""
    dtype = tf.float16


class BF16Compressor(_CastCompressor):
    """Casts floating tensors to bfloat16 for the allreduce and back."""
    dtype = tf.bfloat16


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
