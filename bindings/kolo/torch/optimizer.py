"""DistributedOptimizer: gradients averaged across ranks during backward.

Each parameter's gradient accumulator gets a hook; when a parameter's
gradient has been accumulated ``backward_passes_per_step`` times, its
allreduce starts at once (overlapping the rest of backward). ``step()`` waits
for all of them, then runs the wrapped optimizer's step.
"""
import contextlib

import torch

import kolo.torch as _kt
from kolo.torch.compression import Compression


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, process_set):
        super(self.__class__, self).__init__(params)
        self._compression = compression
        self._op = op
        self._process_set = process_set
        self._predivide = gradient_predivide_factor
        self.backward_passes_per_step = backward_passes_per_step
        self._names = self._parameter_names(named_parameters)
        self._handles = {}  # parameter -> (handle, compressed tensor, context)
        self._delay = {}
        self._grad_accs = []
        self._synchronized = False
        self._should_synchronize = True
        self._register_hooks()

    def _parameter_names(self, named_parameters):
        all_params = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is None:
            return {p: "allreduce.noname.%d" % i for i, p in enumerate(all_params)}
        named = list(named_parameters)
        if any(not isinstance(n, tuple) or len(n) != 2 for n in named):
            raise ValueError("named_parameters must be a sequence of (name, parameter) pairs, "
                             "e.g. model.named_parameters()")
        names = [n for n, _ in named]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError("named_parameters has duplicate names: %s" % ", ".join(duplicates))
        by_param = {p: n for n, p in named}
        unnamed = [i for i, p in enumerate(all_params) if p not in by_param]
        if unnamed:
            raise ValueError("named_parameters was given, but %d of the optimizer's parameters "
                             "are not in it (indices %s); pass model.named_parameters() for the "
                             "same model" % (len(unnamed), unnamed[:10]))
        return {p: "allreduce." + by_param[p] for p in all_params}

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._delay[p] = self.backward_passes_per_step
                p_tmp = p.expand_as(p)
                grad_acc = p_tmp.grad_fn.next_functions[0][0]
                grad_acc.register_hook(self._make_hook(p))
                self._grad_accs.append(grad_acc)  # keeps the hook alive

    def _make_hook(self, p):
        def hook(*ignore):
            if self._delay[p] <= 0:
                raise AssertionError(
                    "Gradients were computed more than backward_passes_per_step times before "
                    "step(); raise backward_passes_per_step or call step() / synchronize() "
                    "after each backward pass.")
            self._delay[p] -= 1
            if self._delay[p] == 0:
                self._handles[p] = self._allreduce_async(p)
        return hook

    def _allreduce_async(self, p):
        if p.grad is None:
            p.grad = torch.zeros_like(p)
        tensor, ctx = self._compression.compress(p.grad)
        if self._op == _kt.Average:
            pre, post = 1.0 / self._predivide, self._predivide
        else:
            pre, post = 1.0, 1.0
        if tensor is p.grad and not tensor.is_contiguous():
            tensor = tensor.contiguous()
        handle = _kt.allreduce_async_(tensor, name=self._names[p], op=self._op,
                                      prescale_factor=pre, postscale_factor=post,
                                      process_set=self._process_set)
        return handle, tensor, ctx

    def synchronize(self):
        """Waits for every gradient's allreduce; parameters whose hook did not fire (unused
        in this step) are reduced as zeros so every rank submits the same names."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad and p not in self._handles:
                    self._handles[p] = self._allreduce_async(p)
        for p, (handle, tensor, ctx) in list(self._handles.items()):
            reduced = _kt.synchronize(handle)
            self._delay[p] = self.backward_passes_per_step
            out = self._compression.decompress(reduced, ctx)
            if out is not p.grad:
                p.grad.copy_(out)
        self._handles.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For gradient clipping: call synchronize() yourself, then step() inside this."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize and not self._synchronized:
            self.synchronize()
        self._synchronized = False
        return super(self.__class__, self).step(closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError(
                "optimizer.zero_grad() was called after loss.backward() but before "
                "optimizer.step() or optimizer.synchronize(); the gradients' allreduces are "
                "still running")
        return super(self.__class__, self).zero_grad(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=None, gradient_predivide_factor=1.0,
                         groups=None, sparse_as_dense=False, process_set=None):
    """Wraps ``optimizer`` so that gradients are averaged across ranks (Horovod's API)."""
    op = _kt.Average if op is None else op
    if op == _kt.Adasum:
        raise NotImplementedError("Adasum is not supported yet; use Average or Sum")
    if op not in (_kt.Average, _kt.Sum):
        raise ValueError("DistributedOptimizer reduces with kolo.torch.Average or Sum")
    if gradient_predivide_factor != 1.0 and op != _kt.Average:
        raise ValueError("gradient_predivide_factor needs op=Average")
    if backward_passes_per_step < 1:
        raise ValueError("backward_passes_per_step must be at least 1")
    if groups is not None:
        raise NotImplementedError("groups= is not supported yet; kolo fuses small gradients "
                                  "automatically")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, process_set)
