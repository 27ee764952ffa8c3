"""Horovod's elastic training for TensorFlow 2 (``horovod.tensorflow.elastic``): ``run``,
``TensorFlowKerasState`` (a Keras model and its optimizer), ``TensorFlowState`` (a list
of variables). kolo.common.elastic has how commits, restarts and the resume work
(docs/elastic.md). Eager execution (TensorFlow 2) only: kolo has no TF1-session
variant."""
import functools

import tensorflow as tf

from kolo.common.elastic import HandlerState, StateHandler, run_fn
from kolo.common.exceptions import KoloInternalError
from kolo.tensorflow import mpi_ops as _ops
from kolo.tensorflow.functions import broadcast_object


def run(func):
    """Decorator of an elastic training function ``func(state, *args, **kwargs)``
    (kolo.torch.elastic.run has the details). A collective that failed inside a
    ``tf.function`` reaches Python as TensorFlow's FailedPreconditionError (kolo's ops;
    InternalError inside XLA) or UnknownError (tf.numpy_function); it is raised as
    KoloInternalError (Horovod's HorovodInternalError) so that elastic kolorun restarts
    the job."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except (tf.errors.UnknownError, tf.errors.FailedPreconditionError,
                tf.errors.InternalError) as e:
            if any(word in (e.message or "") for word in _KOLO_ERRORS):
                raise KoloInternalError(e.message) from e
            raise
    return run_fn(wrapper)


# What a failed collective's error carries out of a tf.function: the class names through
# tf.numpy_function, the op's type ("(op KoloGroupedAllreduce)") from kolo's ops.
_KOLO_ERRORS = ("CollectiveFailedError", "KoloInternalError", "HorovodInternalError",
                "(op Kolo")


def _require_eager(what):
    if not tf.executing_eagerly():
        raise NotImplementedError(
            "%s needs eager execution (TensorFlow 2); kolo has no TF1-session variant of "
            "Horovod's elastic states" % what)


class _Variables(StateHandler):
    """TensorFlow variables as a state's object: committed as NumPy arrays, loaded by
    ``assign``, synced by one broadcast of all of them (named ``elastic.sync.<name>``).
    ``variables(value)``: the variables of ``value`` (a list, a model, an optimizer)."""

    def __init__(self, value, name, variables=list):
        super().__init__(value)
        self.name, self._variables_of = name, variables

    def variables(self):
        return list(self._variables_of(self.value))

    def snapshot(self):
        return [v.numpy() for v in self.variables()]

    def load(self, snapshot):
        variables = self.variables()
        if len(variables) != len(snapshot):
            raise ValueError("the commit's %s has %d variables, this state's %d: it is not "
                             "the one that was committed" % (self.name, len(snapshot),
                                                             len(variables)))
        for var, value in zip(variables, snapshot):
            var.assign(value)

    def sync(self, root_rank):
        _ops.broadcast_(self.variables(), root_rank, name="elastic.sync." + self.name)


def _optimizer_variables(optimizer):
    variables = optimizer.variables  # Keras 3: a list; tf.keras 2: a method
    return variables() if callable(variables) else variables


class TensorFlowKerasState(HandlerState):
    """State of a Keras model and its optimizer (Horovod's ``TensorFlowKerasState``).

    Args:
        model: a built Keras model.
        optimizer: its optimizer (default: ``model.optimizer``); built now if it is not
            yet, so that every rank has the same optimizer variables to commit and sync.
        backend: accepted for Horovod's signature (TF1 sessions); not used.
        kwargs: more attributes, kept as plain objects.
    """

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        _require_eager(type(self).__name__)
        if not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        optimizer = optimizer or model.optimizer
        self.backend = backend
        handlers = {"model": _Variables(model, "model", lambda m: m.variables)}
        if optimizer is None:
            self.optimizer = None
        else:
            if not getattr(optimizer, "built", True):
                optimizer.build(model.trainable_variables)
            handlers["optimizer"] = _Variables(optimizer, "optimizer", _optimizer_variables)
        super().__init__(handlers, bcast_object=broadcast_object, get_rank=_ops.rank, **kwargs)


class TensorFlowState(HandlerState):
    """State of a list of TensorFlow variables (Horovod's ``TensorFlowState``).

    Args:
        variables: the ``tf.Variable`` objects to keep.
        session: accepted for Horovod's signature (TF1 sessions); must be None.
        kwargs: more attributes, kept as plain objects.
    """

    def __init__(self, variables=None, session=None, **kwargs):
        _require_eager(type(self).__name__)
        if variables is None or session is not None:
            raise ValueError("TensorFlowState(variables=[...]) with TensorFlow 2: kolo has "
                             "no TF1 global variables or sessions here")
        self.session = None
        super().__init__({"variables": _Variables(list(variables), "variables")},
                         bcast_object=broadcast_object, get_rank=_ops.rank, **kwargs)


__all__ = ["TensorFlowKerasState", "TensorFlowState", "run"]
