"""Horovod's gradient compression, framework-neutral: a binding gives the cast."""


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


class CastCompressor(Compressor):
    """Casts floating tensors to ``dtype`` for the collective and back; a binding's
    subclass says what is floating and how to cast."""
    dtype = None

    @staticmethod
    def is_floating(tensor):
        raise NotImplementedError

    @staticmethod
    def cast(tensor, dtype):
        raise NotImplementedError

    @classmethod
    def compress(cls, tensor):
        if cls.is_floating(tensor) and tensor.dtype != cls.dtype:
            return cls.cast(tensor, cls.dtype), tensor.dtype
        return tensor, None

    @classmethod
    def decompress(cls, tensor, ctx):
        return tensor if ctx is None else cls.cast(tensor, ctx)


def compressors(cast, float16, bfloat16):
    """Horovod's ``FP16Compressor``, ``BF16Compressor`` and ``Compression`` (``none``,
    ``fp16``, ``bf16``) of a binding, given its ``cast`` (a CastCompressor subclass that
    says what is floating and how to cast) and its float16 and bfloat16 dtypes."""
    def compressor(name, dtype, words):
        return type(name, (cast,), {
            "dtype": dtype, "__module__": cast.__module__,
            "__doc__": "Casts floating tensors to %s for the allreduce and back." % words})
    fp16 = compressor("FP16Compressor", float16, "float16")
    bf16 = compressor("BF16Compressor", bfloat16, "bfloat16")
    compression = type("Compression", (), {
        "none": NoneCompressor, "fp16": fp16, "bf16": bf16, "__module__": cast.__module__,
        "__doc__": "The compressions of allreduce: none, fp16, bf16 (Horovod's names)."})
    return fp16, bf16, compression
