"""Gradient compression for allreduce, as in Horovod."""
import torch

from kolo.common.compression import (  # noqa: F401
    CastCompressor, Compressor, NoneCompressor, compressors)


class _TorchCast(CastCompressor):
    is_floating = staticmethod(lambda tensor: tensor.dtype.is_floating_point)
    cast = staticmethod(lambda tensor, dtype: tensor.to(dtype))


FP16Compressor, BF16Compressor, Compression = compressors(_TorchCast, torch.float16,
                                                          torch.bfloat16)
