"""Reduce operations (the core's codes, the same in every binding) and Horovod's
handling of the deprecated ``average=`` argument."""
import warnings

from kolo.common.collectives import REDUCE_OPS, KoloInternalError

Average, Sum, Min, Max, Product = (REDUCE_OPS[n]
                                   for n in ("average", "sum", "min", "max", "product"))
Adasum = max(REDUCE_OPS.values()) + 1  # a name kolo knows but does not run
OPS = (Average, Sum, Min, Max, Product)
ADASUM = "Adasum is not supported by kolo; use op=hvd.Average (the default) or op=hvd.Sum"


def check_op(op, binding):
    """``op`` itself; NotImplementedError for Adasum, ValueError for anything unknown
    (``binding``, e.g. "kolo.torch", names where the ops live)."""
    if op == Adasum:
        raise NotImplementedError(ADASUM)
    if op not in OPS:
        raise ValueError("op must be one of %s.Average, Sum, Min, Max, Product" % binding)
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


class ReducescatterOpError(KoloInternalError, ValueError):
    """An op reducescatter does not run. Horovod raises HorovodInternalError (a RuntimeError)
    for it; kolo's is that class and a ValueError too."""


def reducescatter_op(op, binding):
    """``op`` for reducescatter (None is Average): Average and Sum only."""
    op = Average if op is None else op
    if op not in (Average, Sum):
        raise ReducescatterOpError(
            "Reducescatter currently only supports AVERAGE and SUM: use %s.Average or "
            "%s.Sum%s" % (binding, binding, " (Adasum is not supported by kolo)"
                          if op == Adasum else ""))
    return op
