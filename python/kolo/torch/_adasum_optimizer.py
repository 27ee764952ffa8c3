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

from kolo.common import engine as _engine
from kolo.torch import mpi_ops as _ops
from kolo.torch._hooked_optimizer import HookedOptimizer


class _DistributedAdasumOptimizer(HookedOptimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1):
        HookedOptimizer.__init__(self, params, named_parameters, compression,
                                 backward_passes_per_step)
        self._requires_update = set()
        # Each parameter's value before its local step (Horovod's "starting model").
        self._starting_models = {p: torch.zeros_like(p, requires_grad=False)
                                 for p in self._parameter_names}
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = p.data.new(p.size()).zero_()
                    self._requires_update.add(p)
                    self._hook(p, self._on_pass)

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

    def _on_pass(self, p, ready):
        self._handles[p] = self._allreduce_grad_async(p) if ready else (None, None)

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
        _engine.count_step()
        return loss

    # As kolo's other DistributedOptimizer: torch wraps each optimizer class's step() once
    # with its hooks; the wrapped optimizer's step() is wrapped already, so this one is
    # marked and left alone.
    step.hooked = True
