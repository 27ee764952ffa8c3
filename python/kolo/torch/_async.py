"""The collectives of ``kolo.torch`` that start an operation and return a handle
(Horovod's ``*_async``), the in-place forms, ``poll`` and ``synchronize``, ``join`` and
``barrier``: everything of ``horovod.torch.mpi_ops`` that autograd does not see, with
Horovod's signatures. What they do is kolo.common.collectives' (written once for every
binding) over the torch adapter (kolo.torch._tensors); the differentiable forms are in
kolo.torch.autograd, and kolo.torch.mpi_ops has them all.

Every ``*_async`` form returns a handle (the core's, an int) for :func:`poll` and
:func:`synchronize`. A blocking call (``allreduce_``, ``broadcast_``, ...) tells the core
that it waits at once: the waiting thread runs the round itself (KOLO_CALLER_RUNS).
"""
import torch

from kolo.common import ops as _common_ops
from kolo.common.collectives import Collectives
from kolo.common.names import part_name
from kolo.common.ops import Average
from kolo.common.process_sets import _set_size, global_process_set
from kolo.torch import _tensors
from kolo.torch.basics import _check_join_device

_api = Collectives(_tensors.ADAPTER)


def poll(handle):
    """True once the operation behind ``handle`` has finished (then synchronize() does not
    block). ValueError for a handle that was never returned or was already synchronized."""
    return _api.poll(handle)


def synchronize(handle):
    """Waits for ``handle`` and returns its result: a tensor, a tuple for grouped ops and
    alltoall, None for barrier. None for an unknown or already synchronized handle (as
    Horovod). The callable that sparse_allreduce_async() returns is called. A wait that a
    signal interrupts (KeyboardInterrupt, a timeout handler) leaves the handle waitable."""
    if callable(handle):
        return handle()
    return _api.synchronize(handle)


_release = _api.release


def reduce_op(op, average):
    """Horovod's reduce op of a kolo.torch call (the deprecated ``average=`` included)."""
    return _common_ops.reduce_op(op, average, "kolo.torch")


def reducescatter_op(op):
    return _common_ops.reducescatter_op(op, "kolo.torch")


# --- allreduce ---------------------------------------------------------------------------

def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing ``tensor`` into a new tensor; returns a handle."""
    return _api.later(_api.start_allreduce(tensor, average, name, op, prescale_factor,
                                           postscale_factor, process_set))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing ``tensor`` in place; returns a handle."""
    return _api.later(_api.start_allreduce(tensor, average, name, op, prescale_factor,
                                           postscale_factor, process_set, True))


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces ``tensor`` in place and returns it."""
    return _api.now(_api.start_allreduce(tensor, average, name, op, prescale_factor,
                                         postscale_factor, process_set, True, True))


def allreduce_blocking(tensor, average, name, op, prescale_factor, postscale_factor,
                       process_set):
    """A new tensor with the reduction, waited for at once (kolo.torch.allreduce's
    non-differentiable path)."""
    return _api.now(_api.start_allreduce(tensor, average, name, op, prescale_factor,
                                         postscale_factor, process_set, False, True))


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts one allreduce for a list of tensors, negotiated and fused as a unit; its
    result is a tuple of new tensors."""
    return _api.later(_api.start_grouped_allreduce(tensors, average, name, op, prescale_factor,
                                                   postscale_factor, process_set))


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In place: its result is the tuple of the input tensors."""
    return _api.later(_api.start_grouped_allreduce(tensors, average, name, op, prescale_factor,
                                                   postscale_factor, process_set, True))


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces every tensor of the list in place; returns them as a tuple."""
    return _api.now(_api.start_grouped_allreduce(tensors, average, name, op, prescale_factor,
                                                 postscale_factor, process_set, True, True))


def grouped_allreduce_blocking(tensors, average, name, op, prescale_factor, postscale_factor,
                               process_set):
    """New tensors with the reductions, waited for at once (kolo.torch.grouped_allreduce's
    non-differentiable path)."""
    return _api.now(_api.start_grouped_allreduce(tensors, average, name, op, prescale_factor,
                                                 postscale_factor, process_set, False, True))


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


# --- allgather, broadcast, alltoall, reducescatter ----------------------------------------

def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's ``tensor`` along dimension 0 (its size may differ
    between ranks; the other dimensions may not)."""
    return _api.later(_api.start_allgather(tensor, name, process_set))


def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts an allgather of every tensor of the list, negotiated as one unit (one member
    failing fails all); its result is a tuple."""
    return _api.later(_api.start_grouped_allgather(tensors, name, process_set))


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting ``tensor`` from global rank ``root_rank``, in place."""
    return _api.later(_api.start_broadcast(tensor, root_rank, name, process_set, True))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting into a new tensor; ``tensor`` is not modified."""
    return _api.later(_api.start_broadcast(tensor, root_rank, name, process_set))


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Broadcasts in place and returns ``tensor``."""
    return _api.now(_api.start_broadcast(tensor, root_rank, name, process_set, True, True))


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending ``splits[i]`` rows of ``tensor`` to rank i of the set (an even split
    when None; a list, or a 1-D torch.int32 tensor). Its result is ``(output,
    received_splits)``, an int32 tensor."""
    return _api.later(_api.start_alltoall(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing ``tensor`` over the set; rank i keeps the i-th block of rows (the
    first ``rows % size`` ranks one row more)."""
    return _api.later(_api.start_reducescatter(tensor, name, op, process_set, prescale_factor,
                                               postscale_factor))


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of every tensor of the list, negotiated as one unit; its
    result is a tuple."""
    return _api.later(_api.start_grouped_reducescatter(tensors, name, op, process_set,
                                                       prescale_factor, postscale_factor))


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


def barrier(process_set=global_process_set):
    """Returns (None) once every rank of the set has called it."""
    _api.barrier(process_set)
