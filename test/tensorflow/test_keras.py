"""kolo.tensorflow.keras (and kolo.keras) against Horovod 0.28's horovod.tensorflow.keras
on Keras 3: DistributedOptimizer (a subclass of the wrapped optimizer's class whose
apply_gradients averages; op, gradient_predivide_factor, backward_passes_per_step),
model.fit equivalence (N ranks x BATCH/N samples == one process x BATCH samples, to
rtol=1e-5, atol=1e-6), the callbacks (horovod/_keras/callbacks.py) and load_model.
"""
import os
import tempfile
import warnings

import numpy as np
import pytest
import tensorflow as tf

import keras
import kolo.tensorflow as hvd
import kolo.tensorflow.keras as hvd_k
from kolo.tensorflow import op_library
import object_checks  # test/common

from tf_common import (BATCH, LR, N, R, STEPS, assert_same_on_every_rank,
                       assert_weights_close, embedding_data, global_data, initial_weights,
                       make_embedding_model, make_model, mse, reference_train, shard)

CALLBACKS = ["BroadcastGlobalVariablesCallback", "MetricAverageCallback",
             "LearningRateWarmupCallback", "LearningRateScheduleCallback",
             "BestModelCheckpoint"]
NAMES = ["DistributedOptimizer", "PartialDistributedOptimizer", "load_model", "callbacks",
         "init", "shutdown", "rank", "size", "local_rank", "local_size", "allreduce",
         "allgather", "broadcast", "Compression", "is_initialized"]


def test_names_of_kolo_tensorflow_keras_and_kolo_keras():
    import kolo.keras as kk
    for mod in (hvd_k, kk):
        missing = [n for n in NAMES if not hasattr(mod, n)]
        missing += [c for c in CALLBACKS if not hasattr(mod.callbacks, c)]
        assert not missing, (mod.__name__, missing)
        assert issubclass(mod.callbacks.MetricAverageCallback, keras.callbacks.Callback)
    assert hvd_k.rank() == R and hvd_k.size() == N
    opt = kk.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.5))
    assert isinstance(opt, keras.optimizers.SGD)


def test_keras_allreduce_allgather_broadcast_take_values():
    out = hvd_k.allreduce(np.full((2,), R + 1.0, np.float32), op=hvd.Sum)
    assert np.allclose(np.asarray(out), N * (N + 1) / 2.0)
    out = hvd_k.allreduce(np.full((2,), float(N * R), np.float32))  # Average
    assert np.allclose(np.asarray(out), N * (N - 1) / 2.0)
    out = hvd_k.allgather(np.full((R + 1, 2), R, np.int32))
    assert np.asarray(out).tolist() == sum([[[r, r]] * (r + 1) for r in range(N)], [])
    out = hvd_k.broadcast(np.arange(3, dtype=np.float64) + R, N - 1)
    assert np.asarray(out).tolist() == [N - 1.0, N * 1.0, N + 1.0]


# --- DistributedOptimizer ----------------------------------------------------------------

def test_distributed_optimizer_is_a_subclass_of_the_wrapped_class():
    base = keras.optimizers.SGD(learning_rate=0.25, momentum=0.5, nesterov=True)
    opt = hvd_k.DistributedOptimizer(base)
    assert isinstance(opt, keras.optimizers.SGD) and type(opt) is not keras.optimizers.SGD
    assert float(keras.ops.convert_to_numpy(opt.learning_rate)) == 0.25
    assert opt.momentum == 0.5 and opt.nesterov is True
    adam = hvd_k.DistributedOptimizer(keras.optimizers.Adam(learning_rate=1e-3))
    assert isinstance(adam, keras.optimizers.Adam)


def test_distributed_optimizer_is_named_as_horovods():
    # Horovod: name or "Distributed" + the wrapped optimizer's class name.
    assert hvd_k.DistributedOptimizer(keras.optimizers.SGD(name="sgd")).name == "DistributedSGD"
    assert hvd.DistributedOptimizer(keras.optimizers.Adam()).name == "DistributedAdam"
    named = hvd_k.DistributedOptimizer(keras.optimizers.SGD(), name="mine")
    assert named.name == "mine" and named.get_config()["name"] == "mine"
    assert hvd_k.DistributedOptimizer(keras.optimizers.RMSprop()).get_config()["name"] == \
        "DistributedRMSprop"


def test_distributed_optimizer_takes_average_and_sum_only_as_horovods():
    for op in (hvd.Min, hvd.Max, hvd.Product, hvd.Adasum, 7):
        with pytest.raises(ValueError, match="op currently only supports Average and Sum"):
            hvd_k.DistributedOptimizer(keras.optimizers.SGD(), op=op)
    for op in (hvd.Average, hvd.Sum):
        hvd_k.DistributedOptimizer(keras.optimizers.SGD(), op=op)


def _apply(opt, grads_per_call, shape=(3,)):
    v = keras.Variable(np.zeros(shape, np.float32))
    seen = []
    for g in grads_per_call:
        opt.apply_gradients([(tf.constant(g, tf.float32), v)])
        seen.append(keras.ops.convert_to_numpy(v).copy())
    return seen


@pytest.mark.parametrize("kwargs,factor", [({}, "mean"), ({"op": hvd.Sum}, "sum"),
                                           ({"gradient_predivide_factor": 2.0}, "mean")],
                         ids=["average", "sum", "predivide"])
def test_apply_gradients_reduces_across_ranks(kwargs, factor):
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0), **kwargs)
    (v,) = _apply(opt, [np.full(3, R + 1.0)])
    total = N * (N + 1) / 2.0
    assert np.allclose(v, -(total / N if factor == "mean" else total))


def test_tensorflow_distributed_optimizer_wraps_keras_optimizers_too():
    # horovod.tensorflow.DistributedOptimizer hands Keras optimizers to the Keras one.
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0))
    assert isinstance(opt, keras.optimizers.SGD)
    (v,) = _apply(opt, [np.full(3, R + 1.0)])
    assert np.allclose(v, -(N + 1) / 2.0)


@pytest.mark.parametrize("average", [True, False])
def test_backward_passes_per_step_applies_every_second_call(average):
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=1.0),
                                     backward_passes_per_step=2,
                                     average_aggregated_gradients=average)
    g1, g2 = np.full(3, R + 1.0), np.full(3, 3.0 * (R + 1))
    seen = _apply(opt, [g1, g2, g1, g2])
    # Each rank aggregates 4 (R + 1) over two passes; averaged over the ranks: 2 (N + 1);
    # divided by the 2 passes when average_aggregated_gradients.
    step = 2.0 * (N + 1) / (2 if average else 1)
    assert np.allclose(seen[0], 0.0)  # nothing applied after the first pass
    assert np.allclose(seen[1], -step)
    assert np.allclose(seen[2], -step)
    assert np.allclose(seen[3], -2 * step)
    # Horovod's iterations count every call, applied or not.
    assert int(keras.ops.convert_to_numpy(opt.iterations)) == 4


def test_backward_passes_per_step_schedules_see_horovods_step_numbers():
    # iterations advances on every call, so a LearningRateSchedule reads the call number:
    # the update applied at call 2 (iterations 1 before it) uses schedule(1), at call 4
    # schedule(3).
    schedule = keras.optimizers.schedules.PiecewiseConstantDecay([0, 1, 2], [8., 4., 2., 1.])
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=schedule),
                                     backward_passes_per_step=2)
    seen = _apply(opt, [np.ones(3)] * 4)
    # Each applied update is lr * 2 (two passes of gradient 1, averaged over the ranks).
    assert np.allclose(seen[1], -4.0 * 2) and np.allclose(seen[3], -(4.0 + 1.0) * 2)


def test_broadcast_global_variables_without_a_model_is_horovods():
    # Horovod's broadcast_global_variables(root_rank): RuntimeError under eager execution;
    # in a TF1 graph the global variables are broadcast (in the default session).
    import kolo.keras as kk
    for mod in (hvd_k, kk):
        with pytest.raises(RuntimeError, match="eager execution"):
            mod.broadcast_global_variables(0)
    with tf.Graph().as_default():
        v = tf.Variable([R + 1.0, 2.0 * R])
        with tf.compat.v1.Session() as sess, sess.as_default():
            sess.run(v.initializer)
            hvd_k.broadcast_global_variables(N - 1)
            assert sess.run(v).tolist() == [float(N), 2.0 * (N - 1)]


# --- model.fit equivalence ----------------------------------------------------------------

def _fit_model(weights, optimizer, **compile_kwargs):
    model = make_model()
    model.set_weights(weights)
    model.compile(optimizer=optimizer, loss="mse", **compile_kwargs)
    return model


def test_model_fit_with_distributed_optimizer_matches_one_process():
    x, y = global_data()
    w0 = initial_weights(1)
    epochs = 2
    want = reference_train(w0, np.concatenate([x] * epochs), np.concatenate([y] * epochs),
                           momentum=0.5)
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=LR, momentum=0.5))
    model = _fit_model(w0, opt)
    model.fit(shard(x), shard(y), batch_size=BATCH // N, epochs=epochs, shuffle=False,
              verbose=0)
    assert int(keras.ops.convert_to_numpy(opt.iterations)) == STEPS * epochs
    assert_weights_close(model.get_weights(), want)
    assert_same_on_every_rank(model.get_weights())


def test_model_fit_with_backward_passes_per_step_2_matches_one_process_with_2x_batch():
    micro = 4
    x, y = global_data(steps=micro)
    w0 = initial_weights(2)
    want = reference_train(w0, x, y, batch=2 * BATCH, momentum=0.5)
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=LR, momentum=0.5),
                                     backward_passes_per_step=2,
                                     average_aggregated_gradients=True)
    model = _fit_model(w0, opt)
    model.fit(shard(x), shard(y), batch_size=BATCH // N, epochs=1, shuffle=False, verbose=0)
    assert_weights_close(model.get_weights(), want)
    assert_same_on_every_rank(model.get_weights())
    assert int(keras.ops.convert_to_numpy(opt.iterations)) == micro  # every batch counts


def test_model_fit_with_sparse_embedding_gradients_matches_one_process():
    # The Embedding's gradient is a tf.IndexedSlices: allgathered (values / size), or, with
    # sparse_as_dense=True, densified and allreduced; the same training either way.
    ids, y = embedding_data()
    keras.utils.set_random_seed(11)
    w0 = make_embedding_model().get_weights()
    want = reference_train(w0, ids, y, model_fn=make_embedding_model)
    for sparse_as_dense in (False, True):
        opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=LR),
                                         sparse_as_dense=sparse_as_dense)
        model = make_embedding_model()
        model.set_weights(w0)
        model.compile(optimizer=opt, loss="mse")
        model.fit(shard(ids), shard(y), batch_size=BATCH // N, epochs=1, shuffle=False,
                  verbose=0)
        assert_weights_close(model.get_weights(), want)
        assert_same_on_every_rank(model.get_weights())


def test_adam_is_wrapped_and_averages():
    grads = [np.array([R + 1.0, -2.0 * R], np.float32), np.array([0.5, R * 1.0], np.float32)]
    opt = hvd_k.DistributedOptimizer(keras.optimizers.Adam(learning_rate=0.1))
    v = keras.Variable(np.zeros(2, np.float32))
    ref = keras.optimizers.Adam(learning_rate=0.1)
    v_ref = keras.Variable(np.zeros(2, np.float32))
    for step in range(2):
        opt.apply_gradients([(tf.constant(grads[step] + step), v)])
        mean = np.mean([np.array([k + 1.0, -2.0 * k]) if step == 0 else
                        np.array([0.5, k * 1.0]) for k in range(N)], axis=0) + step
        ref.apply_gradients([(tf.constant(mean, tf.float32), v_ref)])
    assert np.allclose(keras.ops.convert_to_numpy(v), keras.ops.convert_to_numpy(v_ref),
                       rtol=1e-5, atol=1e-6)


def test_model_compiled_with_jit_compile_refuses_clearly_or_trains_correctly():
    # Keras' jit_compile=True trains with the gradients' allreduce as an XLA custom call
    # (kolo's ops); through tf.numpy_function it must end in an error that names
    # jit_compile, or in correct training (where Keras does not use XLA).
    x, y = global_data()
    w0 = initial_weights(6)
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=LR))
    model = _fit_model(w0, opt, jit_compile=True)
    try:
        model.fit(shard(x), shard(y), batch_size=BATCH // N, epochs=1, shuffle=False,
                  verbose=0)
    except Exception as e:  # noqa: BLE001
        assert op_library.ops() is None and "jit_compile" in str(e)
    else:
        assert_weights_close(model.get_weights(), reference_train(w0, x, y))
    assert hvd.allgather_object(1) == [1] * N  # the ranks are still in step


# --- callbacks ----------------------------------------------------------------------------

class _Snapshot(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.first = None

    def on_train_batch_begin(self, batch, logs=None):
        if self.first is None:
            self.first = [w.copy() for w in self.model.get_weights()]


def test_broadcast_global_variables_callback_equalizes_before_the_first_step():
    x, y = global_data()
    mine = initial_weights(100 + R)  # differently seeded on every rank
    root = initial_weights(100)
    assert R == 0 or not np.allclose(mine[0], root[0])
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=LR))
    model = _fit_model(mine, opt)
    snap = _Snapshot()
    model.fit(shard(x), shard(y), batch_size=BATCH // N, epochs=1, shuffle=False, verbose=0,
              callbacks=[hvd_k.callbacks.BroadcastGlobalVariablesCallback(0), snap])
    assert_weights_close(snap.first, root, rtol=0, atol=0)
    assert_weights_close(model.get_weights(), reference_train(root, x, y))
    assert_same_on_every_rank(model.get_weights())


class _Logs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(dict(logs or {}))


def test_metric_average_callback_averages_the_epoch_logs():
    x, y = global_data(seed=7)
    y = y * (R + 1)  # every rank's loss differs
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.0))
    model = _fit_model(initial_weights(3), opt, metrics=["mae"])
    before, after = _Logs(), _Logs()
    xv, yv = global_data(steps=1, seed=8)
    yv = yv * (R + 2)
    hist = model.fit(shard(x), shard(y), batch_size=BATCH // N, epochs=2, shuffle=False,
                     verbose=0, validation_data=(shard(xv), shard(yv)),
                     callbacks=[before, hvd_k.callbacks.MetricAverageCallback(), after])
    every_before = hvd.allgather_object(before.epochs)
    every_after = hvd.allgather_object(after.epochs)
    assert len(after.epochs) == 2
    for e in range(2):
        assert set(after.epochs[e]) == set(before.epochs[e]) >= {"loss", "mae", "val_loss",
                                                                   "val_mae"}
        for key in before.epochs[e]:
            local = [float(every_before[r][e][key]) for r in range(N)]
            assert len(set(local)) == N  # the ranks' own values differ...
            mean = np.mean(local)
            for r in range(N):  # ...and after the callback every rank has their mean
                assert np.isclose(float(every_after[r][e][key]), mean, rtol=1e-6, atol=1e-7)
            assert np.isclose(float(hist.history[key][e]), mean, rtol=1e-6, atol=1e-7)


def test_metric_average_callback_averages_every_entry():
    # Horovod's averages every entry of the logs, arrays (per-class metrics) too.
    logs = {"loss": float(R), "per_class": np.array([R, 2.0 * R], np.float32),
            "count": np.int64(R + 1), "note": "not a number"}
    hvd_k.callbacks.MetricAverageCallback().on_epoch_end(0, logs)
    assert type(logs["loss"]) is float and logs["loss"] == (N - 1) / 2.0
    assert isinstance(logs["per_class"], np.ndarray) and logs["per_class"].shape == (2,)
    assert np.allclose(logs["per_class"], [(N - 1) / 2.0, N - 1.0])
    assert logs["count"] == (N + 1) / 2.0
    assert logs["note"] == "not a number"  # Horovod's callback fails on it; kolo leaves it


class _LrLog(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.lrs = []

    def on_train_batch_begin(self, batch, logs=None):
        lr = float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))
        self.lrs.append((self.epoch, batch, lr))

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch


SPE = 3  # steps per epoch in the learning rate tests


@pytest.fixture(scope="module")
def lr_model():
    x, y = global_data(steps=SPE)
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=0.3, momentum=0.9))
    model = _fit_model(initial_weights(4), opt)
    return model, shard(x), shard(y)


def _fit_lrs(lr_model, callback, epochs, start_lr=0.3):
    model, x, y = lr_model
    model.optimizer.learning_rate.assign(start_lr)
    log = _LrLog()
    hist = model.fit(x, y, batch_size=BATCH // N, epochs=epochs, shuffle=False, verbose=0,
                     callbacks=[callback, log])
    assert model.optimizer.momentum == 0.9  # restored after every batch
    return log.lrs, hist


def test_learning_rate_warmup_callback_follows_horovods_formula(lr_model):
    # horovod/_keras/callbacks.py: lr = initial_lr / size * (epoch * (size - 1) / warmup + 1)
    # with epoch = e + (batch + 1) / steps_per_epoch, for e < warmup_epochs; then untouched.
    initial, warmup, epochs = 0.2, 2, 3
    cb = hvd_k.callbacks.LearningRateWarmupCallback(initial_lr=initial, warmup_epochs=warmup,
                                                    verbose=0)
    lrs, hist = _fit_lrs(lr_model, cb, epochs)
    assert len(lrs) == SPE * epochs
    for e, b, lr in lrs:
        if e < warmup:
            ep = e + float(b) / SPE + 1.0 / SPE
            want = initial / N * (ep * (N - 1) / warmup + 1)
        else:
            want = initial  # the warmup ends at initial_lr, which then stays
        assert np.isclose(lr, want, rtol=1e-6), (e, b, lr, want)
    # Horovod logs the learning rate at the end of every epoch.
    assert np.allclose(hist.history["lr"], [lrs[SPE * (e + 1) - 1][2] for e in range(epochs)],
                       rtol=1e-6)


def test_learning_rate_schedule_callback_staircase(lr_model):
    # Exponential decay by 0.5 from epoch 1 to epoch 3 (exclusive), set on each epoch's
    # first batch; outside [start_epoch, end_epoch) the learning rate is left alone.
    cb = hvd_k.callbacks.LearningRateScheduleCallback(initial_lr=0.4, multiplier=0.5,
                                                      start_epoch=1, end_epoch=3,
                                                      momentum_correction=False)
    lrs, _ = _fit_lrs(lr_model, cb, 4)
    want = {0: 0.3, 1: 0.4, 2: 0.2, 3: 0.2}
    for e, b, lr in lrs:
        assert np.isclose(lr, want[e], rtol=1e-6), (e, b, lr)


def test_learning_rate_schedule_callback_smooth(lr_model):
    # staircase=False: the multiplier takes the fractional epoch e + batch / steps_per_epoch.
    cb = hvd_k.callbacks.LearningRateScheduleCallback(initial_lr=0.4,
                                                      multiplier=lambda ep: 1.0 / (1.0 + ep),
                                                      staircase=False, steps_per_epoch=SPE)
    lrs, _ = _fit_lrs(lr_model, cb, 2)
    for e, b, lr in lrs:
        assert np.isclose(lr, 0.4 / (1.0 + e + float(b) / SPE), rtol=1e-6), (e, b, lr)
    # A constant multiplier with staircase=False decays exponentially in the fractional
    # epoch; steps_per_epoch is found from the fit parameters.
    cb = hvd_k.callbacks.LearningRateScheduleCallback(initial_lr=0.4, multiplier=0.5,
                                                      staircase=False)
    lrs, _ = _fit_lrs(lr_model, cb, 2)
    for e, b, lr in lrs:
        assert np.isclose(lr, 0.4 * 0.5 ** (e + float(b) / SPE), rtol=1e-6), (e, b, lr)


def _warmup_lr(initial, warmup, e, b):
    ep = e + float(b) / STEPS + 1.0 / STEPS
    return initial / N * (ep * (N - 1) / warmup + 1)


def _horovods_momentum_correction(w0, x, y, optimizer, initial, warmup, epochs, correct=True):
    """One process, whole batches, eagerly: Horovod's warmup callback's rule as written (the
    learning rate set before each batch, the momentum times new/old for that batch), which
    an eager Keras step reads when it runs."""
    model = make_model()
    model.set_weights(w0)
    mu = optimizer.momentum
    for e in range(epochs):
        for b in range(STEPS):
            old = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
            if e < warmup:
                new = _warmup_lr(initial, warmup, e, b)
                optimizer.learning_rate = new
                if correct:
                    optimizer.momentum = mu * new / old
            xb, yb = x[b * BATCH:(b + 1) * BATCH], y[b * BATCH:(b + 1) * BATCH]
            with tf.GradientTape() as tape:
                loss = mse(model, xb, yb)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            optimizer.momentum = mu
    return model.get_weights()


MOMENTUM_OPTIMIZERS = {
    "sgd": lambda: keras.optimizers.SGD(learning_rate=0.02, momentum=0.9),
    "nesterov": lambda: keras.optimizers.SGD(learning_rate=0.02, momentum=0.9, nesterov=True),
    "rmsprop": lambda: keras.optimizers.RMSprop(learning_rate=0.002, momentum=0.8),
}


@pytest.mark.parametrize("which", sorted(MOMENTUM_OPTIMIZERS))
def test_momentum_correction_is_horovods_on_keras_3_optimizers(which):
    # Keras 3 compiles momentum as a constant; kolo gets Horovod's corrected step through
    # the momentum buffers. The ranks' fit matches one process applying Horovod's rule
    # eagerly, and differs from the same training without the correction.
    # Learning rates small enough that float32 rounding, which the ranks' sums and the one
    # process's sum round differently, stays near 1e-6 after 9 steps; the correction itself
    # changes the weights by tens of percent.
    x, y = global_data(seed=17)
    w0, warmup, epochs = initial_weights(9), 2, 3
    initial = 0.02 if which == "rmsprop" else 0.05
    want = _horovods_momentum_correction(w0, x, y, MOMENTUM_OPTIMIZERS[which](), initial,
                                         warmup, epochs)
    plain = _horovods_momentum_correction(w0, x, y, MOMENTUM_OPTIMIZERS[which](), initial,
                                          warmup, epochs, correct=False)
    assert not np.allclose(want[0], plain[0], rtol=1e-3, atol=1e-4)
    opt = hvd_k.DistributedOptimizer(MOMENTUM_OPTIMIZERS[which]())
    model = _fit_model(w0, opt)
    cb = hvd_k.callbacks.LearningRateWarmupCallback(initial_lr=initial, warmup_epochs=warmup,
                                                    steps_per_epoch=STEPS)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(shard(x), shard(y), batch_size=BATCH // N, epochs=epochs, shuffle=False,
                  verbose=0, callbacks=[cb])
    assert not [w for w in caught if "momentum correction" in str(w.message)]
    assert_weights_close(model.get_weights(), want)
    assert_same_on_every_rank(model.get_weights())
    assert opt.momentum == MOMENTUM_OPTIMIZERS[which]().momentum


def test_best_model_checkpoint_is_horovods():
    # Horovod's: ModelCheckpoint(filepath=None, save_best_only=True, ...), its filepath set
    # later (by Horovod's Spark estimator); it keeps the best model only.
    import kolo.keras as kk
    assert kk.callbacks.BestModelCheckpoint is hvd_k.callbacks.BestModelCheckpoint
    cb = hvd_k.callbacks.BestModelCheckpoint(monitor="loss", save_weights_only=True)
    assert isinstance(cb, keras.callbacks.ModelCheckpoint)
    assert cb.filepath is None and cb.save_best_only and cb.monitor == "loss"
    assert hvd_k.callbacks.BestModelCheckpoint().monitor == "val_loss"
    with pytest.raises(ValueError, match="no filepath"):
        cb.on_train_begin()
    model = _fit_model(initial_weights(7), keras.optimizers.SGD())
    cb.set_model(model)
    cb.filepath = os.path.join(tempfile.mkdtemp(prefix="kolo_best_r%d_" % R),
                               "best.weights.h5")
    saved = {}
    for epoch, (loss, seed) in enumerate([(0.3, 11), (0.5, 12), (0.1, 13), (0.2, 14)]):
        model.set_weights(initial_weights(seed))
        cb.on_epoch_end(epoch, logs={"loss": loss})
        loaded = make_model()
        loaded.load_weights(cb.filepath)
        saved[epoch] = loaded.get_weights()
    best = {0: 11, 1: 11, 2: 13, 3: 13}  # the best loss so far is the one on disk
    for epoch, seed in best.items():
        assert_weights_close(saved[epoch], initial_weights(seed), rtol=0, atol=0)


def test_momentum_correction_with_backward_passes_per_step_2():
    # Horovod's momentum change matters only in the calls that apply: there the momentum is
    # mu * lr_b / lr_(b-1), lr_(b-1) being set by the call before, which only accumulated.
    # kolo's buffers scaled in a call that applies nothing get their values back.
    micro, epochs, warmup, initial, mu = 4, 2, 2, 0.05, 0.9
    x, y = global_data(steps=micro, seed=19)
    w0 = initial_weights(10)
    model = make_model()
    model.set_weights(w0)
    ref = keras.optimizers.SGD(learning_rate=0.02, momentum=mu, nesterov=True)
    prev = 0.02
    for e in range(epochs):
        for b in range(micro):
            lr = prev
            if e < warmup:
                ep = e + float(b) / micro + 1.0 / micro
                lr = initial / N * (ep * (N - 1) / warmup + 1)
            if b % 2 == 1:  # the call that applies: the mean over both micro-batches
                ref.learning_rate = lr
                ref.momentum = mu * lr / prev
                rows = slice((b - 1) * BATCH, (b + 1) * BATCH)
                with tf.GradientTape() as tape:
                    loss = mse(model, x[rows], y[rows])
                grads = tape.gradient(loss, model.trainable_variables)
                ref.apply_gradients(zip(grads, model.trainable_variables))
                ref.momentum = mu
            prev = lr
    opt = hvd_k.DistributedOptimizer(
        keras.optimizers.SGD(learning_rate=0.02, momentum=mu, nesterov=True),
        backward_passes_per_step=2, average_aggregated_gradients=True)
    fitted = _fit_model(w0, opt)
    cb = hvd_k.callbacks.LearningRateWarmupCallback(initial_lr=initial, warmup_epochs=warmup,
                                                    steps_per_epoch=micro)
    fitted.fit(shard(x), shard(y), batch_size=BATCH // N, epochs=epochs, shuffle=False,
               verbose=0, callbacks=[cb])
    assert_weights_close(fitted.get_weights(), model.get_weights())
    assert_same_on_every_rank(fitted.get_weights())


# --- load_model -----------------------------------------------------------------------------

def test_load_model_wraps_the_optimizer_again_and_training_continues():
    x, y = global_data(steps=2 * STEPS)
    first, second = x[:STEPS * BATCH], x[STEPS * BATCH:]
    yfirst, ysecond = y[:STEPS * BATCH], y[STEPS * BATCH:]
    w0 = initial_weights(5)
    want = reference_train(w0, x, y, momentum=0.5)
    opt = hvd_k.DistributedOptimizer(keras.optimizers.SGD(learning_rate=LR, momentum=0.5))
    model = _fit_model(w0, opt)
    model.fit(shard(first), shard(yfirst), batch_size=BATCH // N, epochs=1, shuffle=False,
              verbose=0)
    path = os.path.join(tempfile.mkdtemp(prefix="kolo_tf_r%d_" % R), "model.keras")
    model.save(path)
    loaded = hvd_k.load_model(path)
    assert isinstance(loaded.optimizer, keras.optimizers.SGD)
    assert type(loaded.optimizer) is not keras.optimizers.SGD
    fresh = hvd_k.DistributedOptimizer(keras.optimizers.SGD())
    assert type(loaded.optimizer).__module__ == type(fresh).__module__
    assert int(keras.ops.convert_to_numpy(loaded.optimizer.iterations)) == STEPS
    assert_weights_close(loaded.get_weights(), model.get_weights(), rtol=0, atol=0)
    # The optimizer state (momentum) came back, and the loaded optimizer averages.
    loaded.fit(shard(second), shard(ysecond), batch_size=BATCH // N, epochs=1, shuffle=False,
               verbose=0)
    assert_weights_close(loaded.get_weights(), want)
    assert_same_on_every_rank(loaded.get_weights())


def test_keras_objects_pickle_with_cloudpickle_where_it_is_installed(monkeypatch):
    object_checks.with_cloudpickle(hvd_k.broadcast_object, hvd_k.allgather_object, R, N)
    object_checks.without_cloudpickle(hvd_k.broadcast_object, hvd_k.allgather_object, R, N,
                                      monkeypatch)
