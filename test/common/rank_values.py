"""Deterministic inputs that every rank can compute for every rank, shared by the framework
test folders (test/tensorflow, test/jax): each folder's conftest.py puts test/common on
sys.path, and its *_common.py turns these NumPy arrays into the framework's tensors.

Values are small integers so that sums, products and averages are exact in every dtype
(uint8/int8 and bfloat16 included at np=3), and every rank can compute the expected result
locally. Nothing here imports a framework.
"""
import numpy as np


def base(shape):
    """0, 1, 2, ... over the elements, reshaped."""
    n = int(np.prod(shape)) if shape else 1
    return np.arange(n, dtype=np.int64).reshape(shape)


def values(n):
    """val(r, shape, kind="plain") for a job of n ranks: rank r's input, a NumPy int64 array.

    plain:   (i % 3) + r + 1          in 1..n+3    (Sum <= 3*6 at np=3)
    avg:     (i % 3) + n * r          sum over ranks divisible by n: Average is exact
    minmax:  (i + 2 r) % 5            min/max differ per element and per rank
    prod:    (i + r) % 2 + 1          in {1, 2}: products <= 2**n
    """
    def val(r, shape, kind="plain"):
        b = base(shape)
        if kind == "plain":
            return b % 3 + r + 1
        if kind == "avg":
            return b % 3 + n * r
        if kind == "minmax":
            return (b + 2 * r) % 5
        if kind == "prod":
            return (b + r) % 2 + 1
        raise ValueError(kind)
    val.__doc__ = values.__doc__
    return val


def reducescatter_rows(rows, r, n):
    """Horovod splits dim 0 as evenly as possible, the first ranks taking one more."""
    return rows // n + (1 if r < rows % n else 0)
