"""Horovod's learning-rate schedule and warmup as numbers: which epochs a schedule covers,
the learning rate before a batch, the warmup's multiplier. A binding's learning-rate
callbacks take it as a base and read and set their optimizer's learning rate
themselves."""


class EpochSchedule:
    """Horovod's ``LearningRateScheduleCallback`` arithmetic: from ``start_epoch`` until
    ``end_epoch`` the learning rate is ``initial_lr * multiplier(epoch)`` (a number ``m``
    means ``m ** (epoch - start_epoch)``), set at the start of each epoch (``staircase``)
    or before each batch with fractional epochs (``steps_per_epoch`` batches an epoch)."""

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 steps_per_epoch=None):
        if initial_lr is None:
            raise ValueError("Parameter `initial_lr` is required")
        self.initial_lr = initial_lr
        self.multiplier = multiplier if callable(multiplier) else \
            (lambda epoch: multiplier ** (epoch - start_epoch))
        self.start_epoch = start_epoch
        self.end_epoch = end_epoch
        self.staircase = staircase
        self.steps_per_epoch = steps_per_epoch

    def learning_rate(self, epoch, batch):
        """The learning rate to set before ``batch`` of ``epoch``, or None where the
        schedule sets none."""
        if epoch < self.start_epoch or (self.end_epoch is not None and epoch >= self.end_epoch):
            return None
        if self.staircase:
            return self.initial_lr * self.multiplier(epoch) if batch == 0 else None
        return self.initial_lr * self.multiplier(epoch + float(batch) / self.steps_per_epoch)

    def find_steps_per_epoch(self, params):
        """Where a schedule by batch has no ``steps_per_epoch``, takes it from the training
        loop's ``params`` (``steps``, or ``samples // batch_size``), as Horovod's."""
        if self.staircase or self.steps_per_epoch:
            return
        if params.get("steps"):
            self.steps_per_epoch = params["steps"]
        elif params.get("samples") and params.get("batch_size"):
            self.steps_per_epoch = params["samples"] // params["batch_size"]
        else:
            raise ValueError("Could not autodetect the number of steps per epoch. Please "
                             "specify the steps_per_epoch parameter to the %s()"
                             % type(self).__name__)


def warmup_multiplier(schedule, size, warmup_epochs):
    """Horovod's gradual warmup (Goyal et al.) as ``schedule``'s multiplier: over
    ``warmup_epochs`` from ``1 / size`` to 1, ``1 / size * (epoch * (size - 1) /
    warmup_epochs + 1)`` at the end of each batch (``size()``: the number of ranks)."""
    def multiplier(epoch):
        epoch += 1.0 / schedule.steps_per_epoch
        return 1.0 / size() * (epoch * (size() - 1) / warmup_epochs + 1)
    return multiplier
