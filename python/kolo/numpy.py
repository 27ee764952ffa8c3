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
from kolo.common.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, remove_process_set)


def allreduce(array, op=Average, name=None, prescale_factor=1.0, postscale_factor=1.0,
              process_set=global_process_set):
    """Returns a new array with the reduction over the ranks of ``process_set``."""
    return _api.now(_api.start_allreduce(array, None, name, op, prescale_factor,
                                         postscale_factor, process_set, caller_waits=True))


def allgather(array, name=None, process_set=global_process_set):
    """Returns every rank's array concatenated along axis 0 (sizes may differ)."""
    return _api.now(_api.start_allgather(array, name, process_set, caller_waits=True))


def broadcast(array, root_rank, name=None, process_set=global_process_set):
    """Returns ``root_rank``'s array on every rank (a global rank, as in Horovod)."""
    return _api.now(_api.start_broadcast(array, root_rank, name, process_set,
                                         caller_waits=True))
