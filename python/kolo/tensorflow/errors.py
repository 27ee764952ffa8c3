"""kolo's errors as TensorFlow's: Horovod's TensorFlow ops raise
``tf.errors.FailedPreconditionError`` when a collective fails (ranks sent different shapes,
dtypes or roots) and ``tf.errors.InvalidArgumentError`` for a bad argument (splits that do
not fit, a rank outside the process set). kolo's runtime raises ``KoloInternalError`` and
``ValueError``; kolo.tensorflow raises classes that are both, so that ``except
tf.errors.FailedPreconditionError`` and ``except hvd.HorovodInternalError`` both catch a
failed collective.

Inside ``tf.function`` and a TF1 graph a collective runs in a ``tf.numpy_function``, and
TensorFlow picks the error class from the Python base class alone: a ValueError becomes
``InvalidArgumentError``, anything else ``UnknownError`` (whose message carries kolo's).
"""
import tensorflow as tf

from kolo.common.collectives import KoloInternalError


class _MessageOnly:
    """TensorFlow's OpError takes (node_def, op, message); kolo's errors take the message
    only, as the exceptions they stand for do, and pickle as such."""
    _tf_class = None

    def __init__(self, message):
        self._tf_class.__init__(self, None, None, message)
        self.args = (message,)

    def __reduce__(self):
        return type(self), (self.message,)


class CollectiveFailedError(_MessageOnly, KoloInternalError, tf.errors.FailedPreconditionError):
    """A collective that failed on every rank (ranks disagreed, a stall, kolo shut down):
    kolo's KoloInternalError (Horovod's HorovodInternalError) and TensorFlow's
    FailedPreconditionError, which Horovod's TensorFlow ops raise."""
    _tf_class = tf.errors.FailedPreconditionError


class CollectiveArgumentError(_MessageOnly, ValueError, tf.errors.InvalidArgumentError):
    """A bad argument that the runtime finds on this rank before anything is sent: a
    ValueError (kolo's eager error) and TensorFlow's InvalidArgumentError (Horovod's)."""
    _tf_class = tf.errors.InvalidArgumentError


def raising_tf_errors(fn, *args):
    """``fn(*args)``, raising the runtime's KoloInternalError and ValueError as the classes
    above (a plain try: nothing to pay on the way through)."""
    try:
        return fn(*args)
    except tf.errors.OpError:
        raise
    except KoloInternalError as e:
        raise CollectiveFailedError(str(e)) from None
    except ValueError as e:
        raise CollectiveArgumentError(str(e)) from None
