"""Horovod's elastic training for TensorFlow 2 (``horovod.tensorflow.elastic``): ``run``,
``TensorFlowKerasState`` (a Keras model and its optimizer), ``TensorFlowState`` (a list
of variables). kolo.common.elastic has how commits, restarts and the resume work
(docs/elastic.md). Eager execution (TensorFlow 2) only: kolo has no TF1-session
variant."""
import tensorflow as tf

from kolo.common.elastic import ObjectState, run_fn
from kolo.common.exceptions import KoloInternalError
from kolo.tensorflow import mpi_ops as _ops
from kolo.tensorflow.functions import broadcast_object


def run(func):
    """Decorator of an elastic training function ``func(state, *args, **kwargs)``
    (kolo.torch.elastic.run has the details). A collective that failed inside a
    ``tf.function`` reaches Python as TensorFlow's UnknownError; it is raised as
    KoloInternalError (Horovod's HorovodInternalError) so that elastic kolorun restarts
    the job."""
    def wrapper(state, *args, **kwargs):
        try:
            return func(state, *args, **kwargs)
        except tf.errors.UnknownError as e:
            if any(word in (e.message or "") for word in _KOLO_ERRORS):
                raise KoloInternalError(e.message) from e
            raise
    wrapper.__name__ = getattr(func, "__name__", "wrapper")
    wrapper.__doc__ = getattr(func, "__doc__", None)
    return run_fn(wrapper)


# The names that a failed collective's error carries through tf.numpy_function.
_KOLO_ERRORS = ("CollectiveFailedError", "KoloInternalError", "HorovodInternalError")


def _require_eager(what):
    if not tf.executing_eagerly():
        raise NotImplementedError(
            "%s needs eager execution (TensorFlow 2); kolo has no TF1-session variant of "
            "Horovod's elastic states" % what)


class _VariablesState(ObjectState):
    """What both states share: a list of variables (``self._variables()``), committed
    as NumPy arrays and synced by one broadcast of all of them."""

    def _variables(self):
        raise NotImplementedError()

    def sync(self):
        _ops.broadcast_(list(self._variables()), self._sync_root,
                        name="elastic.%s.sync" % type(self).__name__)
        super().sync()

    def _snapshot(self):
        tree = super()._snapshot()
        tree["variables"] = [v.numpy() for v in self._variables()]
        return tree

    def _load_snapshot(self, tree):
        variables = list(self._variables())
        if len(variables) != len(tree["variables"]):
            raise ValueError("the commit has %d variables, this state %d: the model or "
                             "optimizer is not the one that was committed"
                             % (len(tree["variables"]), len(variables)))
        for var, value in zip(variables, tree["variables"]):
            var.assign(value)
        super()._load_snapshot(tree)


class TensorFlowKerasState(_VariablesState):
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
        self.model = model
        if not getattr(model, "built", True):
            raise ValueError("Model must be built first. Run `model.build(input_shape)`.")
        self.optimizer = optimizer or model.optimizer
        self.backend = backend
        if self.optimizer is not None and not getattr(self.optimizer, "built", True):
            self.optimizer.build(model.trainable_variables)
        super().__init__(bcast_object=broadcast_object, get_rank=_ops.rank, **kwargs)
        self._write_commit(-1)  # what restore() returns to before a commit

    def _variables(self):
        variables = list(self.model.variables)
        if self.optimizer is not None:
            optimizer_variables = self.optimizer.variables
            variables += list(optimizer_variables() if callable(optimizer_variables)
                              else optimizer_variables)
        return variables


class TensorFlowState(_VariablesState):
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
        self.variables = list(variables)
        self.session = None
        super().__init__(bcast_object=broadcast_object, get_rank=_ops.rank, **kwargs)
        self._write_commit(-1)

    def _variables(self):
        return self.variables


__all__ = ["TensorFlowKerasState", "TensorFlowState", "run"]
