"""kolo for NumPy arrays, for framework-free code:

    import kolo.numpy as kn
    kn.init()
    total = kn.allreduce(np.ones(4), op=kn.Sum)

Horovod's collectives of kolo.common.collectives on NumPy arrays (the adapter in
kolo.common.host); every call returns a new array and leaves its input as it was.
"""
from kolo.common.basics import (  # noqa: F401
    init, is_initialized, local_rank, local_size, rank, shutdown, size)
from kolo.common.host import COLLECTIVES as _api
from kolo.common.collectives import KoloInternalError  # noqa: F401
from kolo.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401


def allreduce(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0):
    """Returns a new array with the reduction over all ranks."""
    return _api.now(_api.start_allreduce(array, None, name, op, prescale_factor,
                                         postscale_factor, caller_waits=True))


def allgather(array, name=None):
    """Returns every rank's array concatenated along axis 0 (sizes may differ)."""
    return _api.now(_api.start_allgather(array, name, caller_waits=True))


def broadcast(array, root_rank, name=None):
    """Returns ``root_rank``'s array on every rank."""
    return _api.now(_api.start_broadcast(array, root_rank, name, caller_waits=True))
