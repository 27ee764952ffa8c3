"""kolo for NumPy arrays, for framework-free code:

    import kolo.numpy as kn
    kn.init()
    total = kn.allreduce(np.ones(4), op=kn.Sum)
"""
import numpy as np

from kolo.common import collectives as _engine
from kolo.common import host as _host
from kolo.common.basics import (  # noqa: F401
    init, is_initialized, local_rank, local_size, rank, shutdown, size)
from kolo.common.collectives import KoloInternalError  # noqa: F401
from kolo.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401


def _check(array, what):
    if not isinstance(array, np.ndarray):
        raise TypeError("%s must be a numpy.ndarray, got %s" % (what, type(array).__name__))
    if array.dtype not in _host.NP_CODES:
        raise TypeError("%s has dtype %s, which kolo does not support" % (what, array.dtype))
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError("%s is not C-contiguous; use numpy.ascontiguousarray()" % what)


def allreduce(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0):
    """Returns a new array with the reduction over all ranks."""
    _check(array, "allreduce input")
    out = np.empty_like(array)
    _engine.wait(_engine.allreduce_async(_host.view(array), out.ctypes.data, name, op,
                                         prescale_factor, postscale_factor, 0))
    return out


def allgather(array, name=None):
    """Returns every rank's array concatenated along axis 0 (sizes may differ)."""
    _check(array, "allgather input")
    result = _engine.wait(_engine.allgather_async(_host.view(array), name, 0))
    out = np.empty(tuple(result.shape), dtype=array.dtype)
    result.copy_to(out.ctypes.data, out.nbytes)
    return out


def broadcast(array, root_rank, name=None):
    """Returns ``root_rank``'s array on every rank."""
    _check(array, "broadcast input")
    out = array.copy()
    _engine.wait(_engine.broadcast_async(_host.view(out), int(root_rank), name, 0))
    return out
