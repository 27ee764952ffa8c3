"""DistributedOptimizer(op=Adasum) on more than one rank: Horovod's
``_DistributedAdasumOptimizer`` (horovod/torch/optimizer.py). Adasum combines the
ranks' *updates*, not their gradients: when a parameter's gradient is ready (its
``backward_passes_per_step``-th pass), the wrapped optimizer steps that parameter alone,
the change it made (the delta) is Adasum-allreduced, and ``step()`` sets the parameter to
its value before the local step plus the combined delta.

In Horovod's words: start = current; step() computes current - lr * f(g); delta =
current - start; allreduce_(delta, op=Adasum); start += delta; current = start.
"""
import contextlib

import torch

from kolo.torch import mpi_ops as _ops
from kolo.torch._optimizer_names import named as _named

_TOO_MANY_PASSES = ("Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")


def zero_grad_when_idle(optimizer, *args, **kwargs):
    """Both DistributedOptimizers' zero_grad(): Horovod's refusal while reductions of this
    step are pending, else the wrapped optimizer's."""
    if optimizer._handles:
        raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                             "before optimizer.step() or optimizer.synchronize(). This is "
                             "prohibited as it can cause a race condition.")
    return super(optimizer._kolo_wrapper, optimizer).zero_grad(*args, **kwargs)


class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        super(self._kolo_wrapper, self).__init__(params)
        self._compression = compression
        self._parameter_names = _named(self.param_groups, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in self._parameter_names}
        self._handles = {}  # parameter -> (handle or None, compression context)
        self._grad_accs = []
        self._requires_update = set()
        # Each parameter's value before its local step (Horovod's "starting model").
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False)
                                 for p in self._parameter_names}
        self._register_hooks()

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = p.data.new(p.size()).zero_()
                    self._requires_update.add(p)
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)  # keeps the hook alive

    def _allreduce_grad_async(self, p):
        """Steps the wrapped optimizer on ``p`` alone and starts the Adasum allreduce of the
        change it made, in place in ``p``."""
        start = self._starting_models[p]
        stashed = [group["params"] for group in self.param_groups]
        for group in self.param_groups:
            group["params"] = [p] if any(p is v for v in group["params"]) else []
        try:
            start.data.copy_(p)
            super(self._kolo_wrapper, self).step()
            p.data.sub_(start)  # the delta
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params
        compressed, ctx = self._compression.compress(p)
        handle = _ops.allreduce_async_(compressed.data, name=self._parameter_names.get(p),
                                       op=_ops.Adasum)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if self._allreduce_delay[p] <= 0:
                raise AssertionError(_TOO_MANY_PASSES)
            handle, ctx = None, None
            self._allreduce_delay[p] -= 1
            if self._allreduce_delay[p] == 0:
                handle, ctx = self._allreduce_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Nothing to wait for here: step() does it (as Horovod's)."""

    @contextlib.contextmanager
    def skip_synchronize(self):
        """Raises at once, as Horovod's (the update is applied in step())."""
        raise AssertionError("Skipping synchronization is not supported when using Adasum "
                             "optimizer.")

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in self._requires_update - set(self._handles):
            self._handles[p] = self._allreduce_grad_async(p)
        for p, (handle, ctx) in self._handles.items():
            if handle is None:  # step() before backward_passes_per_step passes
                handle, ctx = self._allreduce_grad_async(p)
                self._handles[p] = (handle, ctx)
            delta = self._compression.decompress(_ops.synchronize(handle), ctx)
            start = self._starting_models[p]
            start.data.add_(delta.data)
            p.data.copy_(start)
            self._allreduce_delay[p] = self.backward_passes_per_step
        self._handles.clear()
        return loss

    # As kolo's other DistributedOptimizer: torch wraps each optimizer class's step() once
    # with its hooks; the wrapped optimizer's step() is wrapped already, so this one is
    # marked and left alone.
    step.hooked = True

    def zero_grad(self, *args, **kwargs):
        return zero_grad_when_idle(self, *args, **kwargs)
