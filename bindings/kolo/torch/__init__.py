"""kolo for PyTorch, with Horovod's names: ``import kolo.torch as hvd`` reads naturally.

Collectives run on kolo's background thread; the ``*_async`` forms return a
handle for :func:`poll` and :func:`synchronize`.
"""
import atexit

import torch

from kolo import _core
from kolo._core import KoloInternalError

__all__ = [
    "init", "shutdown", "is_initialized", "rank", "size", "local_rank", "local_size",
    "cross_rank", "cross_size", "mpi_threads_supported", "mpi_built", "mpi_enabled",
    "nccl_built", "cuda_built", "gloo_built", "Average", "Sum", "Min", "Max", "Product",
    "Adasum", "allreduce", "allreduce_", "allreduce_async", "allreduce_async_", "allgather",
    "allgather_async", "broadcast", "broadcast_", "broadcast_async", "broadcast_async_",
    "barrier", "poll", "synchronize", "broadcast_parameters", "KoloInternalError",
]

# Reduce operations and dtype codes come from the C++ enums through _core.
Average, Sum, Min, Max, Product = (_core.REDUCE_OPS[n]
                                   for n in ("average", "sum", "min", "max", "product"))
Adasum = "Adasum"

_DTYPES = {getattr(torch, name): code for name, code in _core.DTYPES.items()
           if isinstance(getattr(torch, name, None), torch.dtype)}
_GLOBAL_SET = 0

# handle -> finisher: turns the finished operation's output into synchronize()'s
# result (and keeps the tensors it needs alive until then).
_pending = {}


def _register(handle, finish):
    _pending[handle] = finish
    return handle


def _differentiable(tensor):
    return isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled()


class ProcessSet:
    """A subset of ranks with its own negotiation; collectives take ``process_set=``."""

    def __init__(self, ranks):
        self.ranks = None if ranks is None else [int(r) for r in ranks]
        self.process_set_id = None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError("process set %s is not registered; pass it to init(process_sets=) "
                             "or add_process_set() first" % self.ranks)
        return self.process_set_id

    def size(self):
        return len(_core.process_set_ranks(self._id()))

    def rank(self):
        """This process's rank within the set, or -1 when it is not a member."""
        return _core.process_set_rank(self._id())

    def included(self):
        return self.rank() >= 0

    def __repr__(self):
        return "ProcessSet(id=%s, ranks=%s)" % (self.process_set_id, self.ranks)


global_process_set = ProcessSet(None)
global_process_set.process_set_id = 0


def _comm_handle(comm):
    if comm is None:
        return 0
    if isinstance(comm, (list, tuple)):
        raise NotImplementedError("init(comm=[ranks]) is not supported; pass an mpi4py "
                                  "communicator (e.g. MPI.COMM_WORLD.Split(...)) or use "
                                  "process sets")
    try:
        from mpi4py import MPI
    except ImportError:
        raise TypeError("init(comm=...) takes an mpi4py communicator, but mpi4py is not "
                        "installed (Debian: python3-mpi4py)")
    if not isinstance(comm, MPI.Comm):
        raise TypeError("init(comm=...) takes an mpi4py communicator, got %s"
                        % type(comm).__name__)
    return MPI._handleof(comm)


def init(comm=None, process_sets=None):
    """Starts kolo (MPI and the background thread). Idempotent. ``comm``: an mpi4py
    communicator to run on (kolo duplicates it; mpi4py keeps MPI). ``process_sets``:
    ProcessSet objects (or rank lists) registered now, on every rank alike."""
    sets = [s if isinstance(s, ProcessSet) else ProcessSet(s) for s in (process_sets or [])]
    _core.init([s.ranks for s in sets], _comm_handle(comm))
    global_process_set.ranks = list(range(_core.size()))
    for i, s in enumerate(sets):
        s.process_set_id = i + 1
    return sets


def add_process_set(process_set):
    """Registers a new process set; every rank must call it with the same ranks."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    ps.process_set_id = _core.wait(_core.add_process_set_async(ps.ranks)).value
    return ps


def remove_process_set(process_set):
    """Removes a process set; every rank must call it."""
    _core.wait(_core.remove_process_set_async(process_set._id()))
    process_set.process_set_id = None


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline (rank 0 writes it)."""
    _core.start_timeline(str(file_path), bool(mark_cycles))


def stop_timeline():
    _core.stop_timeline()


def shutdown():
    """Stops kolo; pending operations on every rank fail with KoloInternalError."""
    _core.shutdown()
    _pending.clear()


atexit.register(shutdown)

is_initialized = _core.is_initialized
rank = _core.rank
size = _core.size
local_rank = _core.local_rank
local_size = _core.local_size
cross_rank = _core.cross_rank
cross_size = _core.cross_size
mpi_threads_supported = _core.mpi_threads_supported


def mpi_built():
    return True


def mpi_enabled():
    return True


def nccl_built():
    return _core.cuda_built()


def cuda_built():
    return _core.cuda_built()


def gloo_built():
    return False


def _check_tensor(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.dtype not in _DTYPES:
        raise TypeError("%s has dtype %s, which kolo does not support; supported: %s" % (
            what, tensor.dtype, ", ".join(str(d) for d in _DTYPES)))
    if not tensor.is_contiguous():
        raise ValueError("%s is not contiguous; call .contiguous() first" % what)
    if tensor.is_sparse:
        raise ValueError("%s is sparse; kolo reduces dense tensors" % what)


def _device(tensor):
    return tensor.device.index if tensor.is_cuda else -1


def _stream(tensor):
    """The CUDA stream that produces ``tensor`` (kolo's stream waits on it), or 0."""
    if not tensor.is_cuda:
        return 0
    return torch.cuda.current_stream(tensor.device).cuda_stream


def _view(tensor):
    return (tensor.data_ptr(), _DTYPES[tensor.dtype], list(tensor.shape), _device(tensor))


def _reduce_op(op, average):
    if average is not None:
        if op is not None:
            raise ValueError("pass either op or the deprecated average, not both")
        return Average if average else Sum
    if op is None:
        return Average
    if op == Adasum:
        raise NotImplementedError("Adasum is not supported yet; use Average or Sum")
    if op not in (Average, Sum, Min, Max, Product):
        raise ValueError("op must be one of kolo.torch.Average, Sum, Min, Max, Product")
    return op


def _set_id(process_set):
    if process_set is None:
        return _GLOBAL_SET
    if isinstance(process_set, ProcessSet):
        return process_set._id()
    raise TypeError("process_set must be a kolo.torch.ProcessSet")


def _enqueue_allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set):
    _check_tensor(tensor, "allreduce input")
    data, dtype, shape, device = _view(tensor)
    return _core.allreduce_async(data, output.data_ptr(), dtype, shape, device, name or "",
                                 op, float(prescale_factor), float(postscale_factor),
                                 _set_id(process_set), _stream(tensor))


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                     postscale_factor=1.0, process_set=None):
    """Starts an in-place allreduce of ``tensor``; returns a handle."""
    op = _reduce_op(op, average)
    h = _enqueue_allreduce(tensor, tensor, name, op, prescale_factor, postscale_factor, process_set)
    return _register(h, lambda out: tensor)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0,
                    postscale_factor=1.0, process_set=None):
    """Starts an allreduce into a new tensor; returns a handle."""
    op = _reduce_op(op, average)
    _check_tensor(tensor, "allreduce input")
    output = torch.empty_like(tensor)
    h = _enqueue_allreduce(tensor, output, name, op, prescale_factor, postscale_factor, process_set)
    return _register(h, lambda out, _input=tensor: output)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0,
               postscale_factor=1.0, process_set=None):
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor,
                                        postscale_factor, process_set))


def _allreduce_async_plain(tensor, name, op, pre, post, process_set):
    return allreduce_async(tensor, None, name, op, pre, post, process_set)


def allreduce(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
    """A new tensor with the reduction; differentiable (backward is an allreduce)."""
    op = _reduce_op(op, average)
    if _differentiable(tensor):
        return _autograd.Allreduce.apply(tensor, name, op, prescale_factor, postscale_factor,
                                         process_set)
    return synchronize(allreduce_async(tensor, None, name, op, prescale_factor,
                                       postscale_factor, process_set))


def allgather_async(tensor, name=None, process_set=None):
    """Starts gathering every rank's tensor along dimension 0 (sizes may differ)."""
    _check_tensor(tensor, "allgather input")
    data, dtype, shape, device = _view(tensor)
    h = _core.allgather_async(data, dtype, shape, device, name or "", _set_id(process_set),
                              _stream(tensor))
    return _register(h, lambda out: _copy_out(out, tensor))


def _allgather_plain(tensor, name, process_set):
    return synchronize(allgather_async(tensor, name, process_set))


def allgather(tensor, name=None, process_set=None):
    """Concatenation of every rank's tensor along dim 0; differentiable."""
    if _differentiable(tensor):
        return _autograd.Allgather.apply(tensor, name, process_set)
    return _allgather_plain(tensor, name, process_set)


def broadcast_async_(tensor, root_rank, name=None, process_set=None):
    """Starts broadcasting ``tensor`` from ``root_rank`` in place."""
    _check_tensor(tensor, "broadcast tensor")
    data, dtype, shape, device = _view(tensor)
    h = _core.broadcast_async(data, dtype, shape, device, int(root_rank), name or "",
                              _set_id(process_set), _stream(tensor))
    return _register(h, lambda out: tensor)


def broadcast_async(tensor, root_rank, name=None, process_set=None):
    _check_tensor(tensor, "broadcast tensor")
    return broadcast_async_(tensor.clone(), root_rank, name, process_set)


def broadcast_(tensor, root_rank, name=None, process_set=None):
    return synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def broadcast(tensor, root_rank, name=None, process_set=None):
    """A new tensor holding ``root_rank``'s values; differentiable."""
    if _differentiable(tensor):
        _check_tensor(tensor, "broadcast tensor")
        return _autograd.Broadcast.apply(tensor, root_rank, name, process_set)
    return synchronize(broadcast_async(tensor, root_rank, name, process_set))


def barrier(process_set=None):
    synchronize(_core.barrier_async(_set_id(process_set)))


def poll(handle):
    """True once the operation behind ``handle`` has finished."""
    return _core.poll(handle)


def _copy_out(out, like):
    # A result of a CUDA tensor's collective is in device memory on its device.
    result = torch.empty(tuple(out.shape), dtype=like.dtype, device=like.device)
    out.copy_to(result.data_ptr(), result.numel() * result.element_size())
    return result


def synchronize(handle):
    """Waits for ``handle`` and returns its result."""
    finish = _pending.pop(handle, None)
    out = _core.wait(handle)
    return finish(out) if finish is not None else None


def broadcast_parameters(params, root_rank):
    """Broadcasts a ``state_dict()`` or ``named_parameters()`` from ``root_rank`` in place."""
    if isinstance(params, dict):
        items = sorted(params.items())
    else:
        items = list(params)
    handles = []
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            continue
        target = p.data if isinstance(p, torch.nn.Parameter) else p
        handles.append(broadcast_async_(target, root_rank, name="broadcast_parameters." + name))
    for h in handles:
        synchronize(h)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                            postscale_factor=1.0, process_set=None):
    """Starts one allreduce for a group of tensors, negotiated and fused as a unit."""
    op = _reduce_op(op, average)
    outputs = []
    specs = []
    for i, t in enumerate(tensors):
        _check_tensor(t, "grouped_allreduce input %d" % i)
        out = torch.empty_like(t)
        outputs.append(out)
        data, dtype, shape, device = _view(t)
        specs.append((data, out.data_ptr(), dtype, shape, device))
    h = _core.grouped_allreduce_async(specs, name or "", op, float(prescale_factor),
                                      float(postscale_factor), _set_id(process_set),
                                      _stream(tensors[0]))
    return _register(h, lambda out, _inputs=list(tensors): outputs)


def grouped_allreduce(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=None):
    return synchronize(grouped_allreduce_async(tensors, average, name, op, prescale_factor,
                                               postscale_factor, process_set))


def _alltoall_enqueue(tensor, splits, name, process_set, with_splits):
    _check_tensor(tensor, "alltoall input")
    if splits is None:
        split_list = []
    else:
        raw = splits.tolist() if isinstance(splits, torch.Tensor) else splits
        split_list = [int(s) for s in raw]
    data, dtype, shape, device = _view(tensor)
    h = _core.alltoall_async(data, dtype, shape, device, split_list, name or "",
                             _set_id(process_set), _stream(tensor))

    def finish(out):
        result = _copy_out(out, tensor)
        if not with_splits:
            return result
        return result, torch.tensor(out.received_splits, dtype=torch.int32)
    return _register(h, finish)


def alltoall_async(tensor, splits=None, name=None, process_set=None):
    """Starts sending ``splits[i]`` rows of ``tensor`` to rank i (even split when None)."""
    return _alltoall_enqueue(tensor, splits, name, process_set, with_splits=splits is not None)


def _alltoall_plain(tensor, splits, name, process_set):
    """(output, received_splits), for autograd."""
    return synchronize(_alltoall_enqueue(tensor, splits, name, process_set, with_splits=True))


def alltoall(tensor, splits=None, name=None, process_set=None):
    """Returns the received tensor, and ``(output, received_splits)`` when splits are given;
    differentiable (backward is the reverse alltoall)."""
    if _differentiable(tensor):
        out, received = _autograd.Alltoall.apply(tensor, splits, name, process_set)
        return (out, received) if splits is not None else out
    return synchronize(alltoall_async(tensor, splits, name, process_set))


def reducescatter_async(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                        process_set=None):
    op = Average if op is None else op
    if op not in (Average, Sum):
        raise ValueError("reducescatter supports kolo.torch.Average and Sum")
    _check_tensor(tensor, "reducescatter input")
    data, dtype, shape, device = _view(tensor)
    h = _core.reducescatter_async(data, dtype, shape, device, name or "", op,
                                  float(prescale_factor), float(postscale_factor),
                                  _set_id(process_set), _stream(tensor))
    return _register(h, lambda out: _copy_out(out, tensor))


def _reducescatter_plain(tensor, name, op, pre, post, process_set):
    return synchronize(reducescatter_async(tensor, name, op, pre, post, process_set))


def reducescatter(tensor, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                  process_set=None):
    """This rank's block of the reduction; differentiable (backward is an allgather)."""
    op = Average if op is None else op
    if _differentiable(tensor):
        return _autograd.Reducescatter.apply(tensor, name, op, prescale_factor, postscale_factor,
                                             process_set)
    return _reducescatter_plain(tensor, name, op, prescale_factor, postscale_factor, process_set)


def join(device=-1):
    """Joins: this rank takes part in others' allreduces with zeros until every rank has
    joined. Returns the last rank to join."""
    return _core.wait(_core.join_async(_GLOBAL_SET)).value


from kolo.torch import autograd as _autograd  # noqa: E402
from kolo.torch.compression import Compression  # noqa: E402
from kolo.torch.functions import (allgather_object, broadcast_object,  # noqa: E402
                                  broadcast_optimizer_state)
from kolo.torch.optimizer import DistributedOptimizer  # noqa: E402
from kolo.torch.sync_batch_norm import SyncBatchNorm  # noqa: E402

__all__ += ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
            "start_timeline", "stop_timeline", "grouped_allreduce", "grouped_allreduce_async",
            "alltoall", "alltoall_async",
            "reducescatter", "reducescatter_async", "join", "Compression", "allgather_object",
            "broadcast_object", "broadcast_optimizer_state", "DistributedOptimizer",
            "SyncBatchNorm"]
