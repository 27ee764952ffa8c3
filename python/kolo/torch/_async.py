"""The collectives of ``kolo.torch`` that start an operation and return a handle
(Horovod's ``*_async``), the in-place forms, ``poll`` and ``synchronize``, ``join`` and
``barrier``: everything of ``horovod.torch.mpi_ops`` that autograd does not see. The
differentiable forms are in kolo.torch.autograd; kolo.torch.mpi_ops has them all.

Every ``*_async`` form returns a handle (the core's, an int) for :func:`poll` and
:func:`synchronize`.
"""
import torch

from kolo.common import collectives as _engine
from kolo.common import ops as _common_ops
from kolo.common.ops import Average
from kolo.common.refusals import announces_refusals
from kolo.torch import _tensors
from kolo.torch._tensors import check_list as _check_list
from kolo.torch._tensors import check_tensor as _check_tensor
from kolo.torch._tensors import READER as _READER
from kolo.torch._tensors import stream as _stream
from kolo.torch._tensors import view as _view
from kolo.torch.basics import _check_join_device, _on_new_run
from kolo.torch.process_sets import _root_in_set, _set_id, _set_size, global_process_set

# handle -> finisher of the operations started here (kolo.common.collectives.Handles).
_handles = _engine.Handles()
_register = _handles.add
_on_new_run(_handles.clear)  # a new run (init) or none (shutdown): the old handles are gone


def poll(handle):
    """True once the operation behind ``handle`` has finished (then synchronize() does not
    block). ValueError for a handle that was never returned or was already synchronized."""
    return _handles.poll(handle)


def synchronize(handle):
    """Waits for ``handle`` and returns its result: a tensor, a tuple for grouped ops and
    alltoall, None for barrier. None for an unknown or already synchronized handle (as
    Horovod). The callable that sparse_allreduce_async() returns is called. A wait that a
    signal interrupts (KeyboardInterrupt, a timeout handler) leaves the handle waitable."""
    if callable(handle):
        return handle()
    return _handles.wait(handle)


def _release(handle):
    """Forgets a handle that will not be synchronized (an error abandoned it): its name is
    free again once its operation completes."""
    _handles.release(handle)


def reduce_op(op, average):
    """Horovod's reduce op of a kolo.torch call (the deprecated ``average=`` included)."""
    return _common_ops.reduce_op(op, average, "kolo.torch")


def reducescatter_op(op):
    return _common_ops.reducescatter_op(op, "kolo.torch")


# --- allreduce ---------------------------------------------------------------------------

# The allreduces hand the tensors themselves to the engine: the core reads and checks them
# (_tensors.READER), one call per operation however many tensors (issue 35).

# A blocking call (allreduce_, grouped_allreduce_, kolo.torch.allreduce) tells the core it
# waits at once (``caller_waits``): the core does not wake its background thread, and the
# waiting thread runs the negotiation round and the reduction itself (KOLO_CALLER_RUNS).

@announces_refusals("allreduce")
def _allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
               in_place, caller_waits):
    """Starts an allreduce of ``tensor``, in place or into a new tensor; the handle's result
    is the tensor reduced into."""
    op = reduce_op(op, average)
    output = None
    if not in_place:
        _check_tensor(tensor, "allreduce input")  # before empty_like, which takes anything
        output = torch.empty_like(tensor)
    h = _engine.allreduce_tensor_async(_READER, tensor, output, "allreduce input", name, op,
                                       prescale_factor, postscale_factor,
                                       _set_id(process_set), caller_waits)
    result = tensor if in_place else output
    return _register(h, lambda out, _input=tensor: result)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing ``tensor`` into a new tensor; returns a handle."""
    return _allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                      False, False)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing ``tensor`` in place; returns a handle."""
    return _allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                      True, False)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces ``tensor`` in place and returns it."""
    return synchronize(_allreduce(tensor, average, name, op, prescale_factor, postscale_factor,
                                  process_set, True, True))


def allreduce_blocking(tensor, average, name, op, prescale_factor, postscale_factor,
                       process_set):
    """A new tensor with the reduction, waited for at once (kolo.torch.allreduce's
    non-differentiable path)."""
    return synchronize(_allreduce(tensor, average, name, op, prescale_factor, postscale_factor,
                                  process_set, False, True))


@announces_refusals("allreduce", tensors="tensors")
def _grouped_allreduce(tensors, average, name, op, prescale_factor, postscale_factor,
                       process_set, in_place, caller_waits):
    """Starts one allreduce of the list, in place or into new tensors; the handle's result
    is the tuple reduced into."""
    op = reduce_op(op, average)
    if in_place:
        tensors = tuple(tensors)
        outputs = None
    else:
        tensors = _check_list(tensors, "grouped_allreduce")
        outputs = tuple(torch.empty_like(t) for t in tensors)
    h = _engine.grouped_allreduce_tensors_async(_READER, tensors, outputs, "grouped_allreduce",
                                                name, op, prescale_factor, postscale_factor,
                                                _set_id(process_set), caller_waits)
    result = tensors if in_place else outputs
    return _register(h, lambda out, _inputs=tensors: result)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts one allreduce for a list of tensors, negotiated and fused as a unit; its
    result is a tuple of new tensors."""
    return _grouped_allreduce(tensors, average, name, op, prescale_factor, postscale_factor,
                              process_set, False, False)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In place: its result is the tuple of the input tensors."""
    return _grouped_allreduce(tensors, average, name, op, prescale_factor, postscale_factor,
                              process_set, True, False)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces every tensor of the list in place; returns them as a tuple."""
    return synchronize(_grouped_allreduce(tensors, average, name, op, prescale_factor,
                                          postscale_factor, process_set, True, True))


def grouped_allreduce_blocking(tensors, average, name, op, prescale_factor, postscale_factor,
                               process_set):
    """New tensors with the reductions, waited for at once (kolo.torch.grouped_allreduce's
    non-differentiable path)."""
    return synchronize(_grouped_allreduce(tensors, average, name, op, prescale_factor,
                                          postscale_factor, process_set, False, True))


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Reduces a sparse COO tensor by gathering every rank's indices and values (Horovod's
    algorithm). Returns a callable (not a handle) that waits and returns the reduced,
    uncoalesced sparse tensor; ``op`` Average divides the values by the set's size."""
    t = tensor
    names = (None, None) if name is None else ("%s.indices" % name, "%s.values" % name)
    indices = allgather_async(t._indices().transpose(0, 1).contiguous(), name=names[0],
                              process_set=process_set)
    values = allgather_async(t._values().contiguous(), name=names[1], process_set=process_set)

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


# --- allgather ---------------------------------------------------------------------------

@announces_refusals("allgather")
def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's ``tensor`` along dimension 0 (its size may differ
    between ranks; the other dimensions may not)."""
    _check_tensor(tensor, "allgather input")
    h = _engine.allgather_async(_view(tensor), name, _set_id(process_set), _stream(tensor))
    return _register(h, lambda out: _tensors.copy_out(out, tensor))


@announces_refusals("allgather", tensors="tensors")
def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts an allgather of every tensor of the list, negotiated as one unit (one member
    failing fails all); its result is a tuple."""
    tensors = _check_list(tensors, "grouped_allgather")
    h = _engine.grouped_allgather_async([_view(t) for t in tensors], name,
                                        _set_id(process_set), _stream(tensors[0]))
    return _register(h, lambda out: _tensors.copy_out_parts(out, tensors))


# --- broadcast ---------------------------------------------------------------------------

@announces_refusals("broadcast")
def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting ``tensor`` from global rank ``root_rank``, in place."""
    _check_tensor(tensor, "broadcast tensor")
    set_id = _set_id(process_set)
    h = _engine.broadcast_async(_view(tensor), _root_in_set(root_rank, set_id), name, set_id,
                                _stream(tensor))
    return _register(h, lambda out: tensor)


@announces_refusals("broadcast")
def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting into a new tensor; ``tensor`` is not modified."""
    _check_tensor(tensor, "broadcast tensor")
    return broadcast_async_(tensor.clone(), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Broadcasts in place and returns ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


# --- alltoall ----------------------------------------------------------------------------

@announces_refusals("alltoall")
def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set):
    """Starts sending ``splits[i]`` rows of ``tensor`` to rank i of the set (an even split
    when None). Its result is ``(output, received_splits)``, an int32 tensor."""
    _check_tensor(tensor, "alltoall input")
    if splits is None:
        split_list = []
    elif isinstance(splits, torch.Tensor):
        # As Horovod: a tensor of splits must hold int32 (a float tensor's values would be
        # truncated differently on each rank, pairing one rank's valid call with another's
        # error); a list is converted.
        if splits.dtype != torch.int32 or splits.dim() > 1:
            raise ValueError("alltoall expects splits to be a 1-D tensor of 32-bit integers "
                             "(torch.int32), got a %d-D %s tensor" % (splits.dim(), splits.dtype))
        split_list = splits.tolist()
    else:
        split_list = [int(s) for s in splits]
    h = _engine.alltoall_async(_view(tensor), split_list, name, _set_id(process_set),
                               _stream(tensor))
    return _register(h, lambda out: (_tensors.copy_out(out, tensor),
                                     torch.tensor(out.received_splits, dtype=torch.int32)))


# --- reducescatter -----------------------------------------------------------------------

@announces_refusals("reducescatter")
def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing ``tensor`` over the set; rank i keeps the i-th block of rows (the
    first ``rows % size`` ranks one row more)."""
    op = reducescatter_op(op)
    _check_tensor(tensor, "reducescatter input")
    h = _engine.reducescatter_async(_view(tensor), name, op, prescale_factor, postscale_factor,
                                    _set_id(process_set), _stream(tensor))
    return _register(h, lambda out: _tensors.copy_out(out, tensor))


@announces_refusals("reducescatter", tensors="tensors")
def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of every tensor of the list, negotiated as one unit; its
    result is a tuple."""
    op = reducescatter_op(op)
    tensors = _check_list(tensors, "grouped_reducescatter")
    h = _engine.grouped_reducescatter_async([_view(t) for t in tensors], name, op,
                                            prescale_factor, postscale_factor,
                                            _set_id(process_set), _stream(tensors[0]))
    return _register(h, lambda out: _tensors.copy_out_parts(out, tensors))


# --- join and barrier --------------------------------------------------------------------

def join(device=-1):
    """This rank has no more data: until every rank has joined, it takes part in the others'
    allreduces with zeros. Returns the global rank that joined last (an int).

    ``device`` (Horovod's: where the zeros are made; -1, the default, is the CPU) is checked
    but needs no effect: kolo makes the zeros on the device of each allreduce the rank takes
    part in. A CUDA device that this build or machine cannot serve raises ValueError before
    the rank joins."""
    _check_join_device(device)
    return synchronize(_register(_engine.join_async(), lambda out: int(out.value)))


def barrier(process_set=global_process_set):
    """Returns (None) once every rank of the set has called it."""
    synchronize(_register(_engine.barrier_async(_set_id(process_set)), lambda out: None))
