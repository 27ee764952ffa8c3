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
