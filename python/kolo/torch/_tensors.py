"""The torch adapter of the engine (kolo.common.collectives): what kolo.torch and the
torch.distributed backend share about torch tensors. A tensor becomes a view
(pointer, dtype code, shape, device) and the CUDA stream that produces it; a finished
operation's output becomes a tensor again."""
import torch

from kolo.common import collectives as _engine

# The core's dtype codes by torch dtype.
DTYPES = _engine.dtype_codes(
    lambda name: getattr(torch, name) if isinstance(getattr(torch, name, None), torch.dtype)
    else None)

# torch >= 2.0 warns, once per process, when a sparse tensor is built without saying whether
# its invariants are checked. kolo builds them from indices that valid sparse tensors had and
# skips the check (torch 1.13 never checked, and has no such keyword).
_UNCHECKED = ({"check_invariants": False}
              if hasattr(torch.sparse, "check_sparse_tensor_invariants") else {})


def sparse_coo(indices, values, size):
    return torch.sparse_coo_tensor(indices, values, size, **_UNCHECKED)


class UnsupportedDtypeError(TypeError, ValueError):
    """A dtype kolo cannot move. A TypeError, and a ValueError as Horovod raises for it."""


def check_tensor(tensor, what, index=None):
    """A dense, contiguous tensor of a dtype kolo moves; else a clear error naming
    ``what`` (and the input's ``index`` in a list)."""
    # The common case costs a few attribute reads; the message is only built for a
    # tensor that fails.
    if (isinstance(tensor, torch.Tensor) and not tensor.is_sparse and tensor.dtype in DTYPES
            and tensor.is_contiguous()):
        return
    if index is not None:
        what = "%s input %d" % (what, index)
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.is_sparse:
        raise ValueError("%s is sparse; kolo reduces dense tensors (sparse gradients: "
                         "sparse_allreduce_async() or DistributedOptimizer)" % what)
    if tensor.dtype not in DTYPES:
        raise UnsupportedDtypeError(
            "%s has dtype %s, which kolo does not support; supported: %s"
            % (what, tensor.dtype, ", ".join(str(d) for d in DTYPES)))
    raise ValueError("%s is not contiguous; call .contiguous() first" % what)


def check_list(tensors, what):
    tensors = list(tensors)
    if not tensors:
        raise ValueError("%s needs at least one tensor" % what)
    for i, t in enumerate(tensors):
        check_tensor(t, what, i)
    return tensors


def stream(tensor):
    """The CUDA stream that produces ``tensor`` (kolo's stream waits on it), or 0."""
    if not tensor.is_cuda:
        return 0
    return torch.cuda.current_stream(tensor.device).cuda_stream


# How the core reads torch tensors itself (the allreduce entries): check_tensor's checks, in
# C++; a tensor that fails one goes to check_tensor for its error.
READER = _engine.tensor_reader(torch.Tensor, DTYPES, check_tensor, stream)


def view(tensor, shape=None):
    """The engine's view of a checked tensor (``shape``: another shape of its elements)."""
    return (tensor.data_ptr(), DTYPES[tensor.dtype],
            list(tensor.shape) if shape is None else shape,
            tensor.device.index if tensor.is_cuda else -1)


def copy_out(out, like):
    """A finished operation's output as a new tensor of ``like``'s dtype and device (a
    result of a CUDA tensor's collective is in device memory on its device)."""
    result = torch.empty(tuple(out.shape), dtype=like.dtype, device=like.device)
    out.copy_to(result.data_ptr(), result.numel() * result.element_size())
    return result


def copy_out_parts(out, tensors):
    """A grouped operation's outputs, one new tensor per input."""
    return tuple(copy_out(o, t) for o, t in zip(out.take_parts(), tensors))


def copy_into(out, dest, what="kolo"):
    """Copies a finished operation's output into ``dest`` (any layout); RuntimeError
    naming ``what`` when the sizes differ."""
    nbytes = dest.numel() * dest.element_size()
    if out.nbytes != nbytes:
        raise RuntimeError("%s: the result has %d bytes, the output tensor %d (shape %s)"
                           % (what, out.nbytes, nbytes, list(dest.shape)))
    if dest.is_contiguous():
        out.copy_to(dest.data_ptr(), nbytes)
    else:
        tmp = torch.empty(dest.shape, dtype=dest.dtype, device=dest.device)
        out.copy_to(tmp.data_ptr(), nbytes)
        dest.copy_(tmp)


def differentiable(tensor):
    """Whether an operation on ``tensor`` must record its gradient."""
    return isinstance(tensor, torch.Tensor) and tensor.requires_grad and torch.is_grad_enabled()
