"""The differentiable collectives of ``kolo.torch`` (``allreduce``, ``allgather``, ...: the
ones that return a new tensor) and their autograd, with Horovod 0.28's backward rules:

- allreduce: the same allreduce (op, scale factors, set) of the incoming gradient;
- allgather: average-allreduce of the incoming gradient, then this rank's rows
  (the first dimensions are gathered in backward, not forward);
- broadcast: average-allreduce of the incoming gradient on the root, zero elsewhere;
- alltoall: the reverse alltoall (with the splits this rank received);
- reducescatter: allgather of the incoming gradient, times the set's size for
  Sum, times prescale_factor and postscale_factor;
- the grouped forms: the same, per tensor, with the grouped collectives.

A call runs the blocking form of kolo.torch._async, and records its gradient when an
input needs one. ``compression`` casts around the collective.
"""
import torch

from kolo.common.ops import Average, Sum, reduce_op, reducescatter_op
from kolo.torch import _async as _ops
from kolo.torch._tensors import READER
from kolo.torch._tensors import differentiable as _differentiable
from kolo.torch.basics import rank
from kolo.torch.compression import Compression
from kolo.torch.process_sets import _set_rank, _set_size, global_process_set


class _Recorded(torch.autograd.Function):
    """A collective that autograd records: ``run(tensors)`` gives its outputs,
    ``backward(grads)`` the gradients of its inputs (Horovod's rule)."""

    @staticmethod
    def forward(ctx, run, backward, *tensors):
        ctx.rule = backward
        return tuple(run(list(tensors)))

    @staticmethod
    def backward(ctx, *grads):
        return (None, None) + tuple(ctx.rule([g.contiguous() for g in grads]))


def _collective(tensors, run, backward, compression=Compression.none):
    """``run`` (a list of outputs) on the compressed ``tensors``, decompressed; recorded
    with ``backward`` when any of them needs a gradient."""
    pairs = [compression.compress(t) for t in tensors]
    compressed = [c for c, _ in pairs]
    if any(_differentiable(t) for t in compressed):
        outs = _Recorded.apply(run, backward, *compressed)
    else:
        outs = run(compressed)
    return [compression.decompress(t, ctx) for t, (_, ctx) in zip(outs, pairs)]


def _one_or_all(grouped, single, group, tensors, *args):
    """The outputs of the grouped collective ``group`` on ``tensors``, or of ``single`` on
    the one tensor, as a list."""
    return list(group(tensors, *args)) if grouped else [single(tensors[0], *args)]


def _reduced(tensors, grouped, name, compression, op, pre, post, process_set):
    return _collective(
        tensors, lambda ts: _one_or_all(grouped, _ops.allreduce_blocking,
                                        _ops.grouped_allreduce_blocking, ts, None, name, op,
                                        pre, post, process_set),
        lambda grads: _reduced(grads, grouped, None, Compression.none, op, pre, post,
                               process_set),
        compression)


def _gathered(tensors, grouped, name, process_set):
    rows = [t.shape[0] for t in tensors]

    def backward(grads):
        reduced = _reduced(grads, grouped, None, Compression.none, Average, 1.0, 1.0,
                           process_set)
        dims = _gathered([torch.tensor([n], dtype=torch.int32) for n in rows], grouped, None,
                         process_set)
        r = _set_rank(process_set)
        return [g.narrow(0, int(d[:r].sum()) if r else 0, n)
                for g, d, n in zip(reduced, dims, rows)]
    return _collective(tensors, lambda ts: _one_or_all(
        grouped, _ops.allgather_blocking, _ops.grouped_allgather_blocking, ts, name,
        process_set), backward)


def _scattered(tensors, grouped, name, compression, op, process_set, pre, post):
    def backward(grads):
        for factor in (_set_size(process_set) if op == Sum else 1, pre, post):
            if factor != 1:
                grads = [g * factor for g in grads]
        return _gathered(grads, grouped, None, process_set)
    return _collective(tensors, lambda ts: _one_or_all(
        grouped, _ops.reducescatter_blocking, _ops.grouped_reducescatter_blocking, ts, name,
        op, process_set, pre, post), backward, compression)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = _ops.alltoall_blocking(tensor, splits, name, process_set)
        ctx.received, ctx.process_set = received, process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *unused):
        back, _ = alltoall(grad.contiguous(), splits=ctx.received, process_set=ctx.process_set)
        return back, None, None, None


# --- the differentiable collectives ------------------------------------------------------

def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A new tensor with the reduction (default: the average over ranks). Differentiable:
    the gradient is the same allreduce of the incoming gradient."""
    return _reduced([tensor], False, name, compression, reduce_op(op, average, "kolo.torch"),
                    prescale_factor, postscale_factor, process_set)[0]


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """A list of new tensors with the reductions; differentiable."""
    return _reduced(list(tensors), True, name, compression,
                    reduce_op(op, average, "kolo.torch"), prescale_factor, postscale_factor,
                    process_set)


def allgather(tensor, name=None, process_set=global_process_set):
    """The concatenation, in rank order of the set. Differentiable: the gradient is this
    rank's slice of the average over ranks of the incoming gradients."""
    return _gathered([tensor], False, name, process_set)[0]


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """A tuple with the allgather of every tensor of the list; differentiable."""
    return tuple(_gathered(list(tensors), True, name, process_set))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """A new tensor with ``root_rank``'s values. Differentiable: the root's gradient is the
    average over ranks of the incoming gradients, the others' zero."""
    def backward(grads):
        reduced = _reduced(grads, False, None, Compression.none, Average, 1.0, 1.0,
                           process_set)
        return reduced if rank() == root_rank else [r * 0 for r in reduced]  # a global rank
    if _differentiable(tensor):
        READER.check(tensor, "broadcast tensor")
    return _collective([tensor], lambda ts: [_ops.broadcast_blocking(ts[0], root_rank, name,
                                                                     process_set)],
                       backward)[0]


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The received rows; ``(output, received_splits)`` when ``splits`` is given.
    Differentiable: the gradient goes back with the reverse alltoall."""
    if _differentiable(tensor):
        return _Alltoall.apply(tensor, splits, name, process_set)
    out, received = _ops.alltoall_blocking(tensor, splits, name, process_set)
    return out if splits is None else (out, received)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """This rank's block of the reduction. Differentiable with Horovod's rule: the allgather
    of the incoming gradients, times the set's size for Sum, times the scale factors."""
    return _scattered([tensor], False, name, compression, reducescatter_op(op, "kolo.torch"),
                      process_set, prescale_factor, postscale_factor)[0]


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """A list with the reducescatter of every tensor of the list; differentiable."""
    return _scattered(list(tensors), True, name, compression,
                      reducescatter_op(op, "kolo.torch"), process_set, prescale_factor,
                      postscale_factor)
