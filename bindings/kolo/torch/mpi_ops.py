"""The collectives of ``kolo.torch``, with the signatures, defaults, return
values and autograd rules of Horovod 0.28's ``horovod.torch.mpi_ops``
(docs/moving-from-horovod.md lists every name and the few deliberate
differences).

Every ``*_async`` form returns a handle (the core's, an int) for
:func:`poll` and :func:`synchronize`.
"""

import torch

from kolo import _core
from kolo.common import ops as _common_ops
from kolo.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from kolo.common.refusals import announces_refusals
from kolo._core import KoloInternalError
from kolo.torch.basics import (  # noqa: F401  (Horovod's mpi_ops exports them too)
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
    is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size)
from kolo.torch.basics import _check_has_gpu, _check_join_device, _on_new_run  # noqa: F401
from kolo.torch.compression import Compression
from kolo.torch.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, remove_process_set)
from kolo.torch.process_sets import _root_in_set, _set_id, _set_size

HorovodInternalError = KoloInternalError  # one class: except either name catches kolo's errors

_DTYPES = {getattr(torch, name): code for name, code in _core.DTYPES.items()
           if isinstance(getattr(torch, name, None), torch.dtype)}

# torch >= 2.0 warns, once per process, when a sparse tensor is built without saying whether
# its invariants are checked. kolo builds them from indices that valid sparse tensors had and
# skips the check (torch 1.13 never checked, and has no such keyword).
_UNCHECKED = ({"check_invariants": False}
              if hasattr(torch.sparse, "check_sparse_tensor_invariants") else {})


def _sparse_coo(indices, values, size):
    return torch.sparse_coo_tensor(indices, values, size, **_UNCHECKED)

# handle -> finisher: turns the finished operation's output into synchronize()'s result
# (and keeps the tensors it needs alive until then). An entry leaves only when the wait
# ended with the operation's result or error, never when a signal interrupted it.
_pending = {}


def _register(handle, finish):
    _pending[handle] = finish
    return handle


def poll(handle):
    """True once the operation behind ``handle`` has finished (then synchronize() does not
    block). ValueError for a handle that was never returned or was already synchronized."""
    if handle not in _pending:
        raise ValueError("Handle %s was not created or has been cleared." % (handle,))
    return _core.poll(handle)


def synchronize(handle):
    """Waits for ``handle`` and returns its result: a tensor, a tuple for grouped ops and
    alltoall, None for barrier. None for an unknown or already synchronized handle (as
    Horovod). The callable that sparse_allreduce_async() returns is called. A wait that a
    signal interrupts (KeyboardInterrupt, a timeout handler) leaves the handle waitable."""
    if callable(handle):
        return handle()
    finish = _pending.get(handle)
    if finish is None:
        return None
    try:
        out = _core.wait(handle)
    except (KoloInternalError, ValueError):
        _pending.pop(handle, None)
        raise
    _pending.pop(handle, None)
    return finish(out)


def _release(handle):
    """Forgets a handle that will not be synchronized (an error abandoned it): its name is
    free again once its operation completes."""
    if _pending.pop(handle, None) is not None and _core.is_initialized():
        _core.release(handle)


def _differentiable(tensor):
    return isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled()


class UnsupportedDtypeError(TypeError, ValueError):
    """A dtype kolo cannot move. A TypeError, and a ValueError as Horovod raises for it."""


def _check_tensor(tensor, what, index=None):
    # The common case costs a few attribute reads; the message (with the
    # input's index in a list) is only built for a tensor that fails.
    if (isinstance(tensor, torch.Tensor) and not tensor.is_sparse and tensor.dtype in _DTYPES
            and tensor.is_contiguous()):
        return
    if index is not None:
        what = "%s input %d" % (what, index)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.is_sparse:
        raise ValueError("%s is sparse; kolo reduces dense tensors (sparse gradients: "
                         "sparse_allreduce_async() or DistributedOptimizer)" % what)
    if tensor.dtype not in _DTYPES:
        raise UnsupportedDtypeError(
            "%s has dtype %s, which kolo does not support; supported: %s"
            % (what, tensor.dtype, ", ".join(str(d) for d in _DTYPES)))
    raise ValueError("%s is not contiguous; call .contiguous() first" % what)


def _check_list(tensors, what):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("%s needs at least one tensor" % what)
    for i, t in enumerate(tensors):
        _check_tensor(t, what, i)
    return tensors


def _stream(tensor):
    """The CUDA stream that produces ``tensor`` (kolo's stream waits on it), or 0."""
    if not tensor.is_cuda:
        return 0
    return torch.cuda.current_stream(tensor.device).cuda_stream


def _view(tensor):
    return (tensor.data_ptr(), _DTYPES[tensor.dtype], list(tensor.shape),
            tensor.device.index if tensor.is_cuda else -1)


def _copy_out(out, like):
    # A result of a CUDA tensor's collective is in device memory on its device.
    result = torch.empty(tuple(out.shape), dtype=like.dtype, device=like.device)
    out.copy_to(result.data_ptr(), result.numel() * result.element_size())
    return result


def _compress_all(tensors, compression):
    pairs = [compression.compress(t) for t in tensors]
    return [c for c, _ in pairs], [ctx for _, ctx in pairs]


def _grouped(tensors, compression, differentiable, start):
    """A grouped collective on compressed tensors, decompressed: through autograd
    (`differentiable(tensors)`) when any needs a gradient, else `start(tensors)`'s handle."""
    compressed, ctxs = _compress_all(tensors, compression)
    if any(_differentiable(t) for t in compressed):
        outs = differentiable(compressed)
    else:
        outs = synchronize(start(compressed))
    return [compression.decompress(t, ctx) for t, ctx in zip(outs, ctxs)]


def _reset_handles():
    """A new run (init) or none (shutdown): the old run's handles are gone."""
    _pending.clear()


_on_new_run(_reset_handles)


def _reduce_op(op, average):
    return _common_ops.reduce_op(op, average, "kolo.torch")


# --- allreduce ---------------------------------------------------------------------------

def _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor,
                     process_set):
    data, dtype, shape, device = _view(tensor)
    return _core.allreduce_async(data, output.data_ptr(), dtype, shape, device, name or "",
                                 op, float(prescale_factor), float(postscale_factor),
                                 _set_id(process_set), _stream(tensor))


@announces_refusals("allreduce")
def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing ``tensor`` into a new tensor; returns a handle."""
    op = _reduce_op(op, average)
    _check_tensor(tensor, "allreduce input")
    output = torch.empty_like(tensor)
    h = _allreduce_async(tensor, output, name, op, prescale_factor, postscale_factor,
                         process_set)
    return _register(h, lambda out, _input=tensor: output)


@announces_refusals("allreduce")
def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=global_process_set):
    """Starts reducing ``tensor`` in place; returns a handle."""
    op = _reduce_op(op, average)
    _check_tensor(tensor, "allreduce input")
    h = _allreduce_async(tensor, tensor, name, op, prescale_factor, postscale_factor,
                         process_set)
    return _register(h, lambda out: tensor)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set):
    """Reduces ``tensor`` in place and returns it."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A new tensor with the reduction (default: the average over ranks). Differentiable:
    the gradient is the same allreduce of the incoming gradient."""
    op = _reduce_op(op, average)
    compressed, ctx = compression.compress(tensor)
    if _differentiable(compressed):
        out = _autograd.Allreduce.apply(compressed, name, op, prescale_factor,
                                        postscale_factor, process_set)
    else:
        out = synchronize(allreduce_async(compressed, None, name, op, prescale_factor,
                                          postscale_factor, process_set))
    return compression.decompress(out, ctx)


def _grouped_allreduce_async(tensors, outputs, name, op, prescale_factor, postscale_factor,
                             process_set):
    specs = [(data, o.data_ptr(), dtype, shape, device)
             for (data, dtype, shape, device), o in zip(map(_view, tensors), outputs)]
    h = _core.grouped_allreduce_async(specs, name or "", op, float(prescale_factor),
                                      float(postscale_factor), _set_id(process_set),
                                      _stream(tensors[0]))
    return _register(h, lambda out, _inputs=tensors: tuple(outputs))


@announces_refusals("allreduce", tensors="tensors")
def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=global_process_set):
    """Starts one allreduce for a list of tensors, negotiated and fused as a unit; its
    result is a tuple of new tensors."""
    op = _reduce_op(op, average)
    tensors = _check_list(tensors, "grouped_allreduce")
    return _grouped_allreduce_async(tensors, [torch.empty_like(t) for t in tensors], name, op,
                                    prescale_factor, postscale_factor, process_set)


@announces_refusals("allreduce", tensors="tensors")
def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                             postscale_factor=1.0, process_set=global_process_set):
    """In place: its result is the tuple of the input tensors."""
    op = _reduce_op(op, average)
    tensors = _check_list(tensors, "grouped_allreduce")
    return _grouped_allreduce_async(tensors, tensors, name, op, prescale_factor,
                                    postscale_factor, process_set)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set):
    """Reduces every tensor of the list in place; returns them as a tuple."""
    return synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor,
                                                postscale_factor, process_set))


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """A list of new tensors with the reductions; differentiable."""
    op = _reduce_op(op, average)
    return _grouped(tensors, compression,
                    lambda ts: _autograd.GroupedAllreduce.apply(
                        name, op, prescale_factor, postscale_factor, process_set, *ts),
                    lambda ts: grouped_allreduce_async(ts, None, name, op, prescale_factor,
                                                       postscale_factor, process_set))


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
        return _sparse_coo(i.transpose(0, 1), v, t.size())
    handle.release = lambda: (_release(values), _release(indices))  # when never called
    return handle


# --- allgather ---------------------------------------------------------------------------

def _allgather_async(tensor, name, process_set):
    data, dtype, shape, device = _view(tensor)
    return _core.allgather_async(data, dtype, shape, device, name or "", _set_id(process_set),
                                 _stream(tensor))


@announces_refusals("allgather")
def allgather_async(tensor, name=None, process_set=global_process_set):
    """Starts concatenating every rank's ``tensor`` along dimension 0 (its size may differ
    between ranks; the other dimensions may not)."""
    _check_tensor(tensor, "allgather input")
    h = _allgather_async(tensor, name, process_set)
    return _register(h, lambda out: _copy_out(out, tensor))


def allgather(tensor, name=None, process_set=global_process_set):
    """The concatenation, in rank order of the set. Differentiable: the gradient is this
    rank's slice of the average over ranks of the incoming gradients."""
    if _differentiable(tensor):
        return _autograd.Allgather.apply(tensor, name, process_set)
    return synchronize(allgather_async(tensor, name, process_set))


def _copy_out_parts(out, tensors):
    return tuple(_copy_out(o, t) for o, t in zip(out.take_parts(), tensors))


@announces_refusals("allgather", tensors="tensors")
def grouped_allgather_async(tensors, name=None, process_set=global_process_set):
    """Starts an allgather of every tensor of the list, negotiated as one unit (one member
    failing fails all); its result is a tuple."""
    tensors = _check_list(tensors, "grouped_allgather")
    h = _core.grouped_allgather_async([_view(t) for t in tensors], name or "",
                                      _set_id(process_set), _stream(tensors[0]))
    return _register(h, lambda out: _copy_out_parts(out, tensors))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """A tuple with the allgather of every tensor of the list; differentiable."""
    if any(_differentiable(t) for t in tensors):
        return _autograd.GroupedAllgather.apply(name, process_set, *tensors)
    return synchronize(grouped_allgather_async(tensors, name, process_set))


# --- broadcast ---------------------------------------------------------------------------

@announces_refusals("broadcast")
def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting ``tensor`` from global rank ``root_rank``, in place."""
    _check_tensor(tensor, "broadcast tensor")
    set_id = _set_id(process_set)
    data, dtype, shape, device = _view(tensor)
    h = _core.broadcast_async(data, dtype, shape, device, _root_in_set(root_rank, set_id),
                              name or "", set_id, _stream(tensor))
    return _register(h, lambda out: tensor)


@announces_refusals("broadcast")
def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set):
    """Starts broadcasting into a new tensor; ``tensor`` is not modified."""
    _check_tensor(tensor, "broadcast tensor")
    return broadcast_async_(tensor.clone(), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set):
    """Broadcasts in place and returns ``tensor``."""
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """A new tensor with ``root_rank``'s values. Differentiable: the root's gradient is the
    average over ranks of the incoming gradients, the others' zero."""
    if _differentiable(tensor):
        _check_tensor(tensor, "broadcast tensor")
        return _autograd.Broadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


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
    data, dtype, shape, device = _view(tensor)
    h = _core.alltoall_async(data, dtype, shape, device, split_list, name or "",
                             _set_id(process_set), _stream(tensor))
    return _register(h, lambda out: (_copy_out(out, tensor),
                                     torch.tensor(out.received_splits, dtype=torch.int32)))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The received rows; ``(output, received_splits)`` when ``splits`` is given.
    Differentiable: the gradient goes back with the reverse alltoall."""
    if _differentiable(tensor):
        return _autograd.Alltoall.apply(tensor, splits, name, process_set)
    out, received = synchronize(alltoall_async(tensor, splits, name, process_set))
    return out if splits is None else (out, received)


# --- reducescatter -----------------------------------------------------------------------

def _reducescatter_op(op):
    return _common_ops.reducescatter_op(op, "kolo.torch")


def _reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor):
    data, dtype, shape, device = _view(tensor)
    return _core.reducescatter_async(data, dtype, shape, device, name or "", op,
                                     float(prescale_factor), float(postscale_factor),
                                     _set_id(process_set), _stream(tensor))


@announces_refusals("reducescatter")
def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set,
                        prescale_factor=1.0, postscale_factor=1.0):
    """Starts reducing ``tensor`` over the set; rank i keeps the i-th block of rows (the
    first ``rows % size`` ranks one row more)."""
    op = _reducescatter_op(op)
    _check_tensor(tensor, "reducescatter input")
    h = _reducescatter_async(tensor, name, op, process_set, prescale_factor, postscale_factor)
    return _register(h, lambda out: _copy_out(out, tensor))


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """This rank's block of the reduction. Differentiable with Horovod's rule: the allgather
    of the incoming gradients, times the set's size for Sum, times the scale factors."""
    op = _reducescatter_op(op)
    compressed, ctx = compression.compress(tensor)
    if _differentiable(compressed):
        out = _autograd.Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                            postscale_factor)
    else:
        out = synchronize(reducescatter_async(compressed, name, op, process_set,
                                              prescale_factor, postscale_factor))
    return compression.decompress(out, ctx)


@announces_refusals("reducescatter", tensors="tensors")
def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0):
    """Starts a reducescatter of every tensor of the list, negotiated as one unit; its
    result is a tuple."""
    op = _reducescatter_op(op)
    tensors = _check_list(tensors, "grouped_reducescatter")
    h = _core.grouped_reducescatter_async([_view(t) for t in tensors], name or "", op,
                                          float(prescale_factor), float(postscale_factor),
                                          _set_id(process_set), _stream(tensors[0]))
    return _register(h, lambda out: _copy_out_parts(out, tensors))


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """A list with the reducescatter of every tensor of the list; differentiable."""
    op = _reducescatter_op(op)
    return _grouped(tensors, compression,
                    lambda ts: _autograd.GroupedReducescatter.apply(
                        name, op, process_set, prescale_factor, postscale_factor, *ts),
                    lambda ts: grouped_reducescatter_async(ts, name, op, process_set,
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
    return synchronize(_register(_core.join_async(0), lambda out: int(out.value)))


def barrier(process_set=global_process_set):
    """Returns (None) once every rank of the set has called it."""
    synchronize(_register(_core.barrier_async(_set_id(process_set)), lambda out: None))


from kolo.torch import autograd as _autograd  # noqa: E402  (it calls back into this module)
