"""The torch adapter (kolo.common.adapter): what kolo.torch and the torch.distributed backend
give kolo's collectives about torch tensors. The reader (the core reads and checks a tensor
through torch.Tensor's attributes, in C++), the words for a tensor that fails a check, the
CUDA stream that produces a tensor, and new tensors like the inputs for the results."""
import torch

from kolo.common import engine as _engine
from kolo.common.adapter import Adapter

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


def refuse(tensor, what, index, check):
    """The torch words for a tensor that failed the reader's ``check`` (see
    kolo.common.engine.tensor_reader); ``what`` names it, ``index`` its place in a list."""
    if index is not None:
        what = "%s input %d" % (what, index)
    if check == "type":
        raise TypeError("%s must be a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if check == "sparse":
        raise ValueError("%s is sparse; kolo moves dense tensors (kolo.torch reduces sparse "
                         "gradients with sparse_allreduce_async() or DistributedOptimizer, "
                         "torch.distributed with all_reduce)" % what)
    if check == "dtype":
        raise UnsupportedDtypeError(
            "%s has dtype %s, which kolo does not support; supported: %s"
            % (what, tensor.dtype, ", ".join(str(d) for d in DTYPES)))
    if check == "contiguous":
        raise ValueError("%s is not contiguous; call .contiguous() first" % what)
    if check == "device":
        raise ValueError("%s is on device %s; kolo moves tensors on the CPU and on CUDA "
                         "devices" % (what, tensor.device))


def stream(tensor):
    """The CUDA stream that produces ``tensor`` (kolo's stream waits on it)."""
    return torch.cuda.current_stream(tensor.device).cuda_stream


# How the core reads torch tensors: torch.Tensor's attributes.
READER = _engine.tensor_reader("attributes", torch.Tensor, DTYPES, refuse, stream)


class TorchAdapter(Adapter):
    binding = "kolo.torch"
    reader = READER

    def empty(self, shape, like):
        return torch.empty(shape, dtype=like.dtype, device=like.device)

    def empty_like(self, tensor):
        return torch.empty_like(tensor)

    def copy(self, tensor):
        return tensor.clone()

    def data_ptr(self, tensor):
        return tensor.data_ptr()

    def int32_vector(self, values):
        return torch.tensor(values, dtype=torch.int32)

    def split_list(self, splits):
        if isinstance(splits, torch.Tensor):
            # As Horovod: a tensor of splits must hold int32 (a float tensor's values would
            # be truncated differently on each rank, pairing one rank's valid call with
            # another's error); a list is converted.
            if splits.dtype != torch.int32 or splits.dim() > 1:
                raise ValueError("alltoall expects splits to be a 1-D tensor of 32-bit "
                                 "integers (torch.int32), got a %d-D %s tensor"
                                 % (splits.dim(), splits.dtype))
            return splits.tolist()
        return super().split_list(splits)


ADAPTER = TorchAdapter()


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
