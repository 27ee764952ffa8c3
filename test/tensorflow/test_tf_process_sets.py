"""Process sets with kolo.tensorflow (Horovod 0.28, horovod/common/process_sets.py): the set
SUB ([0, 1] at np >= 3, [1] at np=2) runs every collective among its members, gradients
reduce over the set, DistributedGradientTape and the Keras DistributedOptimizer average
over the set (and leave a non-member's gradients local, as Horovod's _allreduce_cond), and
the registry is kolo's one (kolo.common), shared with kolo.torch. A set that is not
registered (never added, removed, or given an id by hand) is a ValueError where the
collective is called: eagerly, and when a tf.function is traced or a TF1 graph built, not
only when it runs; a rank outside a set gets ValueError, TensorFlow's InvalidArgumentError
(Horovod's). process_set_included_op is Horovod's query: -3 for an unknown id, when it runs.
"""
import importlib.util

import numpy as np
import pytest
import tensorflow as tf

import keras
import kolo.tensorflow as hvd
from kolo.common import process_sets as common_process_sets

from tf_common import (F64, N, R, SUB, assert_equal, const, grads_of, leaf, mean_up, up,
                       val)

MEMBER = R in SUB
M = len(SUB)


@pytest.fixture(scope="module")
def ps():
    s = hvd.add_process_set(SUB)
    yield s
    assert hvd.remove_process_set(s) is True
    assert s.process_set_id is None


def test_process_set_object(ps):
    assert ps.ranks == SUB and type(ps.process_set_id) is int and ps.process_set_id > 0
    assert ps.size() == M and ps.included() is MEMBER
    if MEMBER:
        assert ps.rank() == SUB.index(R)
    with pytest.raises(ValueError):
        hvd.add_process_set(list(SUB))  # Horovod: no duplicate process sets
    # kolo's one registry: kolo.common's objects, the ones kolo.torch re-exports.
    assert isinstance(ps, common_process_sets.ProcessSet)
    assert hvd.add_process_set is common_process_sets.add_process_set or \
        hvd.add_process_set.__module__.startswith("kolo")
    if importlib.util.find_spec("torch") is not None:
        import kolo.torch
        assert kolo.torch.ProcessSet is hvd.ProcessSet
        assert kolo.torch.global_process_set is hvd.global_process_set


def test_collectives_on_a_process_set(ps):
    x = const(val(R, (2,)), tf.float32)
    if not MEMBER:
        # Horovod: ranks outside the set do not take part; kolo refuses at once.
        with pytest.raises(Exception):
            hvd.allreduce(x, process_set=ps)
        return
    every = {r: val(r, (2,)) for r in SUB}
    total = sum(every.values()).astype(np.float64)
    assert_equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps), total)
    assert np.allclose(hvd.allreduce(x, process_set=ps).numpy(), total / M)
    out = hvd.grouped_allreduce([x, x * 2], op=hvd.Sum, process_set=ps)
    assert_equal(out[0], total)
    assert_equal(out[1], 2 * total)
    rows = {r: val(r, (r + 1, 2)) for r in SUB}
    gathered = np.concatenate([rows[r] for r in SUB])
    assert_equal(hvd.allgather(const(rows[R], tf.int64), process_set=ps), gathered)
    assert_equal(hvd.grouped_allgather([const(rows[R], tf.int64)], process_set=ps)[0],
                 gathered)
    root = SUB[-1]
    assert_equal(hvd.broadcast(x, root, process_set=ps), every[root])
    v = tf.Variable(x)
    hvd.broadcast_([v], root, process_set=ps)
    assert_equal(v, every[root])
    v = tf.Variable(x)
    hvd.broadcast_variables([v], root, process_set=ps)
    assert_equal(v, every[root])
    me = SUB.index(R)
    send = const(np.array([[10 * R + j] for j in range(M)]), tf.float32)
    out, received = hvd.alltoall(send, [1] * M, process_set=ps)
    assert_equal(out, [[10 * s + me] for s in SUB])
    assert received.numpy().tolist() == [1] * M
    block = {r: val(r, (M, 3)) for r in SUB}
    block_total = sum(block.values()).astype(np.float64)
    assert_equal(hvd.reducescatter(const(block[R], F64), op=hvd.Sum, process_set=ps),
                 block_total[me:me + 1])
    assert_equal(hvd.grouped_reducescatter([const(block[R], F64)], op=hvd.Sum,
                                           process_set=ps)[0], block_total[me:me + 1])
    hvd.barrier(process_set=ps)
    assert hvd.broadcast_object({"r": R}, root, process_set=ps) == {"r": root}
    assert hvd.allgather_object(R, process_set=ps) == SUB

    @tf.function
    def f(t):
        return hvd.allreduce(t, op=hvd.Sum, process_set=ps)

    assert_equal(f(x), total)


def test_process_set_gradients(ps):
    if not MEMBER:
        return
    x = leaf(3)
    (g,) = grads_of(lambda: hvd.allreduce(x, op=hvd.Sum, process_set=ps), [x])
    assert np.allclose(g.numpy(), sum(up(k, (3,)) for k in SUB))
    x = leaf(R + 1, 2)
    (g,) = grads_of(lambda: hvd.allgather(x, process_set=ps), [x])
    dims = [r + 1 for r in SUB]
    full = mean_up(SUB, (sum(dims), 2)).numpy()
    start = sum(dims[:SUB.index(R)])
    assert np.allclose(g.numpy(), full[start:start + R + 1])
    root = SUB[-1]
    x = leaf(4)
    (g,) = grads_of(lambda: hvd.broadcast(x, root, process_set=ps), [x])
    want = mean_up(SUB, (4,)).numpy() if R == root else np.zeros(4)
    assert np.allclose(g.numpy(), want)


def test_distributed_gradient_tape_on_a_process_set(ps):
    a = tf.Variable(tf.ones(3, F64))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(a * up(R, (3,)))
    tape = hvd.DistributedGradientTape(tape, process_set=ps)
    (g,) = tape.gradient(loss, [a])
    want = mean_up(SUB, (3,)) if MEMBER else up(R, (3,))  # non-members: their own
    assert np.allclose(g.numpy(), want.numpy())


def test_keras_distributed_optimizer_on_a_process_set(ps):
    import kolo.tensorflow.keras as hvd_k
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0), process_set=ps)
    v = keras.Variable(np.zeros(2, np.float32))
    opt.apply_gradients([(tf.constant([R + 1.0, R + 1.0]), v)])
    want = -np.mean([r + 1.0 for r in SUB]) if MEMBER else -(R + 1.0)
    assert np.allclose(keras.ops.convert_to_numpy(v), want)


def test_a_rank_outside_the_set_gets_invalid_argument(ps):
    if MEMBER:
        return
    with pytest.raises(tf.errors.InvalidArgumentError, match="not a member") as err:
        hvd.allreduce(tf.ones(2), process_set=ps)
    assert isinstance(err.value, ValueError)


def _fake_set():
    fake = hvd.ProcessSet([0])
    fake.process_set_id = 10  # Horovod's own test does this: "you should not do this"
    return fake


def _removed_set():
    removed = hvd.add_process_set([0])
    assert hvd.remove_process_set(removed) is True
    return removed


UNREGISTERED = {"never_added": lambda: hvd.ProcessSet([0]), "id_by_hand": _fake_set,
                "removed": _removed_set}
BUILDERS = {
    "allreduce": lambda ps, x: hvd.allreduce(x, process_set=ps),
    "allgather": lambda ps, x: hvd.allgather(x, process_set=ps),
    "broadcast": lambda ps, x: hvd.broadcast(x, 0, process_set=ps),
    "alltoall": lambda ps, x: hvd.alltoall(x, process_set=ps),
    "reducescatter": lambda ps, x: hvd.reducescatter(x, process_set=ps),
    "barrier": lambda ps, x: hvd.barrier(process_set=ps),
    "size_op": lambda ps, x: hvd.size_op(ps.process_set_id or 10),
}


@pytest.mark.parametrize("which", sorted(UNREGISTERED))
def test_an_unregistered_set_is_a_value_error_when_traced(which):
    ps = UNREGISTERED[which]()  # every rank: removing is collective
    spec = tf.TensorSpec([2], tf.float32)
    for name, build in sorted(BUILDERS.items()):
        with pytest.raises(ValueError, match="not registered"):
            build(ps, tf.ones(2))
        f = tf.function(lambda x: build(ps, x))
        with pytest.raises(ValueError, match="not registered"):
            f.get_concrete_function(spec)
        with tf.Graph().as_default():
            with pytest.raises(ValueError, match="not registered"):
                build(ps, tf.ones(2))


def test_an_unregistered_set_fails_the_gradient_tape_on_every_rank():
    a = tf.Variable(tf.ones(3, F64))

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(a * a)
        return hvd.DistributedGradientTape(tape, process_set=_fake_set()).gradient(loss, [a])

    with pytest.raises(ValueError, match="not registered"):  # members or not
        step.get_concrete_function()


def test_a_set_removed_after_tracing_fails_when_the_function_runs():
    ps = hvd.add_process_set([0])
    f = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum, process_set=ps))
    if R == 0:
        assert_equal(f(tf.ones(2)), [1.0, 1.0])
    else:
        f.get_concrete_function(tf.TensorSpec([2], tf.float32))
    assert hvd.remove_process_set(ps) is True
    with pytest.raises(tf.errors.InvalidArgumentError, match="does not exist"):
        f(tf.ones(2))


def test_process_set_included_op_of_an_unknown_set_is_horovods_error_code():
    # Horovod's op: 0 or 1, or HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET (-3) for an id that no
    # registered set has, read when the op runs.
    unknown = 1000
    got = hvd.process_set_included_op(unknown)
    assert got.dtype == tf.int32 and int(got) == -3
    assert int(hvd.process_set_included_op(0)) == 1
    f = tf.function(lambda: hvd.process_set_included_op(s.process_set_id))
    s = hvd.add_process_set([0])
    assert int(f()) == int(R == 0)
    with tf.Graph().as_default():
        op = hvd.process_set_included_op(s.process_set_id)
        with tf.compat.v1.Session() as sess:
            assert sess.run(op) == int(R == 0)
            removed_id = s.process_set_id
            assert hvd.remove_process_set(s) is True
            assert sess.run(op) == -3  # traced while the set existed, run after
    assert int(f()) == -3
    assert int(hvd.process_set_included_op(removed_id)) == -3


def test_global_collectives_still_work_after_the_sets():
    assert_equal(hvd.allreduce(tf.ones(2), op=hvd.Sum), [float(N)] * 2)
