"""DistributedOptimizer: gradients reduced across ranks during backward
(Horovod's ``horovod.torch.optimizer``).

Each parameter's gradient accumulator gets a hook; when a parameter's
gradient has been accumulated ``backward_passes_per_step`` times, its
allreduce starts at once (overlapping the rest of backward), or, with
``groups``, once every member of its group is ready (one grouped allreduce).
``step()`` waits for all of them, then runs the wrapped optimizer's step.
Sparse gradients are reduced by gathering indices and values, or densified
with ``sparse_as_dense=True``.
"""
import contextlib
import warnings

import torch

from kolo.common import engine as _engine
from kolo.common.ops import check_op, groups_setting, predivided, split_list
from kolo.torch import mpi_ops as _ops
from kolo.torch._adasum_optimizer import _DistributedAdasumOptimizer
from kolo.torch._hooked_optimizer import HookedOptimizer, wrap
from kolo.torch.compression import Compression
from kolo.torch.functions import broadcast_object
from kolo.torch.process_sets import global_process_set

_STEP_AFTER_SYNCHRONIZE = (
    "optimizer.step() called without optimizer.skip_synchronize() context after "
    "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
    "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in your "
    "code.")


def _check_groups(groups):
    if groups is None:
        return
    if not (isinstance(groups, list) or groups > 0):
        raise ValueError("groups should be a non-negative integer or a list of list of "
                         "torch.Tensor.")
    if isinstance(groups, list):
        seen = set()
        for group in groups:
            for p in group:
                if not isinstance(p, torch.Tensor):
                    raise ValueError("groups must consist of torch.Tensor.")
                if id(p) in seen:
                    raise ValueError("A parameter can only appear once in groups.")
                seen.add(id(p))


class _DistributedOptimizer(HookedOptimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step=1,
                 op=_ops.Average, gradient_predivide_factor=1.0, groups=None,
                 sparse_as_dense=False, process_set=global_process_set):
        HookedOptimizer.__init__(self, params, named_parameters, compression,
                                 backward_passes_per_step)
        self.op = op
        self.gradient_predivide_factor = gradient_predivide_factor
        self.sparse_as_dense = sparse_as_dense
        self.process_set = process_set
        self._requires_update = []
        self._synchronized = False
        self._should_synchronize = True
        _check_groups(groups)
        self._groups = groups
        self._p_to_group = {}
        self._group_counts = {}
        self._sparse_dims = {}  # parameter -> sparse_dim() of its last sparse gradient
        # As Horovod: a single process reduces nothing; ranks outside the set neither.
        if process_set.included() is not False and _ops.size() > 1:
            self._register_hooks()

    def _register_hooks(self):
        params = [p for g in self.param_groups for p in g["params"] if p.requires_grad]
        if self._groups is not None:
            self._form_groups(params)
        for p in params:
            self._requires_update.append(p)
            self._hook(p, self._on_pass)

    def _form_groups(self, params):
        # Rank 0's parameter order decides the groups on every rank.
        order = broadcast_object([self._parameter_names[p] for p in params], root_rank=0,
                                 name="DistributedOptimizer.groups",
                                 process_set=self.process_set)
        params = sorted(params, key=lambda p: order.index(self._parameter_names[p]))
        if isinstance(self._groups, list):
            wanted = {id(p) for p in params}
            groups = [[p for p in g if id(p) in wanted] for g in self._groups]
            grouped = {id(p) for g in groups for p in g}
            groups += [[p] for p in params if id(p) not in grouped]
        else:
            groups = split_list(params, self._groups)
        for group in (tuple(g) for g in groups if g):
            for p in group:
                self._p_to_group[p] = group
            self._group_counts[group] = 0

    def _on_pass(self, p, ready):
        if not ready:
            self._handles[p] = (None, None)
            return
        if self._groups is None:
            self._handles[p] = self._allreduce_grad_async(p)
            return
        group = self._p_to_group[p]
        self._group_counts[group] += 1
        if self._group_counts[group] < len(group):
            self._handles[p] = (None, None)
            return
        self._handles[group] = self._grouped_allreduce_grad_async(group)
        for member in group:
            self._handles.pop(member, None)
        self._group_counts[group] = 0

    def _allreduce_grad_async(self, p):
        if p.grad is None:
            # Another rank may have a gradient for it (a dynamic graph): submit zeros, sparse
            # ones where this parameter's gradients were sparse before, so that they pair with
            # the other ranks' gathers (Horovod submits dense zeros, which never pair).
            sparse_dim = self._sparse_dims.get(p)
            if sparse_dim is None or self.sparse_as_dense:
                p.grad = torch.zeros_like(p)
            else:
                p.grad = _ops._sparse_coo(
                    torch.empty((sparse_dim, 0), dtype=torch.int64, device=p.device),
                    p.new_empty((0,) + tuple(p.shape[sparse_dim:])), p.shape)
        name = self._parameter_names[p]
        tensor = p.grad
        if tensor.is_sparse:
            self._sparse_dims[p] = tensor.sparse_dim()
            if not self.sparse_as_dense:
                return (_ops.sparse_allreduce_async(tensor, name="allgather." + name,
                                                    op=self.op, process_set=self.process_set),
                        None)
            tensor = tensor.to_dense()
        compressed, ctx = self._compression.compress(tensor)
        if not compressed.is_contiguous():
            compressed = compressed.contiguous()
        pre, post = predivided(self.op, self.gradient_predivide_factor)
        handle = _ops.allreduce_async_(compressed, name="allreduce." + name, op=self.op,
                                       prescale_factor=pre, postscale_factor=post,
                                       process_set=self.process_set)
        return handle, ctx

    def _grouped_allreduce_grad_async(self, group):
        pairs = [self._compression.compress(p.grad) for p in group]
        tensors = [t if t.is_contiguous() else t.contiguous() for t, _ in pairs]
        handle = _ops.grouped_allreduce_async_(
            tensors, name="grouped_allreduce." + self._parameter_names[group[0]], op=self.op,
            process_set=self.process_set)
        return handle, [ctx for _, ctx in pairs]

    def synchronize(self):
        """Waits for every gradient's reduction and writes the results into ``p.grad``.
        Parameters whose hook did not fire (unused in this step) are reduced as zeros, so
        every rank submits the same names."""
        if self.process_set.included() is False:
            self._synchronized = True
            return
        done = set()
        for key in self._handles:
            done.update(key if isinstance(key, tuple) else (key,))
        for p in self._requires_update:
            if p not in done:
                self._handles[p] = self._allreduce_grad_async(p)
        for key, (handle, ctx) in list(self._handles.items()):
            if handle is None:  # fewer backward passes than backward_passes_per_step
                self._handles[key] = self._allreduce_grad_async(key)
        try:
            for key, (handle, ctx) in self._handles.items():
                if isinstance(key, tuple):
                    outputs = _ops.synchronize(handle)
                    for p, out, c in zip(key, outputs, ctx):
                        self._write_grad(p, self._compression.decompress(out, c))
                else:
                    out = handle() if callable(handle) else _ops.synchronize(handle)
                    self._write_grad(key, self._compression.decompress(out, ctx))
        except Exception:
            # The step is lost. Its other reductions were started on every rank and end
            # soon, successfully or not: they are waited for (their errors dropped), so
            # that their names (the parameters') are free for the next step.
            for handle, _ in self._handles.values():
                try:
                    handle() if callable(handle) else _ops.synchronize(handle)
                except Exception:  # the step's first error is raised below
                    pass
            raise
        except BaseException:
            # Interrupted (KeyboardInterrupt): nothing more is waited for; the names are
            # free once their reductions complete.
            for handle, _ in self._handles.values():
                if callable(handle):
                    handle.release()
                elif handle is not None:
                    _ops._release(handle)
            raise
        finally:
            for p in self._requires_update:
                self._allreduce_delay[p] = self.backward_passes_per_step
            for group in self._group_counts:
                self._group_counts[group] = 0
            self._handles.clear()
        self._synchronized = True

    @staticmethod
    def _write_grad(p, reduced):
        if p.grad.is_sparse:
            # A sparse gradient stays sparse (sparse tensors have no set_/copy_ from dense).
            p.grad.zero_().add_(reduced if reduced.is_sparse else reduced.to_sparse())
        elif reduced is not p.grad:
            p.grad.copy_(reduced)

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For gradient clipping: call synchronize() yourself, then step() inside this."""
        self._should_synchronize = False
        try:
            yield
        finally:
            self._should_synchronize = True

    def step(self, closure=None):
        if self._should_synchronize:
            if self._synchronized:
                # Horovod reduces the gradients a second time here; kolo warns the same way
                # but does not redo the reduction (with op=Sum it would multiply them).
                warnings.warn(_STEP_AFTER_SYNCHRONIZE)
            else:
                self.synchronize()
        self._synchronized = False
        loss = super(self._kolo_wrapper, self).step(closure)
        _engine.count_step()
        return loss

    # torch wraps each optimizer class's step() once, at its first instance, with the
    # profiler's label and (from 2.0) the step pre/post hooks. The wrapped optimizer's class
    # is wrapped already and its step() runs inside this one: marked as wrapped, this step()
    # stays as it is, so every hook runs once per step, after the gradients are reduced
    # (unmarked, torch 2.x ran each hook twice).
    step.hooked = True

    def load_state_dict(self, *args, **kwargs):
        self._handles = {}
        self._synchronized = False
        self._should_synchronize = True
        self.set_backward_passes_per_step(self.backward_passes_per_step)
        return super(self._kolo_wrapper, self).load_state_dict(*args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=_ops.Average,
                         gradient_predivide_factor=1.0, num_groups=0, groups=None,
                         sparse_as_dense=False, process_set=global_process_set):
    """Wraps ``optimizer`` so that gradients are reduced (by default averaged) across the
    ranks of ``process_set`` before each step (Horovod's signature and behaviour); with
    ``op=Adasum`` on several ranks, each parameter's update is combined instead, as
    Horovod's ``_DistributedAdasumOptimizer`` (the global set only).

    ``groups``: an int (that many groups of parameters, each reduced with one grouped
    allreduce) or a list of lists of parameters (the others are groups of one);
    ``num_groups`` is its deprecated name. ``sparse_as_dense``: densify sparse gradients
    instead of gathering indices and values.
    """
    op = _ops.Average if op is None else op
    process_set = global_process_set if process_set is None else process_set
    check_op(op, "kolo.torch")
    predivided(op, gradient_predivide_factor)  # Horovod's refusal of f != 1 but for Average
    groups = groups_setting(num_groups, groups)
    if backward_passes_per_step <= 0:
        raise ValueError("backward_passes_per_step must be > 0")
    adasum = op == _ops.Adasum and _ops.size() > 1
    if adasum and process_set != global_process_set:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    # As Horovod: Adasum on several ranks combines each parameter's update
    # (kolo.torch._adasum_optimizer); otherwise the gradients are reduced.
    if adasum:
        return wrap(_DistributedAdasumOptimizer, optimizer, named_parameters, compression,
                    backward_passes_per_step)
    return wrap(_DistributedOptimizer, optimizer, named_parameters, compression,
                backward_passes_per_step, op, gradient_predivide_factor, groups,
                sparse_as_dense, process_set)
