"""kolo for NumPy arrays, for framework-free code:

    import kolo.numpy as kn
    kn.init()
    total = kn.allreduce(np.ones(4), op=kn.Sum)
"""
import numpy as np

from kolo import _core
from kolo._core import KoloInternalError  # noqa: F401

# Reduce operations and dtype codes come from the C++ enums through _core.
Average, Sum, Min, Max, Product = (_core.REDUCE_OPS[n]
                                   for n in ("average", "sum", "min", "max", "product"))


def _numpy_dtype(name):
    try:
        return np.dtype(name)
    except TypeError:  # bfloat16: no NumPy dtype
        return None


_DTYPES = {_numpy_dtype(name): code for name, code in _core.DTYPES.items()
           if _numpy_dtype(name) is not None}

init = _core.init
shutdown = _core.shutdown
is_initialized = _core.is_initialized
rank = _core.rank
size = _core.size
local_rank = _core.local_rank
local_size = _core.local_size


def _check(array, what):
    if not isinstance(array, np.ndarray):
        raise TypeError("%s must be a numpy.ndarray, got %s" % (what, type(array).__name__))
    if array.dtype not in _DTYPES:
        raise TypeError("%s has dtype %s, which kolo does not support" % (what, array.dtype))
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError("%s is not C-contiguous; use numpy.ascontiguousarray()" % what)


def allreduce(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0):
    """Returns a new array with the reduction over all ranks."""
    _check(array, "allreduce input")
    out = np.empty_like(array)
    h = _core.allreduce_async(array.ctypes.data, out.ctypes.data, _DTYPES[array.dtype],
                              list(array.shape), -1, name or "", op, float(prescale_factor),
                              float(postscale_factor), 0, 0)
    _core.wait(h)
    return out


def allgather(array, name=None):
    """Returns every rank's array concatenated along axis 0 (sizes may differ)."""
    _check(array, "allgather input")
    h = _core.allgather_async(array.ctypes.data, _DTYPES[array.dtype], list(array.shape), -1,
                              name or "", 0, 0)
    result = _core.wait(h)
    out = np.empty(tuple(result.shape), dtype=array.dtype)
    result.copy_to(out.ctypes.data, out.nbytes)
    return out


def broadcast(array, root_rank, name=None):
    """Returns ``root_rank``'s array on every rank."""
    _check(array, "broadcast input")
    out = array.copy()
    _core.wait(_core.broadcast_async(out.ctypes.data, _DTYPES[out.dtype], list(out.shape), -1,
                                     int(root_rank), name or "", 0, 0))
    return out
