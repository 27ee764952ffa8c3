"""Reduce operations and Horovod's rules for them in every binding: the deprecated
``average=`` argument, ``gradient_predivide_factor`` as scale factors, reducescatter's ops,
Adasum's refusals.

The codes are Horovod's (``Average`` 0, ``Sum`` 1, ``Adasum`` 2, ``Min`` 3, ``Max`` 4,
``Product`` 5) and the core's, the same in every binding: ``op=<int>`` means Horovod's op."""
import warnings

from kolo.common import engine as _engine
from kolo.common.engine import REDUCE_OPS, KoloInternalError

Average, Sum, Adasum, Min, Max, Product = (
    REDUCE_OPS[n] for n in ("average", "sum", "adasum", "min", "max", "product"))
OPS = (Average, Sum, Adasum, Min, Max, Product)


def check_op(op, binding):
    """``op`` itself; ValueError for anything unknown (``binding``, e.g. "kolo.torch", names
    where the ops live)."""
    if op not in OPS:
        raise ValueError("op must be one of %s.Average, Sum, Adasum, Min, Max, Product (or "
                         "their codes 0 to 5)" % binding)
    return op


def reduce_op(op, average, binding):
    """Horovod's handle_average_backwards_compatibility, then check_op; None is Average."""
    if average is None and op in OPS:  # every collective's submit path: one test
        return op
    if average is not None:
        if op is not None:
            raise ValueError("The op parameter supersedes average. Please provide only one "
                             "of them.")
        warnings.warn("Parameter `average` has been replaced with `op` and will be removed "
                      "in v1.0", DeprecationWarning)
        return Average if average else Sum
    return Average if op is None else check_op(op, binding)


def predivided(op, gradient_predivide_factor):
    """Horovod's ``gradient_predivide_factor`` f as ``(prescale, postscale)``: the average
    split around the sum, 1/f before it and f after it (the average's 1/size on top);
    ``(1.0, 1.0)`` when f is 1. ValueError for another f with an op other than Average."""
    factor = float(gradient_predivide_factor)
    if factor == 1.0:
        return 1.0, 1.0
    if op != Average:
        raise ValueError("gradient_predivide_factor not supported with op != Average")
    return 1.0 / factor, factor


def check_adasum(set_id):
    """Horovod's refusals of Adasum on host tensors, in its words (NotImplementedError), for
    a binding that must raise them before the core sees the collective (while a graph is
    traced); the core refuses the same everywhere else."""
    if set_id != 0:
        raise NotImplementedError("Adasum does not support non-global process sets yet.")
    n = _engine.size()
    if n & (n - 1):
        raise NotImplementedError("Running Adasum with non-power of 2 ranks is not supported "
                                  "yet.")


class ReducescatterOpError(KoloInternalError, ValueError):
    """An op reducescatter does not run. Horovod raises HorovodInternalError (a RuntimeError)
    for it; kolo's is that class and a ValueError too."""


def reducescatter_op(op, binding):
    """``op`` for reducescatter (None is Average): Average and Sum only."""
    op = Average if op is None else op
    if op not in (Average, Sum):
        raise ReducescatterOpError(
            "Reducescatter currently only supports AVERAGE and SUM: use %s.Average or "
            "%s.Sum%s" % (binding, binding, " (Adasum reduces with allreduce only)"
                          if op == Adasum else ""))
    return op


def groups_setting(num_groups, groups):
    """``groups`` of a DistributedOptimizer or tape given Horovod's deprecated
    ``num_groups``: it warns, and stands for ``groups`` only where ``groups`` is not given
    (Horovod's rule in every binding)."""
    if num_groups:
        warnings.warn("Parameter `num_groups` has been replaced by `groups` and will be "
                      "removed in v0.23.0.", DeprecationWarning)
        if groups is None:
            return num_groups
    return groups


def split_list(items, n):
    """``items`` in ``n`` contiguous chunks of near-equal length, the first ``len(items) %
    n`` one longer (Horovod's split_list: its ``groups=n``)."""
    d, r = divmod(len(items), n)
    return [items[i * d + min(i, r):(i + 1) * d + min(i + 1, r)] for i in range(n)]
