"""Horovod's metric averaging, for every binding's training-loop callbacks: the numbers of
a loop's logs (a dict of metric name to value) averaged over the ranks, as NumPy arrays
through ``kolo.common.host.COLLECTIVES``, whatever framework computed them."""
import numpy as np

from kolo.common.host import COLLECTIVES
from kolo.common.ops import Average


def _is_numeric(value):
    """Whether a log entry is a number or an array of numbers (Horovod averages every entry;
    one that is not numeric, which Horovod's callback fails on, is left alone)."""
    try:
        return np.asarray(value).dtype.kind in "biuf"
    except (TypeError, ValueError):
        return False


def average_metrics_in_place(logs, name):
    """Replaces each numeric entry of ``logs`` by its average over the ranks, as Horovod's
    MetricAverageCallback: scalars (as floats) and arrays (per-class metrics) alike, in one
    grouped allreduce named ``name`` in float64, by sorted metric name."""
    names = sorted(k for k, v in (logs or {}).items() if _is_numeric(v))
    if not names:
        return
    values = [np.array(logs[k], np.float64) for k in names]
    COLLECTIVES.now(COLLECTIVES.start_grouped_allreduce(values, name=name, op=Average,
                                                        in_place=True, caller_waits=True))
    for k, v in zip(names, values):
        logs[k] = float(v) if v.ndim == 0 else v
