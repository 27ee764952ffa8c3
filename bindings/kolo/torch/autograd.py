"""Autograd for the non-in-place collectives, with Horovod 0.28's backward rules:

- allreduce: the same allreduce (op, scale factors, set) of the incoming gradient;
- allgather: average-allreduce of the incoming gradient, then this rank's rows
  (the first dimensions are gathered in backward, not forward);
- broadcast: average-allreduce of the incoming gradient on the root, zero elsewhere;
- alltoall: the reverse alltoall (with the splits this rank received);
- reducescatter: allgather of the incoming gradient, times the set's size for
  Sum, times prescale_factor and postscale_factor;
- the grouped forms: the same, per tensor, with the grouped collectives.
"""
import torch

from kolo.torch import mpi_ops as _ops
from kolo.torch.process_sets import _set_rank, _set_size


def _dense(grad):
    return grad.contiguous()


def _my_rows(reduced, dims, my_dim, process_set):
    """This rank's rows of ``reduced``, given every rank's first dimension."""
    r = _set_rank(process_set)
    offset = int(dims[:r].sum()) if r else 0
    return reduced.narrow(0, offset, my_dim)


def _scaled_for_reducescatter(grad, op, pre, post, process_set):
    if op == _ops.Sum:
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
        return _ops.synchronize(_ops.allreduce_async(tensor, None, name, op, pre, post,
                                                     process_set))

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, process_set = ctx.args
        return (_ops.allreduce(_dense(grad), op=op, prescale_factor=pre, postscale_factor=post,
                               process_set=process_set),
                None, None, None, None, None)


class GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, pre, post, process_set, *tensors):
        ctx.args = (op, pre, post, process_set)
        return _ops.synchronize(_ops.grouped_allreduce_async(list(tensors), None, name, op, pre,
                                                             post, process_set))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, process_set = ctx.args
        reduced = _ops.grouped_allreduce([_dense(g) for g in grads], op=op, prescale_factor=pre,
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
        reduced = _ops.allreduce(_dense(grad), op=_ops.Average, process_set=ps)
        dims = _ops.allgather(torch.tensor([ctx.dim], dtype=torch.int32), process_set=ps)
        return _my_rows(reduced, dims, ctx.dim, ps), None, None


class GroupedAllgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, process_set, *tensors):
        ctx.dims, ctx.process_set = [t.shape[0] for t in tensors], process_set
        return _ops.synchronize(_ops.grouped_allgather_async(list(tensors), name, process_set))

    @staticmethod
    def backward(ctx, *grads):
        ps = ctx.process_set
        reduced = _ops.grouped_allreduce([_dense(g) for g in grads], op=_ops.Average,
                                         process_set=ps)
        dims = _ops.grouped_allgather([torch.tensor([d], dtype=torch.int32) for d in ctx.dims],
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
        reduced = _ops.allreduce(_dense(grad), op=_ops.Average, process_set=ctx.process_set)
        if _ops.rank() != ctx.root_rank:  # a global rank, as root_rank
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
        back, _ = _ops.alltoall(_dense(grad), splits=ctx.received, process_set=ctx.process_set)
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
        return (_ops.allgather(scaled, process_set=process_set),
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
        return (None,) * 5 + tuple(_ops.grouped_allgather(scaled, process_set=process_set))
