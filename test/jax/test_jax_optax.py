"""kolo.jax's Optax integration: N ranks with BATCH/N samples each, averaging gradients with
DistributedOptimizer (or distributed(), or allreduce_gradients in a custom loop) in a jitted
train step, end with the parameters of one process with BATCH samples and plain optax
(computed on every rank locally, jax_common.reference_train), and with the same parameters
on every rank.

Tolerances (jax_common.TOL): float32 rtol 1e-5 / atol 1e-6, float64 rtol 1e-12 / atol 1e-12
(the batch sums are taken in another order on N ranks than in one process).
"""
import numpy as np
import pytest
import jax
import jax.numpy as jnp
import optax

import kolo.jax as kj

from jax_common import (BATCH, LR, N, R, STEPS, TOL, assert_same_on_every_rank,
                        assert_trees_close, global_data, initial_params, local_batch, mse,
                        reference_train)

DTYPES = [jnp.float32, jnp.float64]
DIDS = ["float32", "float64"]


def optimizers():
    return {"sgd": lambda: optax.sgd(LR),
            "momentum": lambda: optax.sgd(LR, momentum=0.9),
            "adam": lambda: optax.adam(0.01)}


def distributed_train(params, tx, x, y, steps=STEPS):
    state = tx.init(params)

    @jax.jit
    def step(params, state, xb, yb):
        grads = jax.grad(mse)(params, xb, yb)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    for s in range(steps):
        params, state = step(params, state, local_batch(x, s), local_batch(y, s))
    return params


@pytest.mark.parametrize("dtype", DTYPES, ids=DIDS)
@pytest.mark.parametrize("opt", sorted(optimizers()))
def test_distributed_optimizer_matches_one_process(opt, dtype):
    x, y = global_data(dtype=np.dtype(jnp.dtype(dtype).name))
    params = initial_params(dtype)
    want = reference_train(params, optimizers()[opt](), x, y)
    got = distributed_train(params, kj.DistributedOptimizer(optimizers()[opt]()), x, y)
    assert_trees_close(got, want, **TOL[dtype])
    assert jax.tree.map(lambda p: p.dtype, got) == jax.tree.map(lambda p: p.dtype, params)
    assert_same_on_every_rank(got)


def test_distributed_is_the_same_wrapper():
    x, y = global_data()
    params = initial_params()
    want = reference_train(params, optax.sgd(LR), x, y)
    got = distributed_train(params, kj.distributed(optax.sgd(LR)), x, y)
    assert_trees_close(got, want, **TOL[jnp.float32])
    assert_same_on_every_rank(got)


def test_distributed_optimizer_is_a_gradient_transformation_usable_eagerly():
    tx = kj.DistributedOptimizer(optax.sgd(1.0))
    assert isinstance(tx, optax.GradientTransformation)
    params = {"w": jnp.zeros(2), "none": None}
    state = tx.init(params)
    grads = {"w": jnp.asarray([float(R), 2.0 * R]), "none": None}
    updates, state = tx.update(grads, state, params)  # eager, not jitted
    mean = np.mean(np.arange(N))
    assert np.allclose(np.asarray(updates["w"]), [-mean, -2 * mean])


def test_distributed_optimizer_with_sum():
    tx = kj.DistributedOptimizer(optax.sgd(1.0), op=kj.Sum)
    params = {"w": jnp.zeros(2)}
    state = tx.init(params)
    grads = {"w": jnp.asarray([float(R), 1.0])}
    updates, _ = jax.jit(tx.update)(grads, state, params)
    assert np.allclose(np.asarray(updates["w"]), [-N * (N - 1) / 2, -float(N)])


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_distributed_optimizer_with_compression(compression):
    # Small-integer gradients are exact in fp16 and bf16: the result equals no compression.
    tx = kj.DistributedOptimizer(optax.sgd(1.0), compression=getattr(kj.Compression,
                                                                     compression))
    params = {"w": jnp.zeros(3, jnp.float32)}
    grads = {"w": jnp.asarray([R * N, 1.0, 2.0 * N], jnp.float32)}
    updates, _ = jax.jit(tx.update)(grads, tx.init(params), params)
    assert updates["w"].dtype == jnp.float32
    assert np.array_equal(np.asarray(updates["w"]),
                          -np.array([N * (N - 1) / 2, 1.0, 2.0 * N], np.float32))


def test_allreduce_gradients_in_a_custom_loop():
    x, y = global_data(dtype=np.float64)
    params = initial_params(jnp.float64)
    tx = optax.sgd(LR, momentum=0.9)
    want = reference_train(params, optax.sgd(LR, momentum=0.9), x, y)
    state = tx.init(params)

    @jax.jit
    def grads_of(params, xb, yb):
        return kj.allreduce_gradients(jax.grad(mse)(params, xb, yb))

    for s in range(STEPS):
        grads = grads_of(params, local_batch(x, s), local_batch(y, s))
        if s == STEPS - 1:  # and once eagerly
            grads = kj.allreduce_gradients(jax.grad(mse)(params, local_batch(x, s),
                                                         local_batch(y, s)))
        updates, state = tx.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    assert_trees_close(params, want, **TOL[jnp.float64])
    assert_same_on_every_rank(params)


def test_allreduce_gradients_with_sum_keeps_structure():
    grads = {"a": [jnp.full((2,), R + 1.0), None], "b": (jnp.asarray(1.0),)}
    out = kj.allreduce_gradients(grads, op=kj.Sum)
    assert jax.tree.structure(out) == jax.tree.structure(grads)
    assert np.allclose(np.asarray(out["a"][0]), N * (N + 1) / 2)
    assert float(out["b"][0]) == N


def test_broadcast_parameters_then_train_from_different_inits():
    # Every rank starts from its own initialisation; after broadcast_parameters from rank 0
    # and training they hold the reference parameters of rank 0's initialisation.
    x, y = global_data(dtype=np.float64)
    mine = initial_params(jnp.float64, seed=R)
    params = kj.broadcast_parameters(mine, root_rank=0)
    want = reference_train(initial_params(jnp.float64, seed=0), optax.sgd(LR), x, y)
    got = distributed_train(params, kj.DistributedOptimizer(optax.sgd(LR)), x, y)
    assert_trees_close(got, want, **TOL[jnp.float64])
    assert_same_on_every_rank(got)


def test_backward_passes_per_step_2_matches_one_process():
    # kolo.jax: backward_passes_per_step=k is optax.MultiSteps around the distributed
    # optimizer: the mean of k calls' local gradients is averaged over the ranks and
    # applied on every k-th call; the other calls leave the parameters as they are. With
    # k micro-batches of BATCH/(k N) rows per rank, k calls make one step of one process
    # with BATCH rows.
    # optax.MultiSteps accumulates the gradients in float32 (even for float64 parameters),
    # so this is a float32 comparison.
    k = 2
    x, y = global_data(dtype=np.float32)
    params = initial_params(jnp.float32)
    want = reference_train(params, optax.sgd(LR, momentum=0.9), x, y)
    tx = kj.DistributedOptimizer(optax.sgd(LR, momentum=0.9), backward_passes_per_step=k)
    state = tx.init(params)

    @jax.jit
    def step(params, state, xb, yb):
        grads = jax.grad(mse)(params, xb, yb)
        updates, state = tx.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    micro = BATCH // (k * N)
    for s in range(STEPS):
        xs, ys = local_batch(x, s), local_batch(y, s)
        before = params
        for m in range(k):
            params, state = step(params, state, xs[m * micro:(m + 1) * micro],
                                 ys[m * micro:(m + 1) * micro])
            if m < k - 1:
                assert_trees_close(params, before, rtol=0, atol=0)
    assert_trees_close(params, want, **TOL[jnp.float32])
    assert_same_on_every_rank(params)
