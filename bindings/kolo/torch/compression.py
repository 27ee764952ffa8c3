"""Gradient compression for allreduce, as in Horovod."""
import torch

from kolo.common.compression import CastCompressor, Compressor, NoneCompressor  # noqa: F401


class _TorchCast(CastCompressor):
    is_floating = staticmethod(lambda tensor: tensor.dtype.is_floating_point)
    cast = staticmethod(lambda tensor, dtype: tensor.to(dtype))


class FP16Compressor(_TorchCast):
    """Casts floating tensors to float16 for the allreduce and back."""
    dtype = torch.float16


class BF16Compressor(_TorchCast):
    """Casts floating tensors to bfloat16 for the allreduce and back."""
    dtype = torch.bfloat16


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor
