"""Gradients of kolo.tensorflow's collectives under tf.GradientTape, by Horovod's registered
gradients (horovod/tensorflow/mpi_ops.py, 0.28):

- allreduce / grouped_allreduce: the same allreduce (op, prescale, postscale) of the grads;
- allgather / grouped_allgather: Average-allreduce of the grad, then this rank's rows;
- broadcast: Average-allreduce of the grad on the root, zeros on the other ranks;
- alltoall: the reverse alltoall (the received splits as splits);
- reducescatter / grouped_reducescatter: allgather of the grad, times the set size for Sum.

Every rank feeds its own upstream gradient up(R, ...) (tf_common), so each rank can compute
every rank's and thus the expected gradient. DistributedGradientTape and IndexedSlices
gradients are in test_tf_training.py.
"""
import numpy as np
import pytest
import tensorflow as tf

import kolo.tensorflow as hvd

from tf_common import F64, N, R, grads_of, leaf, mean_up, reducescatter_rows, up


def close(a, b):
    return np.allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op,pre,post", [("Average", 1.0, 1.0), ("Average", 0.5, 4.0),
                                         ("Sum", 2.0, 0.25), ("Max", 1.0, 1.0),
                                         ("Min", 1.0, 1.0)])
def test_allreduce_gradient_is_the_same_allreduce(op, pre, post):
    x = leaf(3, 2)
    (g,) = grads_of(lambda: hvd.allreduce(x, op=getattr(hvd, op), prescale_factor=pre,
                                          postscale_factor=post), [x])
    every = np.stack([up(k, (3, 2)).numpy() for k in range(N)])
    want = {"Average": every.mean(0), "Sum": every.sum(0), "Max": every.max(0),
            "Min": every.min(0)}[op] * pre * post
    assert g.dtype == F64 and close(g, want)


def test_grouped_allreduce_gradient():
    a, b = leaf(3), leaf(2, 2)
    ga, gb = grads_of(lambda: hvd.grouped_allreduce([a, b], op=hvd.Sum), [a, b])
    assert close(ga, sum(up(k, (3,), 0) for k in range(N)))
    assert close(gb, sum(up(k, (2, 2), 1) for k in range(N)))
    ga, gb = grads_of(lambda: hvd.grouped_allreduce([a, b]), [a, b])  # Average
    assert close(ga, mean_up(range(N), (3,), 0))
    assert close(gb, mean_up(range(N), (2, 2), 1))


def _rows(full, dims, r):
    start = sum(dims[:r])
    return np.asarray(full)[start:start + dims[r]]


def test_allgather_gradient_is_the_average_then_this_ranks_rows():
    x = leaf(R + 1, 2)
    dims = [r + 1 for r in range(N)]
    (g,) = grads_of(lambda: hvd.allgather(x), [x])
    assert close(g, _rows(mean_up(range(N), (sum(dims), 2)), dims, R))


def test_grouped_allgather_gradient():
    a, b = leaf(R + 1, 2), leaf(2, 3)
    ga, gb = grads_of(lambda: hvd.grouped_allgather([a, b]), [a, b])
    dims_a = [r + 1 for r in range(N)]
    assert close(ga, _rows(mean_up(range(N), (sum(dims_a), 2), 0), dims_a, R))
    assert close(gb, _rows(mean_up(range(N), (2 * N, 3), 1), [2] * N, R))


@pytest.mark.parametrize("root", [0, "last"])
def test_broadcast_gradient_is_the_average_on_the_root_and_zero_elsewhere(root):
    root = N - 1 if root == "last" else root
    x = leaf(4)
    (g,) = grads_of(lambda: hvd.broadcast(x, root), [x])
    want = mean_up(range(N), (4,)) if R == root else np.zeros(4)
    assert close(g, want)


@pytest.mark.parametrize("with_splits", [True, False])
def test_alltoall_gradient_is_the_reverse_alltoall(with_splits):
    def splits_of(r):
        return [(r + j) % 2 + 1 for j in range(N)] if with_splits else [1] * N

    x = leaf(sum(splits_of(R)), 2)

    def fn():
        if with_splits:
            return hvd.alltoall(x, splits_of(R))[0]
        return hvd.alltoall(x)

    (g,) = grads_of(fn, [x])
    want = []
    for j in range(N):  # the rows this rank sent to rank j get rank j's upstream gradient
        rows_j = sum(splits_of(s)[j] for s in range(N))
        offset = sum(splits_of(s)[j] for s in range(R))
        want.append(up(j, (rows_j, 2)).numpy()[offset:offset + splits_of(R)[j]])
    assert close(g, np.concatenate(want))


@pytest.mark.parametrize("op,pre,post", [("Average", 1.0, 1.0), ("Sum", 1.0, 1.0),
                                         ("Sum", 2.0, 0.5)])
def test_reducescatter_gradient_is_the_allgather_scaled_as_horovod(op, pre, post):
    rows = 2 * N + 1
    x = leaf(rows, 2)
    (g,) = grads_of(lambda: hvd.reducescatter(x, op=getattr(hvd, op), prescale_factor=pre,
                                              postscale_factor=post), [x])
    factor = (N if op == "Sum" else 1) * pre * post  # Horovod: no 1/size for Average
    want = np.concatenate([up(k, (reducescatter_rows(rows, k, N), 2)).numpy()
                           for k in range(N)]) * factor
    assert close(g, want)


def test_grouped_reducescatter_gradient():
    a, b = leaf(N, 2), leaf(N + 1)
    ga, gb = grads_of(lambda: hvd.grouped_reducescatter([a, b], op=hvd.Sum), [a, b])
    assert close(ga, np.concatenate([up(k, (1, 2), 0).numpy() for k in range(N)]) * N)
    assert close(gb, np.concatenate([up(k, (reducescatter_rows(N + 1, k, N),), 1).numpy()
                                     for k in range(N)]) * N)


def test_gradients_chain_through_two_collectives():
    x = leaf(2)
    # d/dx of <broadcast(allreduce_sum(x), 0), up_R>: allreduce-average of up on rank 0
    # (zeros elsewhere), then the Sum allreduce of that: the average, on every rank.
    (g,) = grads_of(lambda: hvd.broadcast(hvd.allreduce(x, op=hvd.Sum), 0), [x])
    assert close(g, mean_up(range(N), (2,)))


def test_gradient_of_a_float32_collective_is_float32():
    x = tf.Variable(tf.ones((2,), tf.float32) * (R + 1))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(hvd.allgather(x) * 2.0)
    g = tape.gradient(loss, x)
    assert g.dtype == tf.float32 and np.allclose(g.numpy(), [2.0, 2.0])
