"""The Keras job of test_elastic_jobs.py: model.fit under kolo.tensorflow.keras's
elastic run with Horovod's three elastic callbacks, as Horovod's
tensorflow2_keras_mnist_elastic.py example does it, on synthetic data.

Environment: ELASTIC_TEST_DIR, ELASTIC_PAUSE_STEP (in generation 0 every rank
stops after that many batches of fit, writes reached.0.<rank> "<pid>
<hostname>" and waits for go.0, which a kill test never writes). Rank 0
prints "START gen=G size=S epoch=E batch=B" after each (re)start; every rank
prints "FINAL rank=R size=S epoch=E checksum=<float.hex>" at the end.
"""
import os
import socket
import sys
import time

import numpy as np
import tensorflow as tf

import kolo.tensorflow.keras as hvd

EPOCHS = 3
STEPS_PER_EPOCH = 6
BATCH = 8


class PauseAt(tf.keras.callbacks.Callback):
    """Generation 0 stops every rank after `step` batches (counted over epochs)."""

    def __init__(self, step, test_dir):
        super().__init__()
        self.step, self.test_dir, self.seen = step, test_dir, 0

    def on_train_batch_end(self, batch, logs=None):
        self.seen += 1
        if self.seen == self.step:
            with open(os.path.join(self.test_dir, f"reached.0.{hvd.rank()}"), "w") as f:
                f.write(f"{os.getpid()} {socket.gethostname()}\n")
            go = os.path.join(self.test_dir, "go.0")
            while not os.path.exists(go):
                time.sleep(0.05)


def main():
    hvd.init()
    generation = int(os.environ.get("KOLO_ELASTIC_GENERATION", "0"))
    pause_step = int(os.environ.get("ELASTIC_PAUSE_STEP", "-1"))
    rng = np.random.default_rng(1234 + hvd.rank())
    x = rng.standard_normal((256, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")).astype("float32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(BATCH)

    model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    optimizer = hvd.DistributedOptimizer(tf.keras.optimizers.SGD(0.01, momentum=0.5))
    model.compile(loss="mse", optimizer=optimizer)
    # Builds the optimizer's variables, so that the state holds them from the start.
    model.fit(dataset, steps_per_epoch=1, epochs=1, verbose=0)

    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=2)]
    if generation == 0 and pause_step > 0:
        callbacks.append(PauseAt(pause_step, os.environ["ELASTIC_TEST_DIR"]))

    @hvd.elastic.run
    def train(state):
        if hvd.rank() == 0:
            print(f"START gen={generation} size={hvd.size()} epoch={state.epoch} "
                  f"batch={state.batch}", flush=True)
        state.model.fit(dataset, steps_per_epoch=STEPS_PER_EPOCH, epochs=EPOCHS - state.epoch,
                        callbacks=callbacks, verbose=0)

    train(state)
    checksum = float(sum(np.sum(w.astype("float64")) for w in model.get_weights()))
    print(f"FINAL rank={hvd.rank()} size={hvd.size()} epoch={state.epoch} "
          f"checksum={checksum.hex()}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
