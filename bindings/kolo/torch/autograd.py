"""Autograd for the non-in-place collectives, with Horovod's backward rules:
allreduce -> allreduce; allgather -> sum-allreduce, then this rank's slice;
broadcast -> sum-reduce to the root; alltoall -> the reverse alltoall;
reducescatter -> allgather."""
import torch

import kolo.torch as _kt


class Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, pre, post, process_set):
        ctx.args = (op, pre, post, process_set)
        return _kt.synchronize(_kt._allreduce_async_plain(tensor, name, op, pre, post, process_set))

    @staticmethod
    def backward(ctx, grad):
        op, pre, post, process_set = ctx.args
        g = _kt.synchronize(_kt._allreduce_async_plain(grad.contiguous(), None, op, pre, post,
                                                       process_set))
        return g, None, None, None, None, None


class Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, process_set):
        ctx.process_set = process_set
        dim0 = torch.tensor([tensor.shape[0]], dtype=torch.int64)
        ctx.dim0s = _kt._allgather_plain(dim0, None, process_set).tolist()
        ctx.rank = process_set.rank() if process_set is not None else _kt.rank()
        return _kt._allgather_plain(tensor, name, process_set)

    @staticmethod
    def backward(ctx, grad):
        summed = _kt.synchronize(_kt._allreduce_async_plain(grad.contiguous(), None, _kt.Sum, 1.0,
                                                            1.0, ctx.process_set))
        start = sum(ctx.dim0s[:ctx.rank])
        return summed[start:start + ctx.dim0s[ctx.rank]], None, None


class Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, process_set):
        ctx.root_rank, ctx.process_set = root_rank, process_set
        out = tensor.clone()
        _kt.synchronize(_kt.broadcast_async_(out, root_rank, name, process_set))
        return out

    @staticmethod
    def backward(ctx, grad):
        summed = _kt.synchronize(_kt._allreduce_async_plain(grad.contiguous(), None, _kt.Sum, 1.0,
                                                            1.0, ctx.process_set))
        me = ctx.process_set.rank() if ctx.process_set is not None else _kt.rank()
        if me != ctx.root_rank:
            summed = summed * 0
        return summed, None, None, None


class Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, process_set):
        ctx.process_set = process_set
        out, received = _kt._alltoall_plain(tensor, splits, name, process_set)
        ctx.received = received
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, grad, _):
        back, _unused = _kt._alltoall_plain(grad.contiguous(), ctx.received, None, ctx.process_set)
        return back, None, None, None


class Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, pre, post, process_set):
        n = process_set.size() if process_set is not None else _kt.size()
        ctx.scale = pre * post * (1.0 / n if op == _kt.Average else 1.0)
        ctx.process_set = process_set
        return _kt._reducescatter_plain(tensor, name, op, pre, post, process_set)

    @staticmethod
    def backward(ctx, grad):
        gathered = _kt._allgather_plain(grad.contiguous(), None, ctx.process_set)
        return gathered * ctx.scale, None, None, None, None, None
