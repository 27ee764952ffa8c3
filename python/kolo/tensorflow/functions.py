"""Broadcasting variables and Python objects (Horovod's ``horovod.tensorflow.functions``).

The object functions are kolo.common.objects'. In a TF1 graph (``tf.compat.v1``) these
build ops, as Horovod's do: the variables' broadcast is an op to run, and the object
functions run their collectives with ``session`` (by default the default session)."""
import tensorflow as tf

from kolo.common import objects as _objects
from kolo.tensorflow import mpi_ops as _ops
from kolo.tensorflow.errors import raising_tf_errors as _raising_tf_errors
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


def _session_run(what, session):
    """How the object functions run their collectives: None eagerly (kolo.common.objects
    runs them); in a TF1 graph ``session.run`` (Horovod's: ``session`` or the default
    session) on the ops they build."""
    if tf.executing_eagerly():
        if session is not None:
            raise ValueError("%s(session=...) is for TF1 graphs; eagerly, pass no session"
                             % what)
        return None
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
    run = _session_run("broadcast_object", session)
    _ops._set_id(process_set)  # a removed set is refused in kolo.tensorflow's words
    broadcast = None if run is None else lambda array, part: run(_ops.broadcast(
        tf.constant(array), root_rank, name=part, process_set=process_set))
    # Not the type's name (Horovod's default): ranks may pass different types, e.g.
    # None where they have no object yet, and differing names would never pair.
    return _raising_tf_errors(_objects.broadcast_object, obj, root_rank,
                              "broadcast_object" if name is None else name, process_set,
                              broadcast)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """Horovod's factory: a function that broadcasts its argument from ``root_rank``."""
    return lambda obj: broadcast_object(obj, root_rank, session, name, process_set)


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """The list of every rank's ``obj`` (pickled as by broadcast_object), in rank order of
    the set. ``session``: as for broadcast_object."""
    run = _session_run("allgather_object", session)
    _ops._set_id(process_set)
    allgather = None if run is None else lambda array, part: run(_ops.allgather(
        tf.constant(array), name=part, process_set=process_set))
    return _raising_tf_errors(_objects.allgather_object, obj,
                              "allgather_object" if name is None else name, process_set,
                              allgather)
