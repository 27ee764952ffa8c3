"""kolo.jax's Adasum against the NumPy float64 reference of the whole algorithm
(test/common/adasum_reference.py): allreduce of a pytree eagerly and inside jax.jit (one
fused group: each leaf its own coefficients), its gradient, and DistributedOptimizer(op=
Adasum) reducing the gradients with it; at np=3 Horovod's refusal on every rank."""
import re

import numpy as np
import pytest
import jax
import jax.numpy as jnp
import optax

import kolo.jax as kj
from adasum_reference import adasum as reference, check, inputs as rank_inputs  # test/common

from jax_common import N, R

POWER_OF_TWO = N & (N - 1) == 0
NOT_POWER_OF_TWO = re.escape("Running Adasum with non-power of 2 ranks is not supported yet.")
DTYPES = [np.float16, np.float32, np.float64]


def every_rank(seed, sizes, dtype):
    return rank_inputs(seed, sizes, dtype, N)


def expect(every, outputs, dtype):
    check(every, outputs, dtype, rank=R)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: d.__name__)
def test_allreduce_of_a_tree_eagerly_and_in_jit_matches_the_reference(dtype):
    inputs = every_rank(1, [1, 2 * N + 1, 100], dtype)
    tree = {"a": jnp.asarray(inputs[R][0]), "b": [jnp.asarray(inputs[R][1]),
                                                  jnp.asarray(inputs[R][2])]}
    if not POWER_OF_TWO:
        with pytest.raises(NotImplementedError, match=NOT_POWER_OF_TWO):
            kj.allreduce(tree, op=kj.Adasum)
        with pytest.raises(NotImplementedError, match=NOT_POWER_OF_TWO):
            jax.jit(lambda t: kj.allreduce(t, op=kj.Adasum))(tree)  # when traced
        return
    for out in (kj.allreduce(tree, op=kj.Adasum),
                jax.jit(lambda t: kj.allreduce(t, op=kj.Adasum))(tree)):
        expect(inputs, [out["a"], out["b"][0], out["b"][1]], dtype)


def test_the_gradient_is_the_adasum_of_the_cotangents():
    if not POWER_OF_TWO:
        return
    inputs, ups = every_rank(2, [6], np.float64), every_rank(3, [6], np.float64)
    up = jnp.asarray(ups[R][0])
    grad = jax.grad(lambda x: jnp.sum(kj.allreduce(x, op=kj.Adasum) * up))(
        jnp.asarray(inputs[R][0]))
    expect(ups, [grad], np.float64)


def test_distributed_optimizer_reduces_the_gradients_with_adasum():
    grads = every_rank(4, [3, 2], np.float64)
    tree = {"w": jnp.asarray(grads[R][0]), "b": jnp.asarray(grads[R][1])}
    tx = kj.DistributedOptimizer(optax.sgd(1.0), op=kj.Adasum)
    params = {"w": jnp.zeros(3, jnp.float64), "b": jnp.zeros(2, jnp.float64)}
    state = tx.init(params)
    if not POWER_OF_TWO:
        with pytest.raises(NotImplementedError, match=NOT_POWER_OF_TWO):
            tx.update(tree, state, params)
        return
    updates, _ = jax.jit(tx.update)(tree, state, params)
    # sgd(1.0): the update is minus the reduced gradient (leaves in key order: b, w).
    want = reference([[ranks[1], ranks[0]] for ranks in grads])
    assert np.allclose(-np.asarray(updates["b"]), want[0], rtol=1e-12, atol=1e-12)
    assert np.allclose(-np.asarray(updates["w"]), want[1], rtol=1e-12, atol=1e-12)
