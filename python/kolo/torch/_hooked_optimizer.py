"""What both DistributedOptimizers (kolo.torch.optimizer's and Horovod's Adasum one,
kolo.torch._adasum_optimizer's) do alike: the class that wraps the user's optimizer, the
names of its parameters (checked as Horovod checks ``named_parameters``), a hook on each
parameter's gradient accumulator that counts ``backward_passes_per_step``, and Horovod's
refusal of zero_grad() while reductions are pending."""
import torch

_TOO_MANY_PASSES = ("Gradients were computed more than backward_passes_per_step times before "
                    "call to step(). Increase backward_passes_per_step to accumulate gradients "
                    "locally.")


def wrap(wrapper, optimizer, *args):
    """A ``wrapper`` (a HookedOptimizer subclass) of ``optimizer``'s param groups, of a class
    made of ``optimizer``'s class and the methods of HookedOptimizer and ``wrapper``, as
    Horovod makes it (``args``: the rest of ``wrapper``'s parameters)."""
    methods = dict(HookedOptimizer.__dict__, **wrapper.__dict__)
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,), methods)
    # The methods reach the user's optimizer class through super(cls): not through
    # self.__class__, which is a subclass when something subclasses the wrapped optimizer
    # (Lightning's LightningOptimizer does), and would call these methods again forever.
    cls._kolo_wrapper = cls
    return cls(optimizer.param_groups, *args)


class HookedOptimizer(torch.optim.Optimizer):
    """The methods both DistributedOptimizers have (made by :func:`wrap`, whose class does
    not derive from this one: a subclass's ``__init__`` calls this one by name)."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step):
        super(self._kolo_wrapper, self).__init__(params)
        self._compression = compression
        self._parameter_names = named(self.param_groups, named_parameters)
        self.backward_passes_per_step = backward_passes_per_step
        self._allreduce_delay = {p: backward_passes_per_step for p in self._parameter_names}
        # parameter (or tuple of a group's parameters) -> (handle or None, context)
        self._handles = {}
        self._grad_accs = []

    def _hook(self, p, on_pass):
        """Calls ``on_pass(p, ready)`` on every gradient that backward accumulates into
        ``p``, ``ready`` at its ``backward_passes_per_step``-th of the step (one more
        raises)."""
        def hook(*ignore):
            if self._allreduce_delay[p] <= 0:
                raise AssertionError(_TOO_MANY_PASSES)
            self._allreduce_delay[p] -= 1
            on_pass(p, self._allreduce_delay[p] == 0)
        grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
        grad_acc.register_hook(hook)
        self._grad_accs.append(grad_acc)  # keeps the hook alive

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._allreduce_delay:
            self._allreduce_delay[p] = passes

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but "
                                 "before optimizer.step() or optimizer.synchronize(). This is "
                                 "prohibited as it can cause a race condition.")
        return super(self._kolo_wrapper, self).zero_grad(*args, **kwargs)


def named(param_groups, named_parameters):
    """{parameter: name}, checked as Horovod checks it."""
    if named_parameters is None:
        return {p: "allreduce.noname.%d.%d" % (i, j)
                for i, group in enumerate(param_groups) for j, p in enumerate(group["params"])}
    if callable(named_parameters) and not hasattr(named_parameters, "__iter__"):
        raise TypeError("named_parameters must be a sequence of (name, parameter) tuples such "
                        "as model.named_parameters(); got the method itself: call it")
    pairs = list(named_parameters)
    if any(not isinstance(p, tuple) for p in pairs):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), "
                         "usually produced by model.named_parameters().")
    names, duplicates = set(), set()
    for n, _ in pairs:
        (duplicates if n in names else names).add(n)
    if duplicates:
        raise ValueError("Parameter names in named_parameters must be unique. Found "
                         "duplicates: %s" % ", ".join(sorted(duplicates)))
    by_param = {p: n for n, p in pairs}
    unnamed = [id(p) for g in param_groups for p in g["params"] if p not in by_param]
    if unnamed:
        raise ValueError("named_parameters was specified, but one or more model parameters "
                         "were not named (pass model.named_parameters() of the model whose "
                         "parameters the optimizer has). Python object ids: %s"
                         % ", ".join(str(i) for i in unnamed))
    return by_param
