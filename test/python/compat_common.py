"""What test_horovod_compat*.py share: the ranks, the process set SUB, and the upstream
gradients every rank can compute for every rank."""
import os
import sys

import torch

import kolo.torch as hvd

# test/common: the helpers that several test folders share.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common"))
from rank_values import reducescatter_rows  # noqa: E402,F401

hvd.init()
R, N = hvd.rank(), hvd.size()
SUB = [0, 1] if N > 2 else [1]
F64 = torch.float64


def up(r, shape, i=0):
    """The upstream gradient rank r feeds into output i (deterministic, so every rank can
    compute every rank's)."""
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=F64).reshape(shape) % 5 + 1) * (r + 1) + i


def mean_up(ranks, shape, i=0):
    return sum(up(k, shape, i) for k in ranks) / len(ranks)


def grads(outputs, inputs):
    """d/d inputs of sum_i (output_i * up(R, output_i.shape, i))."""
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    loss = sum((o * up(R, o.shape, i)).sum() for i, o in enumerate(outputs))
    return torch.autograd.grad(loss, inputs)


def leaf(*shape, scale=1.0):
    g = torch.Generator().manual_seed(17 + R)
    return (torch.rand(*shape, generator=g, dtype=F64) * scale).requires_grad_()
