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

A call records its gradient when an input needs one; otherwise it is the ``*_async``
form of kolo.torch._async, synchronized. ``compression`` casts around the collective.
"""
import torch

from kolo.common.ops import Average, Sum
from kolo.torch import _async as _ops
from kolo.torch._tensors import check_tensor
from kolo.torch._tensors import differentiable as _differentiable
from kolo.torch.basics import rank
from kolo.torch.compression import Compression
from kolo.torch.process_sets import _set_rank, _set_size, global_process_set


def _dense(grad):
    return grad.contiguous()


def _my_rows(reduced, dims, my_dim, process_set):
    """This rank's rows of ``reduced``, given every rank's first dimension."""
    r = _set_rank(process_set)
    offset = int(dims[:r].sum()) if r else 0
    return reduced.narrow(0, offset, my_dim)


def _scaled_for_reducescatter(grad, op, pre, post, process_set):
    if op == Sum:
        grad = grad * _set_size(process_set)
    if pre != 1.0:
        grad = grad * pre
    if post != 1.0:
        grad = grad * post
    return _dense(grad)


class Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, pre, post, process_set):
        ctx.args = (op, pre, post, process_set)
        return _ops.allreduce_blocking(tensor, None, name, op, pre, post, process_set)

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, process_set = ctx.args
        return (allreduce(_dense(grad), op=op, prescale_factor=pre, postscale_factor=post,
                               process_set=process_set),
                None, None, None, None, None)


class GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, pre, post, process_set, *tensors):
        ctx.args = (op, pre, post, process_set)
        return _ops.grouped_allreduce_blocking(list(tensors), None, name, op, pre, post,
                                               process_set)

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, process_set = ctx.args
        reduced = grouped_allreduce([_dense(g) for g in grads], op=op, prescale_factor=pre,
                                         postscale_factor=post, process_set=process_set)
        return (None,) * 5 + tuple(reduced)


class Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.dim, ctx.process_set = tensor.shape[0], process_set
        return _ops.synchronize(_ops.allgather_async(tensor, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        ps = ctx.process_set
        reduced = allreduce(_dense(grad), op=Average, process_set=ps)
        dims = allgather(torch.tensor([ctx.dim], dtype=torch.int32), process_set=ps)
        return _my_rows(reduced, dims, ctx.dim, ps), None, None


class GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims, ctx.process_set = [t.shape[0] for t in tensors], process_set
        return _ops.synchronize(_ops.grouped_allgather_async(list(tensors), name, process_set))

    @staticmethod
    def backward(ctx, *grads):
        ps = ctx.process_set
        reduced = grouped_allreduce([_dense(g) for g in grads], op=Average,
                                         process_set=ps)
        dims = grouped_allgather([torch.tensor([d], dtype=torch.int32) for d in ctx.dims],
                                      process_set=ps)
        return (None, None) + tuple(_my_rows(r, d, my, ps)
                                    for r, d, my in zip(reduced, dims, ctx.dims))


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        return _ops.synchronize(_ops.broadcast_async(tensor, root_rank, name, process_set))

    @staticmethod
    def backward(ctx, grad):
        reduced = allreduce(_dense(grad), op=Average, process_set=ctx.process_set)
        if rank() != ctx.root_rank:  # a global rank, as root_rank
            reduced = reduced * 0
        return reduced, None, None, None


class Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        out, received = _ops.synchronize(_ops.alltoall_async(tensor, splits, name, process_set))
        ctx.received, ctx.process_set = received, process_set
        if splits is None:
            return out
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, *unused):
        back, _ = alltoall(_dense(grad), splits=ctx.received, process_set=ctx.process_set)
        return back, None, None, None


class Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, process_set, pre, post):
        ctx.args = (op, pre, post, process_set)
        return _ops.synchronize(_ops.reducescatter_async(tensor, name, op, process_set, pre,
                                                         post))

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, process_set = ctx.args
        scaled = _scaled_for_reducescatter(grad, op, pre, post, process_set)
        return (allgather(scaled, process_set=process_set),
                None, None, None, None, None)


class GroupedReducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, process_set, pre, post, *tensors):
        ctx.args = (op, pre, post, process_set)
        return _ops.synchronize(_ops.grouped_reducescatter_async(list(tensors), name, op,
                                                                 process_set, pre, post))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, process_set = ctx.args
        scaled = [_scaled_for_reducescatter(g, op, pre, post, process_set) for g in grads]
        return (None,) * 5 + tuple(grouped_allgather(scaled, process_set=process_set))


# --- the differentiable collectives ------------------------------------------------------

def _compress_all(tensors, compression):
    pairs = [compression.compress(t) for t in tensors]
    return [c for c, _ in pairs], [ctx for _, ctx in pairs]


def _grouped(tensors, compression, recorded, start):
    """A grouped collective on compressed tensors, decompressed: through autograd
    (`recorded(tensors)`) when any needs a gradient, else `start(tensors)`'s handle."""
    compressed, ctxs = _compress_all(tensors, compression)
    if any(_differentiable(t) for t in compressed):
        outs = recorded(compressed)
    else:
        outs = _ops.synchronize(start(compressed))
    return [compression.decompress(t, ctx) for t, ctx in zip(outs, ctxs)]


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None,
              prescale_factor=1.0, postscale_factor=1.0, process_set=global_process_set):
    """A new tensor with the reduction (default: the average over ranks). Differentiable:
    the gradient is the same allreduce of the incoming gradient."""
    op = _ops.reduce_op(op, average)
    compressed, ctx = compression.compress(tensor)
    if _differentiable(compressed):
        out = Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                              process_set)
    else:
        out = _ops.allreduce_blocking(compressed, None, name, op, prescale_factor,
                                      postscale_factor, process_set)
    return compression.decompress(out, ctx)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none,
                      op=None, prescale_factor=1.0, postscale_factor=1.0,
                      process_set=global_process_set):
    """A list of new tensors with the reductions; differentiable."""
    op = _ops.reduce_op(op, average)
    return _grouped(tensors, compression,
                    lambda ts: GroupedAllreduce.apply(
                        name, op, prescale_factor, postscale_factor, process_set, *ts),
                    lambda ts: _ops.grouped_allreduce_async(ts, None, name, op, prescale_factor,
                                                            postscale_factor, process_set))


def allgather(tensor, name=None, process_set=global_process_set):
    """The concatenation, in rank order of the set. Differentiable: the gradient is this
    rank's slice of the average over ranks of the incoming gradients."""
    if _differentiable(tensor):
        return Allgather.apply(tensor, name, process_set)
    return _ops.synchronize(_ops.allgather_async(tensor, name, process_set))


def grouped_allgather(tensors, name=None, process_set=global_process_set):
    """A tuple with the allgather of every tensor of the list; differentiable."""
    if any(_differentiable(t) for t in tensors):
        return GroupedAllgather.apply(name, process_set, *tensors)
    return _ops.synchronize(_ops.grouped_allgather_async(tensors, name, process_set))


def broadcast(tensor, root_rank, name=None, process_set=global_process_set):
    """A new tensor with ``root_rank``'s values. Differentiable: the root's gradient is the
    average over ranks of the incoming gradients, the others' zero."""
    if _differentiable(tensor):
        check_tensor(tensor, "broadcast tensor")
        return Broadcast.apply(tensor, root_rank, name, process_set)
    return _ops.synchronize(_ops.broadcast_async(tensor, root_rank, name, process_set))


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """The received rows; ``(output, received_splits)`` when ``splits`` is given.
    Differentiable: the gradient goes back with the reverse alltoall."""
    if _differentiable(tensor):
        return Alltoall.apply(tensor, splits, name, process_set)
    out, received = _ops.synchronize(_ops.alltoall_async(tensor, splits, name, process_set))
    return out if splits is None else (out, received)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average,
                  process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0):
    """This rank's block of the reduction. Differentiable with Horovod's rule: the allgather
    of the incoming gradients, times the set's size for Sum, times the scale factors."""
    op = _ops.reducescatter_op(op)
    compressed, ctx = compression.compress(tensor)
    if _differentiable(compressed):
        out = Reducescatter.apply(compressed, name, op, process_set, prescale_factor,
                                  postscale_factor)
    else:
        out = _ops.synchronize(_ops.reducescatter_async(compressed, name, op, process_set,
                                                        prescale_factor, postscale_factor))
    return compression.decompress(out, ctx)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0):
    """A list with the reducescatter of every tensor of the list; differentiable."""
    op = _ops.reducescatter_op(op)
    return _grouped(tensors, compression,
                    lambda ts: GroupedReducescatter.apply(
                        name, op, process_set, prescale_factor, postscale_factor, *ts),
                    lambda ts: _ops.grouped_reducescatter_async(ts, name, op, process_set,
                                                                prescale_factor,
                                                                postscale_factor))
