"""Broadcasting variables and Python objects (Horovod's ``horovod.tensorflow.functions``).

In a TF1 graph (``tf.compat.v1``) these build ops, as Horovod's do: the variables'
broadcast is an op to run, and the object functions run their collectives with
``session`` (by default the default session)."""
import numpy as np
import tensorflow as tf

from kolo.common import objects as _objects
from kolo.tensorflow import mpi_ops as _ops
from kolo.tensorflow.mpi_ops import global_process_set


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=True):
    """Makes every rank's ``variables`` equal to global rank ``root_rank``'s, in place (all
    broadcasts in flight together). Returns None eagerly; in a graph (tf.function, TF1)
    the op that assigns them, as Horovod's ``tf.group``."""
    values = _ops.broadcast_(list(variables), root_rank, process_set=process_set)
    return None if tf.executing_eagerly() else tf.group(*values)


def broadcast_global_variables(root_rank):
    """In a TF1 graph: the op that assigns ``root_rank``'s values to every global variable
    (``tf.compat.v1.global_variables()``), as Horovod's. TensorFlow 2 code has no global
    variable collection (as Horovod, which raises for eager execution): broadcast the
    variables themselves."""
    if not tf.compat.v1.executing_eagerly_outside_functions():
        return broadcast_variables(tf.compat.v1.global_variables(), root_rank)
    raise RuntimeError(
        "hvd.broadcast_global_variables() needs TensorFlow 1's global variable collection; "
        "in TensorFlow 2 use hvd.broadcast_variables(model.variables, root_rank=%d) (and the "
        "optimizer's variables), or with Keras hvd.callbacks.BroadcastGlobalVariablesCallback"
        "(%d)" % (root_rank, root_rank))


def _runner(what, session):
    """How the object functions get their collectives' values: eagerly ``.numpy()``; in a
    TF1 graph ``session.run`` (Horovod's: ``session`` or the default session)."""
    if tf.executing_eagerly():
        if session is not None:
            raise ValueError("%s(session=...) is for TF1 graphs; eagerly, pass no session"
                             % what)
        return lambda t: t.numpy()
    if tf.compat.v1.executing_eagerly_outside_functions():
        raise RuntimeError("%s() runs eagerly (or in a TF1 graph with a session), not inside "
                           "tf.function" % what)
    session = session or tf.compat.v1.get_default_session()
    if session is None:
        raise ValueError("%s() in a TF1 graph runs its collectives in a session: pass "
                         "session=, or call it inside `with session.as_default():`" % what)
    return session.run


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=global_process_set):
    """Returns ``obj`` of global rank ``root_rank`` on every rank of the set (pickled with
    cloudpickle where it is installed, else pickle: the size is broadcast first, then the
    bytes). The root gets its own object back; when the root cannot pickle it, every rank
    raises (the others ``pickle.PicklingError`` with the root's error). ``session`` (a TF1
    graph's; default: the default session) runs the collectives there."""
    run = _runner("broadcast_object", session)
    # Not the type's name (Horovod's default): ranks may pass different types, e.g.
    # None where they have no object yet, and differing names would never pair.
    name = "broadcast_object" if name is None else name
    is_root = _ops.rank() == int(root_rank)
    n, payload, error = 0, None, None
    if is_root:
        n, data, error = _objects.encode(obj)
        payload = np.frombuffer(data, np.uint8)
    n = int(run(_ops.broadcast(tf.constant([n], tf.int64), root_rank, name=name + ".sz",
                               process_set=process_set))[0])
    if not is_root:
        payload = np.zeros(abs(n), np.uint8)
    data = run(_ops.broadcast(tf.constant(payload), root_rank, name=name + ".t",
                              process_set=process_set))
    if is_root:
        if error is not None:
            raise error
        return obj
    return _objects.decode(n, data.tobytes(), "broadcast_object", int(root_rank))


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Horovod's factory: a function that broadcasts its argument from ``root_rank``."""
    return lambda obj: broadcast_object(obj, root_rank, session, name, process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every rank's ``obj`` (pickled as by broadcast_object), in rank order of
    the set. ``session``: as for broadcast_object."""
    run = _runner("allgather_object", session)
    # Not the type's name (Horovod's default): ranks may pass different types, e.g.
    # None where they have no object yet, and differing names would never pair.
    name = "allgather_object" if name is None else name
    n, data, error = _objects.encode(obj)
    sizes = run(_ops.allgather(tf.constant([n], tf.int64), name=name + ".sz",
                               process_set=process_set))
    raw = run(_ops.allgather(tf.constant(np.frombuffer(data, np.uint8)), name=name + ".t",
                             process_set=process_set)).tobytes()
    ranks = (process_set.ranks if process_set not in (None, global_process_set)
             else list(range(_ops.size())))
    return _objects.decode_all(sizes.tolist(), raw, "allgather_object", ranks, error)
