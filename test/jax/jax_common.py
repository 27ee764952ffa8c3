"""What the kolo.jax tests share: the ranks, the dtypes, deterministic values every rank can
compute for every rank (test/common/rank_values.py's, as JAX arrays), the upstream
gradients of the gradient tests, and a small model with its single-process reference.
"""
import numpy as np
import jax
import jax.numpy as jnp

import kolo.jax as kj
from kolo._core import KoloInternalError  # noqa: F401  (kolo's HorovodInternalError)
from rank_values import base, reducescatter_rows, values  # noqa: F401  (test/common)

kj.init()
R, N = kj.rank(), kj.size()

NUMERIC = [jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64, jnp.int8, jnp.int16,
           jnp.int32, jnp.int64, jnp.uint8, jnp.uint16]
FLOATS = [jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64]
WITH_BOOL = NUMERIC + [jnp.bool_]  # allgather, broadcast, alltoall
F64 = jnp.float64
val = values(N)  # val(r, shape, kind="plain"): rank r's input, a NumPy int64 array


def ids(dtypes):
    return [jnp.dtype(d).name for d in dtypes]


def const(a, dtype):
    """A jax array of dtype holding a (bool: the odd elements are True)."""
    a = np.asarray(a)
    if jnp.dtype(dtype) == jnp.bool_:
        return jnp.asarray(a % 2 == 1)
    return jnp.asarray(a.astype(np.float64)).astype(dtype)


def as_np(x):
    """The array's values as float64 (bool stays bool), for exact comparison."""
    a = np.asarray(x)
    if a.dtype == np.bool_:
        return a
    return a.astype(np.float64)


def expect(a, dtype):
    """What const(a, dtype) holds, as as_np() shows it."""
    return as_np(const(a, dtype))


def assert_equal(got, want):
    got_np = as_np(got)
    want_np = np.asarray(want)
    assert got_np.shape == want_np.shape, (got_np.shape, want_np.shape)
    if got_np.dtype == bool or want_np.dtype == bool:
        assert np.array_equal(got_np, want_np), (got_np, want_np)
    else:
        assert np.array_equal(got_np, want_np.astype(np.float64)), (got_np, want_np)


def assert_array(x, dtype, shape):
    assert isinstance(x, jax.Array), type(x)
    assert x.dtype == jnp.dtype(dtype), (x.dtype, dtype)
    assert x.shape == tuple(shape), (x.shape, shape)


def up(r, shape, i=0):
    """The upstream gradient (cotangent) rank r feeds into output i (float64)."""
    return jnp.asarray((base(shape) % 5 + 1).astype(np.float64) * (r + 1) + i)


def mean_up(ranks, shape, i=0):
    return sum(up(k, shape, i) for k in ranks) / len(ranks)


def leaf(*shape, scale=1.0):
    rng = np.random.default_rng(17 + R)
    return jnp.asarray(rng.random(shape) * scale, dtype=F64)


def close(a, b, rtol=1e-12, atol=1e-12):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return a.shape == b.shape and np.allclose(a, b, rtol=rtol, atol=atol)


def in_step():
    """The ranks are still in step: one more collective gives the right answer."""
    assert_equal(kj.allreduce(jnp.ones(2), op=kj.Sum, name=None), [float(N)] * 2)


# --- a small model, its data, and the single-process reference --------------------------

STEPS, BATCH = 3, 12  # BATCH: the global batch, divisible by 2 and 3 (and 4)
LR = 0.1
# N ranks with BATCH/N samples each must match one process with BATCH samples to these
# tolerances (the sums over the batch are taken in another order): float32 and float64.
TOL = {jnp.float32: dict(rtol=1e-5, atol=1e-6), jnp.float64: dict(rtol=1e-12, atol=1e-12)}


def initial_params(dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)
    return {"hidden": {"w": jnp.asarray(rng.normal(size=(3, 4)) * 0.5, dtype),
                       "b": jnp.asarray(rng.normal(size=(4,)) * 0.1, dtype)},
            "out": [jnp.asarray(rng.normal(size=(4, 1)) * 0.5, dtype),
                    jnp.asarray(rng.normal(size=(1,)) * 0.1, dtype)]}


def predict(params, x):
    h = jnp.tanh(x @ params["hidden"]["w"] + params["hidden"]["b"])
    w, b = params["out"]
    return h @ w + b


def mse(params, x, y):
    return jnp.mean(jnp.square(predict(params, x) - y))


def global_data(steps=STEPS, batch=BATCH, seed=123, dtype=np.float32):
    """The whole data set, the same on every rank: steps global batches of batch rows."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(steps * batch, 3))
    y = x @ np.array([[1.0], [-2.0], [0.5]]) + 0.3 + 0.1 * rng.normal(size=(steps * batch, 1))
    return x.astype(dtype), y.astype(dtype)


def local_batch(x, s, batch=BATCH, r=None, n=None):
    """Rank r's share (batch // n rows) of global batch s."""
    r = R if r is None else r
    n = N if n is None else n
    b = batch // n
    return x[s * batch + r * b: s * batch + (r + 1) * b]


def global_batch(x, s, batch=BATCH):
    return x[s * batch:(s + 1) * batch]


def reference_train(params, tx, x, y, steps=STEPS, batch=BATCH):
    """One process, plain optax, the whole batch per step: what the ranks must match."""
    state = tx.init(params)
    for s in range(steps):
        grads = jax.grad(mse)(params, global_batch(x, s, batch), global_batch(y, s, batch))
        updates, state = tx.update(grads, state, params)
        params = jax.tree.map(lambda p, u: p + u, params, updates)
    return params


def assert_trees_close(got, want, rtol, atol):
    assert jax.tree.structure(got) == jax.tree.structure(want)
    for (path, g), w in zip(jax.tree_util.tree_flatten_with_path(got)[0],
                            jax.tree.leaves(want)):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        assert g.shape == w.shape, (jax.tree_util.keystr(path), g.shape, w.shape)
        assert np.allclose(g, w, rtol=rtol, atol=atol), (jax.tree_util.keystr(path), g, w)


def assert_same_on_every_rank(tree):
    every = kj.allgather_object(jax.tree.map(np.asarray, tree))
    for other in every:
        assert_trees_close(other, every[0], rtol=0, atol=0)
