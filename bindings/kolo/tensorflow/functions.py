"""Broadcasting variables and Python objects (Horovod's ``horovod.tensorflow.functions``)."""
import pickle

import numpy as np
import tensorflow as tf

from kolo.tensorflow import mpi_ops as _ops
from kolo.tensorflow.mpi_ops import global_process_set


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=True):
    """Makes every rank's ``variables`` equal to global rank ``root_rank``'s, in place (all
    broadcasts in flight together). Returns None eagerly, the new values in a graph."""
    values = _ops.broadcast_(list(variables), root_rank, process_set=process_set)
    return None if tf.executing_eagerly() else values


def _eager(what):
    if not tf.executing_eagerly():
        raise RuntimeError("%s() runs eagerly, not inside tf.function" % what)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns ``obj`` of global rank ``root_rank`` on every rank of the set (pickled: the
    size is broadcast first, then the bytes). The root gets its own object back. ``session``
    (TensorFlow 1) is accepted and must be None."""
    _eager("broadcast_object")
    if session is not None:
        raise ValueError("broadcast_object(session=...) is TensorFlow 1 only; kolo runs eagerly")
    # Not the type's name (Horovod's default): ranks may pass different types, e.g.
    # None where they have no object yet, and differing names would never pair.
    name = "broadcast_object" if name is None else name
    is_root = _ops.rank() == int(root_rank)
    payload = np.frombuffer(pickle.dumps(obj), np.uint8) if is_root else None
    size = _ops.broadcast(tf.constant([payload.size if is_root else 0], tf.int64), root_rank,
                          name=name + ".sz", process_set=process_set)
    if not is_root:
        payload = np.zeros(int(size.numpy()[0]), np.uint8)
    data = _ops.broadcast(tf.constant(payload), root_rank, name=name + ".t",
                          process_set=process_set)
    return obj if is_root else pickle.loads(data.numpy().tobytes())


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Horovod's factory: a function that broadcasts its argument from ``root_rank``."""
    return lambda obj: broadcast_object(obj, root_rank, session, name, process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every rank's ``obj`` (pickled), in rank order of the set."""
    _eager("allgather_object")
    if session is not None:
        raise ValueError("allgather_object(session=...) is TensorFlow 1 only; kolo runs eagerly")
    # Not the type's name (Horovod's default): ranks may pass different types, e.g.
    # None where they have no object yet, and differing names would never pair.
    name = "allgather_object" if name is None else name
    data = np.frombuffer(pickle.dumps(obj), np.uint8)
    sizes = _ops.allgather(tf.constant([data.size], tf.int64), name=name + ".sz",
                           process_set=process_set).numpy()
    raw = _ops.allgather(tf.constant(data), name=name + ".t",
                         process_set=process_set).numpy().tobytes()
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(raw[offset:offset + n]))
        offset += n
    return out
