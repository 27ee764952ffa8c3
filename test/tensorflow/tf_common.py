"""What the kolo.tensorflow tests share: the ranks, the dtypes, deterministic values every
rank can compute for every rank (test/common/rank_values.py's, as TensorFlow tensors), and
the upstream gradients of the gradient tests.
"""
import numpy as np
import tensorflow as tf

import kolo.tensorflow as hvd
from kolo._core import KoloInternalError  # noqa: F401  (kolo's HorovodInternalError)
from rank_values import base, reducescatter_rows, values  # noqa: F401  (test/common)

hvd.init()
R, N = hvd.rank(), hvd.size()
# A process set with members and (at np=3) a rank outside it; at np=2, [0, 1] would be
# the global set, which Horovod refuses to register twice.
SUB = [0, 1] if N > 2 else [1]

NUMERIC = [tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64, tf.uint8,
           tf.int8]
FLOATS = [tf.float16, tf.bfloat16, tf.float32, tf.float64]
WITH_BOOL = NUMERIC + [tf.bool]  # allgather, broadcast, alltoall
F64 = tf.float64
val = values(N)  # val(r, shape, kind="plain"): rank r's input, a NumPy int64 array


def ids(dtypes):
    return [d.name for d in dtypes]


def const(a, dtype):
    if dtype == tf.bool:
        return tf.constant(np.asarray(a) % 2 == 1)
    return tf.cast(tf.constant(np.asarray(a, dtype=np.float64)), dtype)


def as_np(t, dtype=None):
    """The tensor's values as float64 (bool stays bool), for exact comparison."""
    t = tf.convert_to_tensor(t)
    if t.dtype == tf.bool:
        return t.numpy()
    return tf.cast(t, tf.float64).numpy()


def expect(a, dtype):
    """What const(a, dtype) holds, as as_np() shows it."""
    return as_np(const(a, dtype))


def assert_equal(got, want, dtype=None):
    got_np = as_np(got)
    want_np = np.asarray(want)
    assert got_np.shape == want_np.shape, (got_np.shape, want_np.shape)
    if got_np.dtype == bool or want_np.dtype == bool:
        assert np.array_equal(got_np, want_np)
    else:
        assert np.array_equal(got_np, want_np.astype(np.float64)), (got_np, want_np)


def up(r, shape, i=0):
    """The upstream gradient rank r feeds into output i (float64, deterministic)."""
    return tf.constant((base(shape) % 5 + 1).astype(np.float64) * (r + 1) + i)


def mean_up(ranks, shape, i=0):
    return sum(up(k, shape, i) for k in ranks) / len(ranks)


def leaf(*shape, scale=1.0):
    rng = np.random.default_rng(17 + R)
    return tf.Variable(rng.random(shape) * scale, dtype=F64)


def grads_of(fn, inputs):
    """d/d inputs of sum_i <fn(inputs)_i, up(R, shape_i, i)>."""
    with tf.GradientTape() as tape:
        outs = fn()
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        loss = tf.add_n([tf.reduce_sum(o * up(R, o.shape, i)) for i, o in enumerate(outs)])
    return tape.gradient(loss, inputs)


# --- a small model, its data, and the single-process reference --------------------------

STEPS, BATCH = 3, 12  # BATCH: the global batch, divisible by 2 and 3 (and 4)
LR = 0.1
# float32 training, a few steps: N ranks with BATCH/N samples each must match one process
# with BATCH samples to this tolerance (the sums are taken in another order).
RTOL, ATOL = 1e-5, 1e-6


def make_model():
    import keras
    return keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                             keras.layers.Dense(1)])


def initial_weights(seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.normal(size=(3, 4)) * 0.5).astype(np.float32),
            (rng.normal(size=(4,)) * 0.1).astype(np.float32),
            (rng.normal(size=(4, 1)) * 0.5).astype(np.float32),
            (rng.normal(size=(1,)) * 0.1).astype(np.float32)]


def global_data(steps=STEPS, batch=BATCH, seed=123):
    """The whole data set, the same on every rank: steps global batches of batch rows."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(steps * batch, 3)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5]], np.float32) + 0.3
         + 0.1 * rng.normal(size=(steps * batch, 1))).astype(np.float32)
    return x, y


def shard(x, batch=BATCH, r=None, n=None):
    """Rank r's part of every global batch, concatenated: local batch s is rank r's share
    of global batch s (batch // n rows each)."""
    r = R if r is None else r
    n = N if n is None else n
    b = batch // n
    steps = len(x) // batch
    rows = np.concatenate([np.arange(s * batch + r * b, s * batch + (r + 1) * b)
                           for s in range(steps)])
    return x[rows]


def mse(model, x, y):
    return tf.reduce_mean(tf.square(model(x, training=True) - y))


def make_embedding_model(vocab=8, dim=3):
    import keras
    return keras.Sequential([keras.Input((2,), dtype="int32"),
                             keras.layers.Embedding(vocab, dim), keras.layers.Flatten(),
                             keras.layers.Dense(1)])


def embedding_data(steps=STEPS, batch=BATCH, vocab=8, seed=321):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=(steps * batch, 2)).astype(np.int32)
    y = rng.normal(size=(steps * batch, 1)).astype(np.float32)
    return ids, y


def reference_train(weights, x, y, batch=BATCH, lr=LR, momentum=0.0, model_fn=make_model,
                    optimizer=None):
    """One process, plain Keras + TF, the whole batch per step: what the ranks must match."""
    import keras
    model = model_fn()
    model.set_weights(weights)
    opt = optimizer or keras.optimizers.SGD(learning_rate=lr, momentum=momentum)
    for s in range(len(x) // batch):
        xb, yb = x[s * batch:(s + 1) * batch], y[s * batch:(s + 1) * batch]
        with tf.GradientTape() as tape:
            loss = mse(model, xb, yb)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
    return model.get_weights()


def assert_weights_close(got, want, rtol=RTOL, atol=ATOL):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.allclose(np.asarray(g), np.asarray(w), rtol=rtol, atol=atol), (g, w)


def assert_same_on_every_rank(weights):
    every = hvd.allgather_object([np.asarray(w) for w in weights])
    for other in every:
        assert_weights_close(other, every[0], rtol=0, atol=1e-7)
