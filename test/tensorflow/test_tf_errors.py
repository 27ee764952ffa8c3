"""Errors of kolo.tensorflow: a collective whose ranks disagree (shapes, dtypes, roots) fails
with the same error on every rank and leaves the ranks in step; that error is kolo's
KoloInternalError (Horovod's HorovodInternalError) and TensorFlow's
FailedPreconditionError (what Horovod's TF ops raise); a bad argument found before anything
is sent is a ValueError and TensorFlow's InvalidArgumentError (Horovod's). Inside
tf.function TensorFlow picks the class from the Python base class: InvalidArgumentError
for a bad argument, UnknownError for a failed collective. An unsupported dtype is a
TypeError before anything is sent (Horovod's ops: TF refuses a dtype outside the op's list
with a TypeError); what is no optimizer is refused by DistributedOptimizer with Horovod's
ValueError.
"""
import pytest
import tensorflow as tf

import kolo.tensorflow as hvd
from kolo.tensorflow import op_library

from tf_common import KoloInternalError, N, R, assert_equal


def _in_step():
    assert_equal(hvd.allreduce(tf.ones(2), op=hvd.Sum), [float(N)] * 2)


MISMATCHES = {
    "allreduce_shape": lambda: hvd.allreduce(tf.ones([R + 1]), op=hvd.Sum, name="err.ar"),
    "allreduce_dtype": lambda: hvd.allreduce(tf.ones([2], tf.float32 if R == 0 else
                                                     tf.float64), name="err.dt"),
    "allgather_trailing": lambda: hvd.allgather(tf.ones([1, R + 1]), name="err.ag"),
    "broadcast_shape": lambda: hvd.broadcast(tf.ones([R + 2]), 0, name="err.bc"),
    "reducescatter_shape": lambda: hvd.reducescatter(tf.ones([N * (R + 1)]), op=hvd.Sum,
                                                     name="err.rs"),
    "grouped_allreduce": lambda: hvd.grouped_allreduce([tf.ones([2]), tf.ones([R + 1])],
                                                       op=hvd.Sum, name="err.gar"),
    "broadcast_root": lambda: hvd.broadcast(tf.ones([2]), R, name="err.root"),
}


@pytest.mark.parametrize("which", sorted(MISMATCHES))
def test_mismatch_raises_the_same_error_on_every_rank(which):
    with pytest.raises(KoloInternalError) as err:
        MISMATCHES[which]()
    assert "mismatch" in str(err.value).lower()
    # Horovod's TF ops raise FailedPreconditionError; Horovod code catches either.
    assert isinstance(err.value, tf.errors.FailedPreconditionError)
    assert isinstance(err.value, hvd.HorovodInternalError)
    names = hvd.allgather_object(type(err.value).__name__)
    assert names == [type(err.value).__name__] * N
    _in_step()


BAD_ARGUMENTS = {
    "alltoall_rows_not_divisible": lambda: hvd.alltoall(tf.ones([N + 1])),
    "alltoall_splits_exceed_rows": lambda: hvd.alltoall(tf.ones([N - 1]), splits=[1] * N),
    "alltoall_splits_length": lambda: hvd.alltoall(tf.ones([N]), splits=[N]),
    # truncated, a float split could differ between ranks
    "alltoall_float_splits": lambda: hvd.alltoall(tf.ones([N]), splits=tf.ones([N])),
}


@pytest.mark.parametrize("which", sorted(BAD_ARGUMENTS))
def test_a_bad_argument_is_a_value_error_and_tf_invalid_argument(which):
    with pytest.raises(tf.errors.InvalidArgumentError) as err:
        BAD_ARGUMENTS[which]()
    assert isinstance(err.value, ValueError)
    assert "split" in str(err.value).lower()
    _in_step()


def test_errors_inside_tf_function_are_tensorflow_op_errors():
    # kolo's ops fail as Horovod's: FailedPreconditionError, naming the op. Through
    # tf.numpy_function (KOLO_TF_OPS=0) TensorFlow maps an exception by its Python base
    # class: ValueError -> InvalidArgumentError, anything else -> UnknownError (naming
    # kolo's class).
    mismatch = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum, name="err.fn.shape"))
    if op_library.ops() is not None:
        failed, words = tf.errors.FailedPreconditionError, r"Mismatched .* \(op KoloGrouped"
    else:
        failed, words = tf.errors.UnknownError, "CollectiveFailedError: Mismatched"
    with pytest.raises(failed, match=words):
        mismatch(tf.ones([R + 1]))
    splits = tf.function(lambda x: hvd.alltoall(x, splits=[1] * N))
    with pytest.raises(tf.errors.InvalidArgumentError, match="split"):
        splits(tf.ones([N - 1]))
    _in_step()


def test_error_classes_pickle_with_their_message():
    import pickle
    from kolo.tensorflow.errors import CollectiveArgumentError, CollectiveFailedError
    for cls in (CollectiveFailedError, CollectiveArgumentError):
        e = pickle.loads(pickle.dumps(cls("what went wrong")))
        assert type(e) is cls and str(e) == "what went wrong" and e.message == str(e)


def test_mismatch_inside_tf_function_raises_on_every_rank():
    @tf.function
    def f(x):
        return hvd.allreduce(x, op=hvd.Sum, name="err.fn")

    with pytest.raises((KoloInternalError, tf.errors.OpError)) as err:
        f(tf.ones([R + 1]))
    assert "mismatch" in str(err.value).lower()
    _in_step()


UNSUPPORTED = {
    "complex64": lambda: tf.constant([1 + 2j, 3j], tf.complex64),
    "string": lambda: tf.constant(["a", "b"]),
}
CALLS = {
    "allreduce": lambda t: hvd.allreduce(t, op=hvd.Sum),
    "grouped_allreduce": lambda t: hvd.grouped_allreduce([t], op=hvd.Sum),
    "allgather": lambda t: hvd.allgather(t),
    "grouped_allgather": lambda t: hvd.grouped_allgather([t]),
    "broadcast": lambda t: hvd.broadcast(t, 0),
    "alltoall": lambda t: hvd.alltoall(t),
    "reducescatter": lambda t: hvd.reducescatter(t, op=hvd.Sum),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("dtype", sorted(UNSUPPORTED))
def test_unsupported_dtype_is_a_clear_type_error(dtype, call):
    t = UNSUPPORTED[dtype]()
    t = tf.reshape(tf.tile(t, [N]), [2 * N]) if call in ("alltoall", "reducescatter") else t
    with pytest.raises(TypeError, match=dtype):
        CALLS[call](t)


def test_unsupported_dtype_inside_tf_function_is_a_type_error():
    f = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum))
    with pytest.raises(TypeError, match="complex64"):
        f(tf.constant([1j], tf.complex64))
    _in_step()


def test_something_not_an_optimizer_is_a_value_error():
    # horovod.tensorflow.DistributedOptimizer: "Provided optimizer doesn't inherit from
    # either legacy TensorFlow or Keras optimizer" (ValueError).
    with pytest.raises(ValueError):
        hvd.DistributedOptimizer(object())
    _in_step()
