"""What ``KoloStrategy`` does, written once for both Lightning packages.

``lightning.pytorch`` and ``pytorch_lightning`` ship the same classes twice
(``ParallelStrategy``, ``ClusterEnvironment``), so the behaviour lives here in
two mixins that import no Lightning; ``kolo.lightning`` and
``kolo.lightning.pytorch_lightning`` put each in front of its package's base
class.

How a training step runs (automatic optimization):

1. ``setup``: parameters and buffers are broadcast from rank 0; each optimizer
   is wrapped in ``kolo.torch.DistributedOptimizer`` (with its state), whose
   hooks start a parameter's allreduce as soon as backward has produced its
   gradient, and held in ``skip_synchronize()`` so that ``step()`` does not
   wait by itself.
2. Lightning calls ``optimizer.step(closure)``; the closure runs
   ``training_step`` and backward, and the strategy's ``post_backward``
   waits for the allreduces (``synchronize()``) before the closure returns,
   so gradient clipping and the update see the averaged gradients.
3. ``accumulate_grad_batches=k``: Lightning runs the first k-1 batches inside
   ``block_backward_sync()``, where the hooks only count (the gradients add
   up locally); the k-th backward reduces the sum once, as DDP's
   ``no_sync()`` does.
"""
import contextlib
import os
import pickle
import sys

import torch

import kolo.torch as kt

# Backward passes a wrapped optimizer may see before its hooks start an allreduce, while
# gradients accumulate locally (and once an optimizer is retired).
_NEVER = sys.maxsize

_REDUCE_OPS = {"sum": kt.Sum, "max": kt.Max, "min": kt.Min, "product": kt.Product}
_MEAN_NAMES = ("mean", "avg")


def _op_name(reduce_op):
    """'sum', 'mean', ... from a string (any case) or a torch.distributed ReduceOp."""
    if reduce_op is None:
        return "mean"
    if isinstance(reduce_op, str):
        return reduce_op.lower()
    name = getattr(reduce_op, "name", None) or str(reduce_op).rsplit(".", 1)[-1]
    return name.lower()


def _check_group(group, what):
    """kolo's collectives run over a kolo ProcessSet; torch.distributed groups do not exist
    under this strategy."""
    if group is None:
        return kt.global_process_set
    if isinstance(group, kt.ProcessSet):
        return group
    raise ValueError("%s(group=%r): with strategy='kolo' a group is a kolo.torch.ProcessSet "
                     "(or None for all ranks); torch.distributed process groups do not exist "
                     "here" % (what, group))


class _AllGatherSumGrad(torch.autograd.Function):
    """Every rank's tensor stacked along a new first dimension. The gradient is this rank's
    row of the sum over ranks of the incoming gradients, as Lightning's DDP all_gather: every
    rank usually computes the same loss from the gathered rows, and the optimizer then
    averages."""

    @staticmethod
    def forward(ctx, tensor, process_set):
        ctx.process_set = process_set
        return kt.allgather(tensor.unsqueeze(0).contiguous(), process_set=process_set)

    @staticmethod
    def backward(ctx, grad):
        summed = kt.allreduce(grad.contiguous(), op=kt.Sum, process_set=ctx.process_set)
        return summed[ctx.process_set.rank()], None


class _StepMarker(torch.optim.lr_scheduler.LRScheduler):
    """Changes no learning rate. Made on an optimizer, it marks the optimizer's step() the way
    torch's schedulers mark it when they are made (they warn when scheduler.step() comes
    before a marked optimizer.step(), or when step() is not marked)."""

    def get_lr(self):
        return [group["lr"] for group in self.optimizer.param_groups]


def _move_schedulers(configs, original, wrapped):
    """The schedulers of `original` adjust `wrapped` instead (they share the param groups; the
    move keeps Lightning's view of which scheduler belongs to which optimizer)."""
    moved = False
    for config in configs:
        if getattr(config.scheduler, "optimizer", None) is original:
            config.scheduler.optimizer = wrapped
            moved = True
    if moved and original is not wrapped:
        _StepMarker(wrapped)


class EnvironmentMixin:
    """The cluster as kolorun started it: ranks and world size come from kolo (set by
    kolorun / mpirun), never from Lightning's guess."""

    @property
    def creates_processes_externally(self):
        return True

    @property
    def main_address(self):
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self):
        return int(os.environ.get("MASTER_PORT", "29500"))

    @staticmethod
    def detect():
        return False  # chosen by KoloStrategy, never by Lightning's own detection

    def world_size(self):
        return kt.size()

    def set_world_size(self, size):
        pass  # kolorun decides

    def global_rank(self):
        return kt.rank()

    def set_global_rank(self, rank):
        pass  # kolorun decides

    def local_rank(self):
        return kt.local_rank()

    def node_rank(self):
        return kt.cross_rank()


class StrategyMixin:
    """Data-parallel training on kolo's collectives, one process per device, the processes
    started by kolorun (Horovod's Lightning strategy, without its silent learning-rate
    scaling).

    Arguments after the usual ``ParallelStrategy`` ones go to every
    ``kolo.torch.DistributedOptimizer``: ``compression`` (``kolo.torch.Compression.fp16``,
    ...), ``gradient_predivide_factor``, ``sparse_as_dense`` and ``groups`` (an int: that
    many grouped allreduces per step).
    """

    strategy_name = "kolo"
    _environment_class = None  # set by the package-specific subclass

    def __init__(self, accelerator=None, parallel_devices=None, checkpoint_io=None,
                 precision_plugin=None, compression=None, gradient_predivide_factor=1.0,
                 sparse_as_dense=False, groups=None):
        kt.init()
        super().__init__(accelerator=accelerator, parallel_devices=parallel_devices,
                         cluster_environment=self._environment_class(),
                         checkpoint_io=checkpoint_io, precision_plugin=precision_plugin)
        if groups is not None and not isinstance(groups, int):
            raise ValueError("KoloStrategy(groups=<%s>): groups is an int (that many grouped "
                             "allreduces per step); lists of parameters belong to "
                             "kolo.torch.DistributedOptimizer itself" % type(groups).__name__)
        self._optimizer_options = dict(
            compression=compression if compression is not None else kt.Compression.none,
            gradient_predivide_factor=gradient_predivide_factor,
            sparse_as_dense=sparse_as_dense, groups=groups)
        self._distributed = []  # the optimizers this strategy wrapped, in self.optimizers
        self._skip_synchronize = None  # ExitStack holding their skip_synchronize()
        self._backward_optimizer = None
        self._sync_blocked = False
        self._failed = False
        self._set_rank_zero()

    # --- who is who: kolo's view, never Lightning's -------------------------------------

    @property
    def global_rank(self):
        return kt.rank()

    @property
    def local_rank(self):
        return kt.local_rank()

    @property
    def node_rank(self):
        return kt.cross_rank()

    @property
    def world_size(self):
        return kt.size()

    @property
    def num_nodes(self):
        return kt.cross_size()

    @num_nodes.setter
    def num_nodes(self, num_nodes):
        # Lightning passes Trainer(num_nodes=...) here; 1 is its default.
        if num_nodes not in (1, kt.cross_size()):
            raise self._misconfiguration(
                "Trainer(num_nodes=%d) with strategy='kolo': kolorun started this job on %d "
                "host(s) (kolorun -H / --hostfile / the scheduler's allocation decide); leave "
                "num_nodes out" % (num_nodes, kt.cross_size()))

    @property
    def num_processes(self):
        return 1

    @property
    def is_distributed(self):
        return True  # Lightning then gives each dataloader a DistributedSampler

    @property
    def distributed_sampler_kwargs(self):
        return {"num_replicas": kt.size(), "rank": kt.rank()}

    @property
    def root_device(self):
        kinds = {d.type for d in self.parallel_devices or [torch.device("cpu")]}
        if "cuda" not in kinds:
            return torch.device("cpu")
        # One GPU per process: the local rank's, or the only one this process sees
        # (kolorun --pin-gpus, CUDA_VISIBLE_DEVICES).
        count = torch.cuda.device_count()
        return torch.device("cuda", 0 if count == 1 else kt.local_rank())

    def model_to_device(self):
        self.model.to(self.root_device)

    def set_world_ranks(self):
        """Called by Lightning once the accelerator and devices are known (when the Trainer
        is made): refuses what this strategy cannot do, with the reason."""
        self._check_devices()
        if self._layer_sync is not None:
            raise self._misconfiguration(
                "Trainer(sync_batchnorm=True) with strategy='kolo': Lightning's SyncBatchNorm "
                "runs on torch.distributed, which this strategy does not start; use "
                "kolo.torch.SyncBatchNorm layers in the model instead")
        self._set_rank_zero()

    def _check_devices(self):
        devices = list(self.parallel_devices or [])
        kinds = {d.type for d in devices}
        if kinds - {"cpu", "cuda"}:
            raise self._misconfiguration(
                "strategy='kolo' trains on the CPU or on CUDA GPUs, not on %s"
                % ", ".join(sorted(kinds - {"cpu", "cuda"})))
        if "cuda" in kinds:
            if not kt.cuda_built():
                raise self._misconfiguration(
                    "Trainer(accelerator='gpu') with strategy='kolo': this kolo build has no "
                    "GPU support (built without CUDA), so its collectives cannot take GPU "
                    "tensors; train with accelerator='cpu', or build kolo with "
                    "-DKOLO_WITH_CUDA=ON")
            count = torch.cuda.device_count()
            if count > 1 and kt.local_rank() >= count:
                raise self._misconfiguration(
                    "rank %d (local rank %d) sees %d GPUs: start at most %d ranks per host, "
                    "one GPU each" % (kt.rank(), kt.local_rank(), count, count))
        elif len(devices) not in (1, kt.local_size()):
            raise self._misconfiguration(
                "Trainer(devices=%d) with strategy='kolo': every process trains on one device "
                "and kolorun starts the processes (here %d on this host: kolorun -np); leave "
                "devices out" % (len(devices), kt.local_size()))

    def _set_rank_zero(self):
        from lightning_utilities.core.rank_zero import rank_zero_only
        rank_zero_only.rank = kt.rank()  # one object for both Lightning packages

    # --- set up: same weights everywhere, optimizers that reduce --------------------------

    def setup(self, trainer):
        self._failed = False
        super().setup(trainer)
        kt.broadcast_parameters(self.lightning_module.state_dict(), root_rank=0)
        if trainer.state.fn != "fit":
            return
        wrapped = [self._wrap(opt) for opt in self.optimizers]
        for original, new in zip(self.optimizers, wrapped):
            _move_schedulers(self.lr_scheduler_configs, original, new)
        self.optimizers = wrapped
        self._skip_synchronize = contextlib.ExitStack()
        for opt in self._distributed:
            # post_backward() waits for the gradients, inside the closure that step() runs.
            self._skip_synchronize.enter_context(opt.skip_synchronize())

    @property
    def optimizers(self):
        return self._optimizers

    @optimizers.setter
    def optimizers(self, optimizers):
        super(StrategyMixin, type(self)).optimizers.fset(self, optimizers)
        # Lightning's LightningOptimizer subclasses the optimizer's class and copies its
        # __dict__, so a method of DistributedOptimizer called through it would run with
        # the wrapper as `self` and keep its bookkeeping (pending handles, flags) on the
        # copy. Such calls go to the optimizer itself.
        for lightning_optimizer in self._lightning_optimizers:
            real = lightning_optimizer._optimizer
            if any(real is opt for opt in getattr(self, "_distributed", ())):
                for name, value in vars(type(real)).items():
                    if callable(value) and not name.startswith("__") and name != "step":
                        setattr(lightning_optimizer, name, getattr(real, name))

    def _wrap(self, optimizer):
        if callable(getattr(optimizer, "skip_synchronize", None)):
            self._distributed.append(optimizer)  # configure_optimizers wrapped it already
            return optimizer
        in_optimizer = {p for group in optimizer.param_groups for p in group["params"]}
        named = [(name, p) for name, p in self.lightning_module.named_parameters()
                 if p in in_optimizer]
        if not named:
            return optimizer  # none of the model's parameters (configure_optimizers gave none)
        wrapped = kt.DistributedOptimizer(optimizer, named_parameters=named,
                                          **self._optimizer_options)
        if optimizer.state:
            wrapped.load_state_dict(optimizer.state_dict())
        if not isinstance(optimizer, torch.optim.LBFGS):  # LBFGS state cannot be broadcast
            kt.broadcast_optimizer_state(wrapped, root_rank=0)
        self._distributed.append(wrapped)
        return wrapped

    # --- backward: reduce while it runs, wait before the step ----------------------------

    def backward(self, closure_loss, optimizer, *args, **kwargs):
        self._backward_optimizer = optimizer
        try:
            return super().backward(closure_loss, optimizer, *args, **kwargs)
        finally:
            self._backward_optimizer = None

    def post_backward(self, closure_loss):
        if self._sync_blocked:
            return
        # Automatic optimization names the optimizer; manual_backward() does not.
        target = getattr(self._backward_optimizer, "_optimizer", self._backward_optimizer)
        for opt in self._distributed:
            if target is None or opt is target:
                opt.synchronize()

    @contextlib.contextmanager
    def block_backward_sync(self):
        """Gradient accumulation: backward passes in here add up locally; the next one
        outside reduces the sum."""
        self._sync_blocked = True
        for opt in self._distributed:
            opt.set_backward_passes_per_step(_NEVER)
        try:
            yield None
        finally:
            self._sync_blocked = False
            for opt in self._distributed:
                opt.set_backward_passes_per_step(1)

    # --- collectives ---------------------------------------------------------------------

    def reduce(self, tensor, group=None, reduce_op="mean"):
        """Reduces ``tensor`` over the ranks in place and returns it, as Lightning's DDP:
        ``reduce_op`` 'mean' (or 'avg', None), 'sum', 'max', 'min', 'product', or the
        torch.distributed ReduceOp of one of them. The mean of an integer tensor keeps its
        dtype (the sum divided by the world size, truncated), as DDP on gloo."""
        if not isinstance(tensor, torch.Tensor):
            return tensor
        process_set = _check_group(group, "reduce")
        name = _op_name(reduce_op)
        mean = name in _MEAN_NAMES
        if not mean and name not in _REDUCE_OPS:
            raise ValueError("reduce(reduce_op=%r): strategy='kolo' reduces with 'mean', "
                             "'sum', 'max', 'min' or 'product'" % (reduce_op,))
        floating = torch.is_floating_point(tensor)
        op = kt.Average if mean and floating else _REDUCE_OPS.get(name, kt.Sum)
        with torch.no_grad():
            target = tensor if tensor.is_contiguous() else tensor.contiguous()
            kt.allreduce_(target, op=op, process_set=process_set)
            if mean and not floating:
                target.copy_(target / process_set.size())
            if target is not tensor:
                tensor.copy_(target)
        return tensor

    def all_gather(self, tensor, group=None, sync_grads=False):
        """Every rank's ``tensor`` stacked: shape (world size, *tensor.shape), as Lightning's
        DDP (Horovod's strategy concatenated along dimension 0 instead). The shapes must be
        equal on every rank. ``sync_grads=True``: differentiable, with DDP's gradient."""
        process_set = _check_group(group, "all_gather")
        if sync_grads:
            return _AllGatherSumGrad.apply(tensor, process_set)
        with torch.no_grad():
            return kt.allgather(tensor.detach().unsqueeze(0).contiguous(),
                                process_set=process_set)

    def broadcast(self, obj, src=0):
        """Rank ``src``'s object (anything picklable) on every rank."""
        if kt.size() == 1:
            return obj
        is_src = kt.rank() == src
        if is_src:
            payload = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8)
            size = torch.tensor([payload.numel()], dtype=torch.int64)
        else:
            size = torch.zeros(1, dtype=torch.int64)
        kt.broadcast_(size, src)
        if not is_src:
            payload = torch.empty(int(size.item()), dtype=torch.uint8)
        kt.broadcast_(payload, src)
        return obj if is_src else pickle.loads(payload.numpy().tobytes())

    def barrier(self, *args, **kwargs):
        kt.barrier()

    # --- the end --------------------------------------------------------------------------

    def on_exception(self, exception):
        self._failed = True  # the other ranks may never reach teardown's barrier
        super().on_exception(exception)

    def teardown(self):
        if self._skip_synchronize is not None:
            self._skip_synchronize.close()
            self._skip_synchronize = None
        # The wrapped optimizers' hooks stay on the parameters: make them inert, so that a
        # later fit of the same model (with new optimizers) is not reduced twice.
        for opt in self._distributed:
            opt.set_backward_passes_per_step(_NEVER)
        self._distributed = []
        if not self._failed and kt.size() > 1:
            kt.barrier()  # every rank has finished before fit() returns
        super().teardown()

    @classmethod
    def register_strategies(cls, strategy_registry):
        strategy_registry.register(
            cls.strategy_name, cls, override=True,
            description="data-parallel training on kolo's collectives (kolorun starts the "
                        "processes)")

    def _misconfiguration(self, message):
        return self._misconfiguration_class(message)


def declare(package, cluster_environment, parallel_strategy, strategy_registry,
            misconfiguration):
    """``KoloEnvironment`` and ``KoloStrategy`` over one Lightning package's base classes
    (lightning.pytorch's or pytorch_lightning's), with ``strategy="kolo"`` registered in
    its registry; ``package`` is kolo's module that exports them."""
    environment = type("KoloEnvironment", (EnvironmentMixin, cluster_environment), {
        "__module__": package, "__doc__": "Ranks and world size as kolorun started them."})
    strategy = type("KoloStrategy", (StrategyMixin, parallel_strategy), {
        "__module__": package, "__doc__": StrategyMixin.__doc__,
        "_environment_class": environment, "_misconfiguration_class": misconfiguration})
    strategy.register_strategies(strategy_registry)
    return environment, strategy
