"""Keras elastic training across ranks under plain kolorun (-np 2 or more): a
TensorFlowKerasState (KerasState) with Horovod's callbacks under ``model.fit`` inside
``hvd.elastic.run``: commits at the right batches, state.batch / state.epoch kept,
restore returns model and optimizer to the last commit; the agreement at the start of an
elastic incarnation loads a Keras commit of another rank; TensorFlowState of plain
variables. Every rank runs every test in the same order."""
import os
import shutil
import uuid

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

import kolo.tensorflow.keras as hvd  # noqa: E402
from kolo.common import elastic as common_elastic  # noqa: E402
from kolo.common import elastic_env  # noqa: E402
from kolo.common import elastic_store as store  # noqa: E402
from kolo.tensorflow.elastic import TensorFlowState  # noqa: E402

tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
hvd.init()
R, N = hvd.rank(), hvd.size()


def make_model(value=None):
    keras.utils.set_random_seed(R)  # different weights on every rank until synced
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3),
                              keras.layers.Dense(1)])
    if value is not None:
        model.set_weights([np.full(w.shape, value, w.dtype) for w in model.get_weights()])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.01, momentum=0.9))
    model.compile(optimizer=opt, loss="mse")
    return model


def same_on_every_rank(arrays):
    gathered = hvd.allgather_object([a.tolist() for a in arrays])
    return all(g == gathered[0] for g in gathered)


class CommitCounter(keras.callbacks.Callback):
    def __init__(self, state):
        super().__init__()
        self.state, self.at = state, []

    def on_batch_end(self, batch, logs=None):
        self.at.append((self.state.epoch, batch, self.state._commit))


def test_keras_state_and_callbacks_under_model_fit():
    model = make_model()
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    counter = CommitCounter(state)
    # The updates before the commit, so that each commit holds the batch and epoch just
    # finished (Horovod's docs list CommitStateCallback first: its epoch-end commit then
    # holds the epoch before).
    callbacks = [hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=2), counter]
    x = np.arange(48, dtype=np.float32).reshape(12, 4) / 48
    y = x.sum(axis=1, keepdims=True)

    @hvd.elastic.run
    def train(state):
        model.fit(x, y, batch_size=2, epochs=3 - state.epoch, callbacks=callbacks,
                  verbose=0, shuffle=False)
        return state.epoch, state.batch

    assert train(state) == (3, 0)
    # 6 batches per epoch: commits after batches 1, 3, 5 and at each epoch's end.
    assert [c for e, b, c in counter.at if e == 0] == [-1, 0, 0, 1, 1, 2]
    assert state._commit == 3 * 4 - 1
    assert same_on_every_rank(model.get_weights()), "rank %d: weights differ" % R
    committed = [w.copy() for w in model.get_weights()]
    iterations = int(model.optimizer.iterations.numpy())
    assert iterations == 18
    model.fit(x, y, batch_size=2, epochs=1, verbose=0)
    state.epoch = 7
    state.restore()
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), committed))
    assert int(model.optimizer.iterations.numpy()) == iterations and state.epoch == 3


def test_restore_after_sync_returns_to_the_synced_state_on_every_rank():
    # Horovod's test_elastic_state: a restore before the first commit after a sync must
    # not bring a rank back to its own values from before the sync.
    model = make_model(float(R + 1))
    model.optimizer.build(model.trainable_variables)
    state = hvd.elastic.KerasState(model, batch=20 + R)
    v = tf.Variable(np.full(3, float(R)), dtype=tf.float64)
    variables = TensorFlowState([v], step=R)
    state.sync()
    variables.sync()
    model.set_weights([np.full(w.shape, 7.0, w.dtype) for w in model.get_weights()])
    v.assign(np.full(3, 7.0))
    state.batch, variables.step = 99, 99
    state.restore()
    variables.restore()
    assert all(np.all(w == 1.0) for w in model.get_weights()), "rank %d" % R
    assert v.numpy().tolist() == [0.0] * 3 and state.batch == 20 and variables.step == 0


def test_tensorflow_state_of_variables():
    v = tf.Variable(np.full(3, float(R)), dtype=tf.float64)
    state = TensorFlowState([v], step=R)
    state.sync()
    assert v.numpy().tolist() == [0.0] * 3 and state.step == 0
    v.assign_add(np.ones(3))
    state.commit()
    v.assign(np.zeros(3))
    state.restore()
    assert v.numpy().tolist() == [1.0] * 3


@pytest.fixture
def host():
    base = hvd.broadcast_object("/tmp/kolo-elastic-test-" + uuid.uuid4().hex, 0)
    job = hvd.broadcast_object(uuid.uuid4().hex, 0)
    mine = os.path.join(base, "host%d" % R)
    yield elastic_env.ElasticEnv(job, 1, ("127.0.0.1", 1), "t", mine)
    hvd.allgather_object(None)  # every rank is done with the files
    shutil.rmtree(mine, ignore_errors=True)
    if R == 0:
        shutil.rmtree(base, ignore_errors=True)


def test_a_keras_commit_is_resumed_from_the_rank_that_holds_the_newest(host):
    if R == N - 1:  # as an earlier incarnation on this rank's host left it
        old = hvd.elastic.KerasState(make_model(5.0), epoch=4)
        old._store.attach(store.job_directory(host.directory, host.job), 0, R)
        old._write_commit(6)
    model = make_model()
    state = hvd.elastic.KerasState(model, epoch=0)
    assert common_elastic._resume(host, state) == 6
    assert state.epoch == 4
    assert all(np.all(w == 5.0) for w in model.get_weights()), "rank %d" % R
    state._store.close(remove=True)
