"""The collectives of ``kolo.torch`` that start an operation and return a handle
(Horovod's ``*_async``), the in-place forms, ``poll`` and ``synchronize``, ``join`` and
``barrier``: everything of ``horovod.torch.mpi_ops`` that autograd does not see, with
Horovod's signatures, and the blocking forms that kolo.torch.autograd runs. Most are
kolo.common.collectives' ``Collectives.form`` of its ``start_*`` methods (written once for
every binding) over the torch adapter (kolo.torch._tensors).
"""
import torch

from kolo.common.collectives import Collectives
from kolo.common.names import part_name
from kolo.common.ops import Average
from kolo.common.process_sets import _set_size, global_process_set
from kolo.torch import _tensors
from kolo.torch.basics import _check_join_device

_api = Collectives(_tensors.ADAPTER)
poll = _api.poll
_wait = _api.handles.wait  # synchronize's own path: the table's method, no layer between


def synchronize(handle):
    """Waits for ``handle`` and returns its result: a tensor, a tuple for grouped ops and
    alltoall, None for barrier. None for an unknown or already synchronized handle (as
    Horovod). The callable that sparse_allreduce_async() returns is called. A wait that a
    signal interrupts (KeyboardInterrupt, a timeout handler) leaves the handle waitable."""
    if callable(handle):
        return handle()
    return _wait(handle)


_release = _api.release

allreduce_async = _api.form(_api.start_allreduce)
allreduce_async_ = _api.form(_api.start_allreduce, in_place=True)
allreduce_ = _api.form(_api.start_allreduce, in_place=True, waits=True)
grouped_allreduce_async = _api.form(_api.start_grouped_allreduce)
grouped_allreduce_async_ = _api.form(_api.start_grouped_allreduce, in_place=True)
grouped_allreduce_ = _api.form(_api.start_grouped_allreduce, in_place=True, waits=True)
allgather_async = _api.form(_api.start_allgather)
grouped_allgather_async = _api.form(_api.start_grouped_allgather)
broadcast_async = _api.form(_api.start_broadcast)
broadcast_async_ = _api.form(_api.start_broadcast, in_place=True)
broadcast_ = _api.form(_api.start_broadcast, in_place=True, waits=True)
alltoall_async = _api.form(_api.start_alltoall)
reducescatter_async = _api.form(_api.start_reducescatter)
grouped_reducescatter_async = _api.form(_api.start_grouped_reducescatter)
# What Horovod's differentiable collectives run (kolo.torch.autograd): new tensors, the
# calling thread running the round.
allreduce_blocking = _api.form(_api.start_allreduce, waits=True)
grouped_allreduce_blocking = _api.form(_api.start_grouped_allreduce, waits=True)
allgather_blocking = _api.form(_api.start_allgather, waits=True)
grouped_allgather_blocking = _api.form(_api.start_grouped_allgather, waits=True)
broadcast_blocking = _api.form(_api.start_broadcast, waits=True)
alltoall_blocking = _api.form(_api.start_alltoall, waits=True)
reducescatter_blocking = _api.form(_api.start_reducescatter, waits=True)
grouped_reducescatter_blocking = _api.form(_api.start_grouped_reducescatter, waits=True)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse COO tensor by gathering every rank's indices and values (Horovod's
    algorithm). Returns a callable (not a handle) that waits and returns the reduced,
    uncoalesced sparse tensor; ``op`` Average divides the values by the set's size."""
    t = tensor
    indices = allgather_async(t._indices().transpose(0, 1).contiguous(),
                              name=part_name(name, "indices"), process_set=process_set)
    values = allgather_async(t._values().contiguous(), name=part_name(name, "values"),
                             process_set=process_set)

    def handle():
        try:
            v = synchronize(values)
        except BaseException:
            _release(indices)
            raise
        i = synchronize(indices)
        if op == Average:
            v = v / _set_size(process_set)
        if i.dim() == 0 or v.dim() == 0:
            return torch.sparse_coo_tensor(size=t.size(), dtype=t.dtype, device=t.device)
        return _tensors.sparse_coo(i.transpose(0, 1), v, t.size())
    handle.release = lambda: (_release(values), _release(indices))  # when never called
    return handle


# --- join and barrier --------------------------------------------------------------------

def join(device=-1):
    """This rank has no more data: until every rank has joined, it takes part in the others'
    allreduces with zeros. Returns the global rank that joined last (an int).

    ``device`` (Horovod's: where the zeros are made; -1, the default, is the CPU) is checked
    but needs no effect: kolo makes the zeros on the device of each allreduce the rank takes
    part in. A CUDA device that this build or machine cannot serve raises ValueError before
    the rank joins."""
    _check_join_device(device)
    return _api.join()


barrier = _api.barrier
