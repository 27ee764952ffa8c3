"""Horovod's Keras callbacks (``horovod.tensorflow.keras.callbacks``) for Keras 3."""
import warnings

import keras
import tensorflow as tf

from kolo.common.gradient_groups import LocalVariables
from kolo.common.lr_schedule import EpochSchedule, warmup_multiplier
from kolo.common.metrics import average_metrics_in_place
from kolo.tensorflow import mpi_ops as _ops
from kolo.tensorflow.errors import raising_tf_errors
from kolo.tensorflow.keras import momentum_correction as _momentum_correction


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Makes the model's and the optimizer's variables equal to global rank
    ``root_rank``'s. Horovod does it after the first batch; kolo does it when training
    begins (building the optimizer then), so that the first step starts from equal
    weights, and after the first batch for a model that only that batch builds.
    ``local_variables`` (and variables passed to ``register_local_var``) keep each rank's
    values, as Horovod's; the optimizer's variables are all broadcast, as Horovod's."""

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        self._local = LocalVariables()
        if local_variables is None:
            local_variables = []
        elif _is_variable(local_variables):
            local_variables = [local_variables]
        if not all(_is_variable(v) for v in local_variables):
            raise ValueError("All local variables must be of tf.Variable type (or Keras "
                             "variables).")
        for v in local_variables:
            self.register_local_var(v)

    def register_local_var(self, var):
        """Horovod's: ``var`` keeps this rank's value (it is not broadcast)."""
        self._local.add(var)

    def _broadcast(self):
        variables = [v for v in self.model.variables if v not in self._local]
        if self.model.optimizer is not None:
            variables += list(self.model.optimizer.variables)
        _ops.broadcast_(variables, self.root_rank, name="BroadcastGlobalVariablesCallback")
        self.broadcast_done = True

    def on_train_begin(self, logs=None):
        if self.broadcast_done or not self.model.built:
            return
        optimizer = self.model.optimizer
        if optimizer is not None and not optimizer.built:
            optimizer.build(self.model.trainable_variables)
        self._broadcast()

    def on_batch_end(self, batch, logs=None):
        if not self.broadcast_done:
            self._broadcast()


def _is_variable(v):
    return isinstance(v, (tf.Variable, keras.Variable))


class MetricAverageCallback(keras.callbacks.Callback):
    """At the end of every epoch, replaces each entry of the logs by its average over the
    ranks (kolo.common.metrics.average_metrics_in_place, as Horovod's). Put it before the
    callbacks that read the metrics (ReduceLROnPlateau, ModelCheckpoint, ...)."""

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        raising_tf_errors(average_metrics_in_place, logs, "MetricAverageCallback")


def _learning_rate(optimizer):
    """The optimizer's current learning rate (a float); ValueError when it is a schedule,
    which the callbacks cannot set."""
    lr = getattr(optimizer, "_learning_rate", None)
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule) or callable(lr):
        raise ValueError("learning-rate callbacks set the optimizer's learning rate, but it is "
                         "a LearningRateSchedule; use a constant learning rate")
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


class LearningRateScheduleCallback(EpochSchedule, keras.callbacks.Callback):
    """Horovod's schedule (kolo.common.lr_schedule.EpochSchedule): from ``start_epoch``
    until ``end_epoch`` the learning rate is ``initial_lr * multiplier(epoch)`` (a number
    ``m`` means ``m ** (epoch - start_epoch)``), set at the start of each epoch
    (``staircase``) or each batch with fractional epochs. ``momentum_correction``: for the
    batch whose learning rate changed, the step Horovod's momentum ``momentum * new_lr /
    old_lr`` gives; on Keras 3's SGD and RMSprop, whose compiled step reads momentum as a
    constant, through their momentum buffers (kolo.tensorflow.keras.momentum_correction).
    Another optimizer that keeps momentum as a number is not corrected, with a warning."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        keras.callbacks.Callback.__init__(self)
        EpochSchedule.__init__(self, initial_lr, multiplier, start_epoch, end_epoch, staircase,
                               steps_per_epoch)
        self.momentum_correction = momentum_correction
        self.current_epoch = None
        self.restore_momentum = None
        self._warned_momentum = False
        self._buffers = None  # the momentum correction of the optimizer last seen

    def _adjust_learning_rate(self, new_lr):
        optimizer = self.model.optimizer
        old_lr = _learning_rate(optimizer)
        optimizer.learning_rate = new_lr
        momentum = getattr(optimizer, "momentum", None)
        if not self.momentum_correction or not momentum or old_lr == 0:
            return
        if hasattr(momentum, "assign"):  # a variable: Horovod's way
            self.restore_momentum = float(keras.ops.convert_to_numpy(momentum))
            momentum.assign(self.restore_momentum * new_lr / old_lr)
            return
        if self._buffers is None or self._buffers.optimizer is not optimizer:
            self._buffers = _momentum_correction.for_optimizer(
                optimizer, self.model.trainable_variables)
        if self._buffers is not None:
            self._buffers.begin(new_lr / old_lr)
        elif not self._warned_momentum:
            self._warned_momentum = True
            warnings.warn("%s: momentum correction skipped: %s keeps momentum as a constant "
                          "and kolo corrects only SGD and RMSprop through their momentum "
                          "buffers (pass momentum_correction=False to silence this)"
                          % (type(self).__name__, type(optimizer).__name__))

    def on_train_begin(self, logs=None):
        self.find_steps_per_epoch(self.params)

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        new_lr = self.learning_rate(self.current_epoch, batch)
        if new_lr is not None:
            self._adjust_learning_rate(new_lr)

    def on_batch_end(self, batch, logs=None):
        if self.restore_momentum is not None:
            self.model.optimizer.momentum.assign(self.restore_momentum)
            self.restore_momentum = None
        if self._buffers is not None:
            self._buffers.end()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _learning_rate(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Horovod's gradual warmup (Goyal et al.; kolo.common.lr_schedule.warmup_multiplier):
    over ``warmup_epochs`` the learning rate grows from ``initial_lr / size`` to
    ``initial_lr``, batch by batch."""

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True,
                 steps_per_epoch=None, verbose=0):
        super().__init__(initial_lr, warmup_multiplier(self, _ops.size, warmup_epochs),
                         start_epoch=0, end_epoch=warmup_epochs, staircase=False,
                         momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0 and _ops.rank() == 0:
            print("\nEpoch %d: finished gradual learning rate warmup to %g."
                  % (epoch + 1, _learning_rate(self.model.optimizer)))


class BestModelCheckpoint(keras.callbacks.ModelCheckpoint):
    """Horovod's: a ``keras.callbacks.ModelCheckpoint`` that keeps only the best model
    (``save_best_only=True``) and whose ``filepath`` is set after it is made (Horovod's
    Spark estimator sets it); until then it is None, and training refuses to start.
    Keras 3 checks the path's extension when the callback is made, so it is made with a
    stand-in path that ``filepath`` then replaces."""

    def __init__(self, monitor="val_loss", verbose=0, save_weights_only=False, mode="auto",
                 save_freq="epoch"):
        super().__init__(filepath="best.weights.h5" if save_weights_only else "best.keras",
                         monitor=monitor, verbose=verbose, save_best_only=True,
                         save_weights_only=save_weights_only, mode=mode, save_freq=save_freq)
        self.filepath = None

    def _check_filepath(self):
        if self.filepath is None:
            raise ValueError(
                "BestModelCheckpoint has no filepath: set its filepath attribute (a path "
                "ending in .keras, or .weights.h5 with save_weights_only=True) before training")

    def on_train_begin(self, logs=None):
        self._check_filepath()
        super().on_train_begin(logs)

    def _get_file_path(self, epoch, batch, logs):
        self._check_filepath()
        return super()._get_file_path(epoch, batch, logs)
