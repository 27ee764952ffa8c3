"""Broadcasting parameters, optimizer state and Python objects (Horovod's
``horovod.torch.functions``)."""
import torch

from kolo.common import objects as _objects
from kolo.torch import mpi_ops as _ops
from kolo.torch.process_sets import global_process_set


def broadcast_parameters(params, root_rank):
    """Broadcasts tensors from ``root_rank`` in place: a dict such as ``model.state_dict()``
    (in key order), or a list (or any iterable) of tensors or ``(name, tensor)`` pairs such
    as ``model.named_parameters()``."""
    if isinstance(params, dict):
        items = sorted(params.items())
    elif isinstance(params, torch.Tensor) or not hasattr(params, "__iter__"):
        raise ValueError("invalid params of type: %s" % type(params))
    else:
        items = [p if isinstance(p, tuple) else (None, p) for p in params]
    handles = []
    for name, p in items:
        if not isinstance(p, torch.Tensor):
            continue  # e.g. a module's extra state in a state_dict
        target = p.data if isinstance(p, torch.nn.Parameter) else p
        handles.append(_ops.broadcast_async_(
            target, root_rank, name=None if name is None else "broadcast_parameters." + name))
    for h in handles:
        _ops.synchronize(h)


def _initialize_state(optimizer, model):
    """Horovod's set-up of an optimizer that has not stepped yet: every parameter that
    requires a gradient gets a zero gradient (sparse for SparseAdam, and for SGD on a sparse
    embedding of ``model``) and the wrapped optimizer steps once, without any collective, so
    that its state (momentum buffers, step counts) exists on every rank and can be
    broadcast. The zero gradients stay, as in Horovod."""
    sparse = set()
    if model is not None:
        sparse = {id(p) for m in model.modules()
                  if isinstance(m, torch.nn.Embedding) and m.sparse for p in m.parameters()}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if p.requires_grad:
                p.grad = p.data.new(p.size()).zero_()
                if isinstance(optimizer, torch.optim.SparseAdam) or (
                        isinstance(optimizer, torch.optim.SGD) and id(p) in sparse):
                    p.grad = p.grad.to_sparse()
    wrapper = getattr(optimizer, "_kolo_wrapper", None)  # a DistributedOptimizer
    if wrapper is not None:
        super(wrapper, optimizer).step()  # the user's optimizer, without the allreduces
    else:
        optimizer.step()


def broadcast_optimizer_state(optimizer, root_rank, model=None):
    """Makes every rank's optimizer state equal to ``root_rank``'s: its whole
    ``state_dict()`` (tensors, scalars such as ``step``, None entries, hyperparameters of
    every param group) is broadcast as one object and loaded on the other ranks. An
    optimizer without any state yet is first stepped once with zero gradients, as Horovod
    does (``model``, optional, names the sparse embeddings whose gradients are sparse)."""
    if isinstance(optimizer, torch.optim.LBFGS):
        raise ValueError("cannot broadcast torch.optim.LBFGS state")
    if len(optimizer.state_dict()["state"]) == 0:
        _initialize_state(optimizer, model)
    state = broadcast_object(optimizer.state_dict(), root_rank,
                             name="broadcast_optimizer_state")
    if _ops.rank() != root_rank:
        optimizer.load_state_dict(state)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Returns ``obj`` of global rank ``root_rank`` on every rank of the set (pickled with
    cloudpickle where it is installed, else pickle: the size is broadcast first, then the
    bytes). The root gets its own object back. When the root cannot pickle its object,
    every rank raises (the others ``pickle.PicklingError`` with the root's error).
    ``name`` defaults to "broadcast_object" (kolo.common.objects says why)."""
    return _objects.broadcast_object(obj, root_rank, name, process_set)


def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every rank's ``obj`` (pickled as by broadcast_object), in rank order of
    the set."""
    return _objects.allgather_object(obj, name, process_set)
