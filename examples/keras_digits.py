"""Data-parallel Keras training on scikit-learn's bundled digits data set with kolo.

    kolorun -np 2 .venv/bin/python examples/keras_digits.py

Horovod's Keras pattern (its examples/tensorflow2/tensorflow2_keras_mnist.py), with
`import kolo.tensorflow.keras as hvd` in place of `import horovod.tensorflow.keras as hvd`:
every rank trains on its own shard of the training set, DistributedOptimizer averages the
gradients, the learning rate is scaled by the number of ranks (warmed up to it over the
first epochs), initial weights come from rank 0, and only rank 0 logs and writes
checkpoints. Prints the test accuracy at the end.
"""
import argparse
import os
import tempfile

import numpy as np
import tensorflow as tf
import keras
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import kolo.tensorflow.keras as hvd


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05, help="for one rank; scaled by size")
    parser.add_argument("--warmup-epochs", type=int, default=3)
    parser.add_argument("--jit-compile", action="store_true",
                        help="compile the training step with XLA (model.compile(jit_compile=True))")
    parser.add_argument("--checkpoint", help="rank 0 saves the model here after every epoch "
                        "(a .keras file; default: in a temporary directory)")
    args = parser.parse_args()

    hvd.init()
    # Two ranks share the cores: one TF thread each, as examples/pytorch_digits.py does.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    # Different on purpose: the broadcast from rank 0 makes the initial weights equal.
    keras.utils.set_random_seed(1234 + hvd.rank())

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0,
                                                        stratify=y)
    # Each rank takes every size-th sample of the training set.
    x_shard, y_shard = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]
    dataset = (tf.data.Dataset.from_tensor_slices((x_shard, y_shard))
               .repeat().shuffle(len(x_shard), seed=hvd.rank()).batch(args.batch_size))

    model = keras.Sequential([keras.Input(shape=(64,)),
                              keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10)])

    # Horovod: scale the learning rate by the number of ranks, and wrap the optimizer so
    # that gradients are averaged over all ranks before they are applied.
    scaled_lr = args.lr * hvd.size()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(learning_rate=scaled_lr, momentum=0.9))
    model.compile(optimizer=opt, metrics=["accuracy"], jit_compile=args.jit_compile,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    callbacks = [
        # Horovod: every rank starts from rank 0's weights (and optimizer state).
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Horovod: the logged loss and accuracy are averaged over the ranks. Keep it before
        # callbacks that read metrics (ReduceLROnPlateau, TensorBoard, ModelCheckpoint).
        hvd.callbacks.MetricAverageCallback(),
        # Horovod: start at the single-rank learning rate, reach lr * size after a few
        # epochs (Goyal et al., https://arxiv.org/abs/1706.02677), with the momentum
        # corrected for each change of the learning rate.
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr,
                                                 warmup_epochs=args.warmup_epochs),
    ]
    # Horovod: checkpoints only on rank 0, so that the ranks do not overwrite each other's.
    checkpoint = args.checkpoint or os.path.join(tempfile.mkdtemp(prefix="kolo_digits_"),
                                                 "digits.keras")
    if hvd.rank() == 0:
        callbacks.append(keras.callbacks.ModelCheckpoint(checkpoint))

    # Horovod: one epoch is one pass over the whole training set by all ranks together.
    steps_per_epoch = len(x_train) // args.batch_size // hvd.size()
    model.fit(dataset, steps_per_epoch=steps_per_epoch, epochs=args.epochs, callbacks=callbacks,
              shuffle=False,  # the dataset shuffles itself
              verbose=1 if hvd.rank() == 0 else 0)

    # Every rank holds the same weights; rank 0 reports.
    _, accuracy = model.evaluate(x_test, y_test, batch_size=256, verbose=0)
    if hvd.rank() == 0:
        print("ranks: %d  test accuracy: %.4f  checkpoint: %s" % (
            hvd.size(), accuracy, os.path.abspath(checkpoint)), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
