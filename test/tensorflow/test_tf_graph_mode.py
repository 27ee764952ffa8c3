"""kolo.tensorflow in TF1 graphs run by a real tf.compat.v1.Session (each test builds its own
tf.Graph, so eager execution stays on for the other tests).

A Session runs the ops of one Session.run in no fixed order, a different one on each
rank: an unnamed collective is named after its graph op and pairs by that name (Horovod
names it after its op), and it waits on a thread of its own, so that more collectives than
the Session has threads cannot hold every thread waiting for each other. broadcast_ and
broadcast_variables return ops that assign the variables, as Horovod's; the object
functions run in the session; collectives inside control flow of a TF1 graph run as kolo's
ops (refused through tf.numpy_function). A tf.compat.v1 optimizer is wrapped as by
Horovod's _DistributedOptimizer, backward_passes_per_step > 1 included.
"""
import contextlib

import numpy as np
import pytest
import tensorflow as tf

import kolo.tensorflow as hvd
from kolo.tensorflow import op_library

from tf_common import N, R, SUB

# One inter-op thread (conftest's, which a Session takes from the eager context) and eight:
# with one, eight collectives waiting at once would hold the only thread; with eight, the
# Session runs the collectives of one step in a different order on each rank.
THREADS = [1, 8]
STEPS = 6


def _session(threads=None):
    config = None
    if threads is not None:
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads)
    return tf.compat.v1.Session(config=config)


@pytest.mark.parametrize("threads", THREADS)
def test_unnamed_allreduces_fetched_in_one_session_run_pair_by_op(threads):
    # Op i sums (i + 1) * (r + 1) + step over the ranks: paired with another op on any
    # rank, a sum is wrong.
    with tf.Graph().as_default():
        step = tf.compat.v1.placeholder(tf.float32, [])
        ops = [hvd.allreduce(tf.fill([3], (i + 1) * (R + 1) + step), op=hvd.Sum)
               for i in range(8)]
        assert all(o.shape.as_list() == [3] for o in ops)
        with _session(threads) as sess:
            for s in range(STEPS):
                got = sess.run(ops, {step: float(s)})
                for i, g in enumerate(got):
                    want = (i + 1) * N * (N + 1) / 2 + N * s
                    assert np.array_equal(g, [want] * 3), (R, s, i, g, want)


def test_unnamed_allreduces_in_a_tf_function_pair_in_program_order():
    # tf.function keeps pairing by call order: automatic control dependencies run the
    # stateful ops in program order on every rank.
    @tf.function
    def f(s):
        return [hvd.allreduce(tf.fill([3], (i + 1) * (R + 1) + s), op=hvd.Sum)
                for i in range(8)]

    for s in range(3):
        for i, g in enumerate(f(tf.constant(float(s)))):
            assert np.array_equal(g.numpy(), [(i + 1) * N * (N + 1) / 2 + N * s] * 3)


def test_every_collective_in_one_session_run():
    with tf.Graph().as_default():
        step = tf.compat.v1.placeholder(tf.int32, [])
        mine = tf.fill([N, 2], R + step)
        ops = {
            "allreduce": hvd.allreduce(mine, op=hvd.Sum),
            "allgather": hvd.allgather(mine[:R + 1]),
            "grouped_allgather": hvd.grouped_allgather([mine[:1], mine[:R + 1] * 2]),
            "broadcast": hvd.broadcast(mine, N - 1),
            "alltoall": hvd.alltoall(mine),
            "reducescatter": hvd.reducescatter(mine, op=hvd.Sum),
            "grouped_allreduce": hvd.grouped_allreduce([mine, mine * 3], op=hvd.Max),
        }
        with _session(8) as sess:
            for s in range(STEPS):
                got = sess.run(ops, {step: s})
                total = sum(r + s for r in range(N))
                rows = np.concatenate([np.full([r + 1, 2], r + s) for r in range(N)])
                assert np.array_equal(got["allreduce"], np.full([N, 2], total))
                assert np.array_equal(got["allgather"], rows)
                assert np.array_equal(got["grouped_allgather"][0],
                                      np.concatenate([np.full([1, 2], r + s) for r in range(N)]))
                assert np.array_equal(got["grouped_allgather"][1], rows * 2)
                assert np.array_equal(got["broadcast"], np.full([N, 2], N - 1 + s))
                assert np.array_equal(got["alltoall"], np.array([[r + s] * 2 for r in range(N)]))
                assert np.array_equal(got["reducescatter"], np.full([1, 2], total))
                assert np.array_equal(got["grouped_allreduce"][1], np.full([N, 2], 3 * (N - 1 + s)))


def test_grouped_allreduce_of_indexed_slices_in_a_session():
    # Each tf.IndexedSlices travels as allgathers of its values and indices, all unnamed.
    with tf.Graph().as_default():
        step = tf.compat.v1.placeholder(tf.float32, [])
        slices = [tf.IndexedSlices(tf.fill([1, 2], (k + 1) * (R + 1) + step), tf.constant([R]),
                                   tf.constant([N, 2])) for k in range(3)]
        dense = tf.fill([2], R + step)
        out = hvd.grouped_allreduce(slices + [dense], op=hvd.Sum)
        fetch = [tf.convert_to_tensor(o) for o in out[:3]] + [out[3]]
        with _session(8) as sess:
            for s in range(STEPS):
                got = sess.run(fetch, {step: float(s)})
                for k in range(3):
                    want = np.array([[(k + 1) * (r + 1) + s] * 2 for r in range(N)])
                    assert np.array_equal(got[k], want), (k, got[k], want)
                assert np.array_equal(got[3], [N * (N - 1) / 2 + N * s] * 2)


def test_grouped_reducescatter_gradients_in_a_session():
    # The gradient of a Sum reducescatter is the allgather of the incoming gradients times
    # the set's size: two collectives forward, one per output backward.
    with tf.Graph().as_default():
        a = tf.constant(np.ones([N, 2]) * (R + 1))
        b = tf.constant(np.ones([2 * N]) * (R + 2))
        outs = hvd.grouped_reducescatter([a, b], op=hvd.Sum)
        loss = tf.reduce_sum(outs[0] * (R + 1.0)) + tf.reduce_sum(outs[1] * (R + 3.0))
        grads = tf.gradients(loss, [a, b])
        with _session(8) as sess:
            for _ in range(3):
                ga, gb = sess.run(grads)
                assert np.array_equal(ga, np.array([[(r + 1.0) * N] * 2 for r in range(N)]))
                assert np.array_equal(gb, np.repeat([(r + 3.0) * N for r in range(N)], 2))


def test_gradients_and_distributed_gradient_tape_in_a_session():
    with tf.Graph().as_default():
        x = tf.Variable(np.full([R + 1, 2], R + 1.0))
        w = tf.Variable(np.ones([2]))
        gathered = hvd.allgather(x)  # the gradient: this rank's rows of the average
        (g_gather,) = tf.gradients(tf.reduce_sum(gathered * (R + 1.0)), [x])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * (R + 1.0))
        (g_tape,) = hvd.DistributedGradientTape(tape).gradient(loss, [w])
        with _session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(3):
                got_gather, got_tape = sess.run([g_gather, g_tape])
                assert np.array_equal(got_gather, np.full([R + 1, 2], (N + 1) / 2))
                assert np.array_equal(got_tape, [(N + 1) / 2] * 2)


def test_a_mismatch_in_a_session_fails_on_every_rank_and_the_graph_runs_on():
    with tf.Graph().as_default():
        shape = tf.compat.v1.placeholder(tf.int32, [1])
        bad = hvd.allreduce(tf.ones(shape), op=hvd.Sum)
        good = hvd.allreduce(tf.ones([2]), op=hvd.Sum)
        with _session() as sess:
            with pytest.raises(tf.errors.OpError, match="Mismatched allreduce tensor shapes"):
                sess.run(bad, {shape: [R + 1]})
            assert np.array_equal(sess.run(bad, {shape: [3]}), [N] * 3)
            assert np.array_equal(sess.run(good), [N] * 2)


@pytest.mark.parametrize("resource", [True, False], ids=["resource", "ref"])
def test_broadcast_in_place_assigns_the_variables_in_a_session(resource):
    with tf.Graph().as_default():
        v = tf.compat.v1.Variable(np.full([3], R, np.float32), use_resource=resource)
        w = tf.compat.v1.Variable(np.full([2], R, np.int64), use_resource=resource)
        values = hvd.broadcast_([v, w], N - 1)
        with _session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            got = sess.run(values)
            assert np.array_equal(got[0], [N - 1] * 3) and np.array_equal(got[1], [N - 1] * 2)
            assert np.array_equal(sess.run(v), [N - 1] * 3)
            assert np.array_equal(sess.run(w), [N - 1] * 2)


def test_broadcast_variables_and_global_variables_are_ops_that_assign():
    with tf.Graph().as_default():
        v = tf.Variable(np.full([2], R, np.float32))
        w = tf.Variable(np.full([2], 10 + R, np.float32))
        only_v = hvd.broadcast_variables([v], root_rank=0)
        every = hvd.broadcast_global_variables(N - 1)
        assert isinstance(only_v, tf.Operation) and isinstance(every, tf.Operation)
        with _session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(only_v)
            assert np.array_equal(sess.run([v, w]), [[0, 0], [10 + R] * 2])
            sess.run(every)  # v: rank N - 1's, which is rank 0's since only_v ran
            assert np.array_equal(sess.run([v, w]), [[0, 0], [10 + N - 1] * 2])


def test_broadcast_global_variables_eagerly_names_what_to_use():
    with pytest.raises(RuntimeError, match="broadcast_variables"):
        hvd.broadcast_global_variables(0)


def test_object_functions_run_in_the_session():
    with tf.Graph().as_default():
        with _session() as sess:
            got = hvd.broadcast_object({"rank": R}, root_rank=N - 1, session=sess)
            assert got == {"rank": N - 1}
            with sess.as_default():
                assert hvd.allgather_object(("r", R)) == [("r", r) for r in range(N)]
        with pytest.raises(ValueError, match="session"):
            hvd.broadcast_object(R)


def test_join_barrier_and_queries_in_a_session():
    with tf.Graph().as_default():
        barrier, join = hvd.barrier(), hvd.join()
        queries = [hvd.rank_op(), hvd.size_op(), hvd.process_set_included_op()]
        with _session() as sess:
            assert sess.run(queries) == [R, N, 1]
            assert sess.run(barrier) == 0
            last = int(sess.run(join))
    assert 0 <= last < N and hvd.allgather_object(last) == [last] * N


def test_generic_gradient_names_pair_graphs_whose_op_names_differ():
    # Horovod's DistributedGradientTape.gradient(use_generic_names=True) names the gradient
    # collectives by position alone. Rank 0's graph has one more kolo op, built first and
    # never run, so the name scopes (and kolo's names of unnamed collectives) of its later
    # ops differ from the other ranks'; the generic names still pair.
    with tf.Graph().as_default():
        if R == 0:
            hvd.allreduce(tf.ones(1), op=hvd.Sum)
        a = tf.Variable([1.0, 2.0], dtype=tf.float64)
        b = tf.Variable([[3.0]], dtype=tf.float64)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(a * (R + 1.0)) + tf.reduce_sum(b * b * (R + 1.0))
        grads = hvd.DistributedGradientTape(tape).gradient(loss, [a, b],
                                                           use_generic_names=True)
        with _session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for _ in range(2):
                ga, gb = sess.run(grads)
                mean = (N + 1) / 2.0
                assert np.allclose(ga, [mean, mean]) and np.allclose(gb, [[6.0 * mean]])


def _momentum_reference(lr, mu, w0, grads):
    """TF1's MomentumOptimizer: accum = mu * accum + g; w -= lr * accum."""
    w, accum = np.array(w0), np.zeros_like(w0)
    for g in grads:
        accum = mu * accum + g
        w = w - lr * accum
    return w


def test_a_tf_compat_v1_optimizer_averages_in_compute_gradients():
    # Horovod's _DistributedOptimizer: named Distributed<Class>; compute_gradients() returns
    # the wrapped optimizer's gradients averaged over the ranks, which apply_gradients()
    # (and minimize(), through both) hands to the wrapped optimizer.
    lr, mu, w0, xs = 0.1, 0.9, [1.0, 2.0], [1.0, -2.0, 0.5]
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float64, [])
        w = tf.Variable(w0, dtype=tf.float64)
        v = tf.Variable(w0, dtype=tf.float64)
        loss = tf.reduce_sum(w * x * (R + 1.0))
        base = tf.compat.v1.train.MomentumOptimizer(lr, mu)
        opt = hvd.DistributedOptimizer(base)
        assert isinstance(opt, tf.compat.v1.train.Optimizer)
        assert opt.get_name() == "DistributedMomentumOptimizer"
        grads_and_vars = opt.compute_gradients(loss, var_list=[w])
        assert grads_and_vars[0][1] is w
        train = opt.apply_gradients(grads_and_vars)
        named = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr),
                                         name="mine")
        assert named.get_name() == "mine"
        minimize = named.minimize(tf.reduce_sum(v * x * (R + 1.0)), var_list=[v])
        assert opt.get_slot(w, "momentum") is base.get_slot(w, "momentum")
        with _session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for xv in xs:
                g, _, _ = sess.run([grads_and_vars[0][0], train, minimize], {x: xv})
                assert np.allclose(g, [xv * (N + 1) / 2.0] * 2)
            got_w, got_v = sess.run([w, v])
    mean = [np.full(2, xv * (N + 1) / 2.0) for xv in xs]
    assert np.allclose(got_w, _momentum_reference(lr, mu, w0, mean), rtol=1e-12)
    assert np.allclose(got_v, _momentum_reference(lr, 0.0, w0, mean), rtol=1e-12)


def test_a_tf_compat_v1_optimizer_averages_eagerly():
    w = tf.Variable([1.0, 2.0], dtype=tf.float64)
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
    opt.minimize(lambda: tf.reduce_sum(w * (R + 1.0)), var_list=[w])
    assert np.allclose(w.numpy(), np.array([1.0, 2.0]) - 0.5 * (N + 1) / 2.0)
    with pytest.raises(ValueError, match="backward_passes_per_step > 1"):  # Horovod's
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5),
                                 backward_passes_per_step=2)


def _refused_without_ops(**kwargs):
    """Through tf.numpy_function (KOLO_TF_OPS=0) kolo refuses what would reduce inside
    tf.cond, naming why; returns whether it did."""
    if op_library.ops() is not None:
        return False
    with pytest.raises(NotImplementedError, match="tf.cond.*KOLO_TF_OPS"):
        hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.1), **kwargs)
    return True


@contextlib.contextmanager
def _control_flow(version):
    """tf.cond as TF2 builds it (functional If, "v2") or as TF1 scripts that call
    tf.compat.v1.disable_v2_behavior() get it (Switch and Merge, "v1")."""
    if version == "v2":
        yield
        return
    tf.compat.v1.disable_control_flow_v2()
    try:
        yield
    finally:
        tf.compat.v1.enable_control_flow_v2()


@pytest.mark.parametrize("average, control_flow", [(False, "v2"), (True, "v1")],
                         ids=["summed-cond_v2", "averaged-cond_v1"])
def test_a_tf_compat_v1_optimizer_aggregates_backward_passes_in_a_session(average,
                                                                          control_flow):
    # Horovod's LocalGradientAggregationHelper: the gradients of N = 3 runs are summed on
    # each rank, then averaged over the ranks (and divided by N with
    # average_aggregated_gradients) and applied on every 3rd run; the variables change only
    # then, global_step counts every run, the counter and the sums are local variables.
    passes, lr, mu, w0 = 3, 0.25, 0.5, np.array([1.0, -2.0])  # exact in float32, as TF1 keeps them
    xs = [1.0, -2.0, 0.5, 3.0, 0.25, -1.0, 2.0]  # two rounds and one pass of a third
    with _control_flow(control_flow), tf.Graph().as_default():
        if _refused_without_ops(backward_passes_per_step=passes):
            return
        x = tf.compat.v1.placeholder(tf.float64, [])
        w = tf.Variable(w0, dtype=tf.float64)
        unused = tf.Variable([3.0], dtype=tf.float64)  # its gradient is None
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(lr, mu),
                                       backward_passes_per_step=passes,
                                       average_aggregated_gradients=average)
        pairs = opt.compute_gradients(tf.reduce_sum(w * w * x * (R + 1.0)),
                                      var_list=[w, unused])
        assert pairs[1][0] is None and pairs[0][1] is w
        train = opt.apply_gradients(pairs, global_step=step)
        types = {op.type for op in tf.compat.v1.get_default_graph().get_operations()}
        assert ("Switch" in types) == (control_flow == "v1"), types
        local = tf.compat.v1.local_variables()
        assert len(local) == 2, [v.name for v in local]  # the counter and w's sum
        assert all(v.name.startswith("aggregation_variables_DistributedMomentumOptimizer%d/"
                                     % R) for v in local)
        assert not set(local) & set(tf.compat.v1.global_variables())
        with pytest.raises(ValueError, match="called a second time"):
            opt.compute_gradients(tf.reduce_sum(w * x), var_list=[w])
        other = hvd.DistributedOptimizer(tf.compat.v1.train.MomentumOptimizer(lr, mu),
                                         backward_passes_per_step=passes)
        other.compute_gradients(tf.reduce_sum(unused * x), var_list=[unused])
        others = set(tf.compat.v1.local_variables()) - set(local)  # a counter of its own
        assert len(others) == 2 and all("%d_1/" % R in v.name for v in others), others
        with _session(8) as sess:
            sess.run([tf.compat.v1.global_variables_initializer(),
                      tf.compat.v1.local_variables_initializer()])
            want, accum, summed = w0, np.zeros(2), np.zeros(2)
            for k, xv in enumerate(xs):
                grad, _ = sess.run([pairs[0][0], train], {x: xv})
                own = 2.0 * want * xv * (R + 1)
                summed = summed + 2.0 * want * xv * (N + 1) / 2.0  # the ranks' average
                if (k + 1) % passes:
                    assert np.allclose(grad, own, rtol=1e-12), k  # this pass's own
                else:
                    mean = summed / passes if average else summed
                    assert np.allclose(grad, mean, rtol=1e-12), k
                    accum = mu * accum + mean
                    want, summed = want - lr * accum, np.zeros(2)
                assert np.allclose(sess.run(w), want, rtol=1e-12), k
            assert sess.run(step) == len(xs)


def test_aggregated_passes_keep_horovods_sparse_local_and_process_set_rules():
    # tf.IndexedSlices: Horovod's ValueError, or made dense with sparse_as_dense; a variable
    # registered as local keeps this rank's sum (divided by the set's size); a rank outside
    # the process set applies its own sums.
    passes, lr, xs = 2, 0.5, [1.0, -3.0, 2.0, 0.5]
    with tf.Graph().as_default():
        if _refused_without_ops(backward_passes_per_step=passes):
            return
        x = tf.compat.v1.placeholder(tf.float64, [])
        table = tf.Variable(np.zeros((3, 2)))
        w = tf.Variable([1.0, 1.0], dtype=tf.float64)
        mine = tf.Variable([0.0, 0.0], dtype=tf.float64)
        loss = (tf.reduce_sum(tf.gather(table, [R % 3]) * x)
                + tf.reduce_sum((w + mine) * x * (R + 1.0)))
        sparse = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr),
                                          backward_passes_per_step=passes)
        with pytest.raises(ValueError, match="IndexedSlices are not supported when"):
            sparse.compute_gradients(loss, var_list=[table])
        subset = hvd.add_process_set(SUB)
        try:
            opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(lr),
                                           backward_passes_per_step=passes,
                                           sparse_as_dense=True, process_set=subset)
            opt.register_local_var(mine)
            train = opt.minimize(loss, var_list=[table, w, mine])
            with _session() as sess:
                sess.run([tf.compat.v1.global_variables_initializer(),
                          tf.compat.v1.local_variables_initializer()])
                for xv in xs:
                    sess.run(train, {x: xv})
                got = sess.run([table, w, mine])
        finally:
            hvd.remove_process_set(subset)
    total = sum(xs)  # every variable's gradient is linear in x
    ranks = SUB if R in SUB else [R]
    rows = np.zeros((3, 2))
    for r in ranks:
        rows[r % 3] += total / len(ranks)
    scale = np.mean([r + 1.0 for r in ranks])
    assert np.allclose(got[0], -lr * rows, rtol=1e-12)
    assert np.allclose(got[1], 1.0 - lr * total * scale, rtol=1e-12)
    assert np.allclose(got[2], -lr * total * (R + 1) / len(SUB), rtol=1e-12)


def test_a_collective_inside_control_flow_of_a_tf1_graph():
    # kolo's ops are graph ops like any other, named so that a Session's order does not
    # matter. Through tf.numpy_function (KOLO_TF_OPS=0) kolo refuses: its ops there are
    # a handoff between two Python calls, which control flow would tear apart.
    with tf.Graph().as_default():
        x = tf.ones([2]) * (R + 1)
        if op_library.ops() is None:
            with pytest.raises(NotImplementedError, match="tf.cond"):
                tf.cond(tf.constant(True), lambda: hvd.allreduce(x), lambda: x)
            return
        y = tf.cond(tf.constant(True), lambda: hvd.allreduce(x, op=hvd.Sum), lambda: x)
        # Each branch is a function graph of its own; the collectives of two conds fetched
        # together are still named apart (after the graph itself).
        z = tf.cond(tf.constant(True), lambda: hvd.allreduce(x * 10, op=hvd.Sum), lambda: x)
        with tf.compat.v1.Session() as session:
            got_y, got_z = session.run([y, z])
        assert np.allclose(got_y, [N * (N + 1) / 2] * 2)
        assert np.allclose(got_z, [10 * N * (N + 1) / 2] * 2)
