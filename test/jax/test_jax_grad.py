"""Gradients of kolo.jax's collectives under jax.grad (jax.custom_vjp), eagerly and inside
jax.jit, by Horovod's rules (horovod/tensorflow/mpi_ops.py, 0.28):

- allreduce: the same allreduce (op, prescale, postscale) of the cotangent;
- allgather: Average-allreduce of the cotangent, then this rank's rows;
- broadcast: Average-allreduce of the cotangent on the root, zeros on the other ranks;
- reducescatter: allgather of the cotangent, times the set size for Sum (and the scales).

Every rank feeds its own cotangent up(R, ...) (jax_common) through the loss
sum(out * up(R, out.shape)), so each rank can compute every rank's and thus the expected
gradient. Values are float64: tolerance 1e-12.
"""
import numpy as np
import pytest
import jax
import jax.numpy as jnp

import kolo.jax as kj

from jax_common import F64, N, R, close, leaf, mean_up, reducescatter_rows, up

JIT = [False, True]
JIT_IDS = ["eager", "jit"]


def grad_of(fn, x, jit):
    """d/dx of sum_i <fn(x)_i, up(R, shape_i, i)> over the leaves of fn(x)."""
    def loss(x):
        outs = jax.tree.leaves(fn(x))
        return sum(jnp.sum(o * up(R, o.shape, i)) for i, o in enumerate(outs))
    g = jax.grad(loss)
    return (jax.jit(g) if jit else g)(x)


@pytest.mark.parametrize("jit", JIT, ids=JIT_IDS)
@pytest.mark.parametrize("op,pre,post", [("Average", 1.0, 1.0), ("Average", 0.5, 4.0),
                                         ("Sum", 1.0, 1.0), ("Sum", 2.0, 0.25),
                                         ("Max", 1.0, 1.0), ("Min", 1.0, 1.0)])
def test_allreduce_gradient_is_the_same_allreduce(op, pre, post, jit):
    x = leaf(3, 2)
    g = grad_of(lambda x: kj.allreduce(x, op=getattr(kj, op), prescale_factor=pre,
                                       postscale_factor=post), x, jit)
    every = np.stack([np.asarray(up(k, (3, 2))) for k in range(N)])
    want = {"Average": every.mean(0), "Sum": every.sum(0), "Max": every.max(0),
            "Min": every.min(0)}[op] * pre * post
    assert g.dtype == F64 and close(g, want)


@pytest.mark.parametrize("jit", JIT, ids=JIT_IDS)
def test_allreduce_gradient_of_a_pytree(jit):
    tree = {"a": leaf(3), "b": [leaf(2, 2), None]}
    g = grad_of(lambda t: kj.allreduce(t, op=kj.Sum), tree, jit)
    assert jax.tree.structure(g) == jax.tree.structure(tree)
    assert g["b"][1] is None
    # leaves of the output in flatten order: a (index 0), b[0] (index 1)
    assert close(g["a"], sum(up(k, (3,), 0) for k in range(N)))
    assert close(g["b"][0], sum(up(k, (2, 2), 1) for k in range(N)))


def _rows(full, dims, r):
    start = sum(dims[:r])
    return np.asarray(full)[start:start + dims[r]]


def test_allgather_gradient_is_the_average_then_this_ranks_rows():
    x = leaf(R + 1, 2)
    dims = [r + 1 for r in range(N)]
    g = grad_of(kj.allgather, x, jit=False)
    assert g.shape == x.shape
    assert close(g, _rows(mean_up(range(N), (sum(dims), 2)), dims, R))


@pytest.mark.parametrize("jit", JIT, ids=JIT_IDS)
def test_allgather_gradient_equal_dims_and_stack(jit):
    x = leaf(2, 3)
    g = grad_of(kj.allgather, x, jit)
    assert close(g, np.asarray(mean_up(range(N), (2 * N, 3)))[2 * R:2 * R + 2])
    g = grad_of(lambda x: kj.allgather(x, stack=True), x, jit)
    assert close(g, np.asarray(mean_up(range(N), (N, 2, 3)))[R])


@pytest.mark.parametrize("jit", JIT, ids=JIT_IDS)
@pytest.mark.parametrize("root", ["first", "last"])
def test_broadcast_gradient_goes_to_the_root(root, jit):
    root_rank = 0 if root == "first" else N - 1
    x = leaf(2, 3)
    g = grad_of(lambda x: kj.broadcast(x, root_rank=root_rank), x, jit)
    want = mean_up(range(N), (2, 3)) if R == root_rank else np.zeros((2, 3))
    assert g.dtype == F64 and close(g, want)


@pytest.mark.parametrize("jit", JIT, ids=JIT_IDS)
def test_broadcast_parameters_style_tree_gradient(jit):
    tree = {"w": leaf(2), "b": (leaf(3), None)}
    g = grad_of(lambda t: kj.broadcast(t, root_rank=N - 1), tree, jit)
    assert jax.tree.structure(g) == jax.tree.structure(tree)
    on_root = R == N - 1
    assert close(g["b"][0], mean_up(range(N), (3,), 0) if on_root else np.zeros(3))
    assert close(g["w"], mean_up(range(N), (2,), 1) if on_root else np.zeros(2))


@pytest.mark.parametrize("jit", JIT, ids=JIT_IDS)
@pytest.mark.parametrize("op,pre,post", [("Average", 1.0, 1.0), ("Sum", 1.0, 1.0),
                                         ("Sum", 2.0, 0.25), ("Average", 0.5, 4.0)])
def test_reducescatter_gradient_is_the_allgather_scaled_as_horovod(op, pre, post, jit):
    rows = 2 * N + 1
    x = leaf(rows, 2)
    g = grad_of(lambda x: kj.reducescatter(x, op=getattr(kj, op), prescale_factor=pre,
                                           postscale_factor=post), x, jit)
    factor = (N if op == "Sum" else 1) * pre * post  # Horovod: no 1/size for Average
    want = np.concatenate([np.asarray(up(k, (reducescatter_rows(rows, k, N), 2)))
                           for k in range(N)]) * factor
    assert g.shape == x.shape and close(g, want)


@pytest.mark.parametrize("jit", JIT, ids=JIT_IDS)
def test_gradients_chain_through_two_collectives(jit):
    x = leaf(2)
    # d/dx of <broadcast(allreduce_sum(x), 0), up_R>: allreduce-average of up on rank 0
    # (zeros elsewhere), then the Sum allreduce of that: the average, on every rank.
    g = grad_of(lambda x: kj.broadcast(kj.allreduce(x, op=kj.Sum), root_rank=0), x, jit)
    assert close(g, mean_up(range(N), (2,)))


@pytest.mark.parametrize("jit", JIT, ids=JIT_IDS)
def test_gradient_through_computation_around_a_collective(jit):
    # loss_R = sum(up_R * tanh(allreduce_avg(x**2)))
    # d/dx_R = 2 x_R * average_k(up_k * (1 - tanh(m)**2)), m the average of x**2
    x = leaf(3)
    g = grad_of(lambda x: jnp.tanh(kj.allreduce(x * x)), x, jit)
    xs = [np.random.default_rng(17 + k).random(3) for k in range(N)]
    m = np.mean([v * v for v in xs], 0)
    want = 2 * np.asarray(x) * np.mean([np.asarray(up(k, (3,))) * (1 - np.tanh(m) ** 2)
                                        for k in range(N)], 0)
    assert close(g, want, rtol=1e-10, atol=1e-12)


def test_gradient_of_a_float32_collective_is_float32():
    x = jnp.ones((2,), jnp.float32) * (R + 1)
    g = jax.grad(lambda x: jnp.sum(kj.allreduce(x, op=kj.Sum) * 2.0))(x)
    assert g.dtype == jnp.float32
    assert np.array_equal(np.asarray(g), np.full(2, 2.0 * N, np.float32))


def test_value_and_grad_and_vjp():
    x = leaf(2)
    value, g = jax.value_and_grad(lambda x: jnp.sum(kj.allreduce(x, op=kj.Sum)))(x)
    xs = [np.random.default_rng(17 + k).random(2) for k in range(N)]
    assert close(value, np.sum(xs))
    assert close(g, np.full(2, float(N)))
    out, vjp = jax.vjp(lambda x: kj.allgather(x, stack=True), x)
    assert close(out, np.stack(xs))
    (ct,) = vjp(jnp.ones((N, 2)) * (R + 1))
    assert close(ct, np.full(2, np.mean(np.arange(1, N + 1))))


@pytest.mark.parametrize("jit", JIT, ids=JIT_IDS)
def test_reducescatter_gradient_even_rows(jit):
    # rows divisible by the set size: every rank gets as many rows (cf. the uneven case above)
    x = leaf(2 * N, 3)
    g = grad_of(lambda x: kj.reducescatter(x, op=kj.Sum), x, jit)
    want = np.concatenate([np.asarray(up(k, (2, 3))) for k in range(N)]) * N
    assert close(g, want)
