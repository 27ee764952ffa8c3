"""``broadcast_object`` and ``allgather_object`` for every binding that has them: objects
become bytes, the bytes travel as NumPy arrays (whatever the binding's tensors are, so the
same call pairs on every rank), and come back as objects.

Objects are pickled with cloudpickle where it is installed, as Horovod's torch and
TensorFlow bindings do: lambdas, and classes and functions defined inside a function or
in ``__main__``, travel by value. Without cloudpickle the standard pickle is used, which
writes such objects by reference only. Either way the bytes load with ``pickle.loads``
(cloudpickle's output is standard pickle; an object it wrote by value needs cloudpickle
installed where it is loaded).

A rank that cannot pickle its object still takes part: it sends the error's text under a
negative size, so that every rank raises instead of waiting for bytes that never come
(Horovod's ranks wait for them forever).
"""
import pickle

import numpy as np

from kolo.common import engine
from kolo.common.host import COLLECTIVES
from kolo.common.names import part_name
from kolo.common.process_sets import _set_id, global_process_set


def _cloudpickle():
    """The cloudpickle module, or None where it is not installed (looked up at every call,
    which costs a dictionary lookup once it is imported)."""
    try:
        import cloudpickle
    except ImportError:
        return None
    return cloudpickle


def dumps(obj):
    """``obj`` pickled: with cloudpickle where it is installed, else with pickle."""
    module = _cloudpickle()
    return module.dumps(obj) if module is not None else pickle.dumps(obj)


def encode(obj):
    """``(size, data, error)`` for sending ``obj``: its pickle and the pickle's length, or,
    when it cannot be pickled, the error's text with the text's length negated, and the
    error itself for this rank to raise once the others have the text."""
    try:
        data = dumps(obj)
    except Exception as e:  # whatever the object's __reduce__ raises
        text = ("%s: %s" % (type(e).__name__, e)).encode("utf-8", "replace")
        return -len(text), text, e
    return len(data), data, None


def decode(size, data, what, rank):
    """The object that global rank ``rank`` sent as ``(size, data)`` (``encode``); raises
    ``pickle.PicklingError`` naming the rank and its error when it could not pickle it."""
    if size < 0:
        raise pickle.PicklingError(
            "%s: rank %d could not pickle its object (%s)"
            % (what, rank, bytes(data).decode("utf-8", "replace")))
    return pickle.loads(data)


def decode_all(sizes, raw, what, ranks, own_error=None):
    """The objects of an allgather: ``sizes`` (one per rank, in order) and the bytes
    ``raw`` one after the other. A rank that could not pickle its own object raises
    ``own_error``; the others raise ``pickle.PicklingError`` naming every rank that could
    not."""
    pieces, offset = [], 0
    for n in sizes:
        pieces.append((n, raw[offset:offset + abs(n)]))
        offset += abs(n)
    failed = [(r, bytes(d).decode("utf-8", "replace"))
              for r, (n, d) in zip(ranks, pieces) if n < 0]
    if own_error is not None:
        raise own_error
    if failed:
        raise pickle.PicklingError("%s: %s could not pickle %s object (%s)" % (
            what, ("rank " if len(failed) == 1 else "ranks ") + ", ".join(
                str(r) for r, _ in failed), "its" if len(failed) == 1 else "their",
            "; ".join("rank %d: %s" % f for f in failed)))
    return [pickle.loads(d) for _, d in pieces]


def _host_broadcast(root_rank, process_set):
    """Global rank ``root_rank``'s NumPy array, broadcast in place by kolo.common.host."""
    def broadcast(array, name):
        COLLECTIVES.now(COLLECTIVES.start_broadcast(array, root_rank, name, process_set,
                                                    in_place=True, caller_waits=True))
        return array
    return broadcast


def _host_allgather(process_set):
    """Every rank's NumPy array concatenated, gathered by kolo.common.host."""
    return lambda array, name: COLLECTIVES.now(COLLECTIVES.start_allgather(
        array, name, process_set, caller_waits=True))


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set,
                     broadcast=None):
    """Returns ``obj`` of global rank ``root_rank`` on every rank of the set (Horovod's
    defaults): its size is broadcast first (``name.sz``), then its bytes (``name.t``). The
    root gets its own object back. When the root cannot pickle its object, every rank
    raises (the others ``pickle.PicklingError`` with the root's error). ``name`` defaults
    to "broadcast_object", not to the type's name (Horovod's default):
    ranks may pass different types, e.g. None where they have no object yet, and differing
    names would never pair. ``broadcast(array, name)``, where a binding moves the arrays
    itself (a TF1 graph's session), returns the root's NumPy array; by default
    kolo.common.host broadcasts it."""
    name = "broadcast_object" if name is None else name
    _set_id(process_set)  # an unregistered set is refused before anything is sent
    broadcast = broadcast or _host_broadcast(root_rank, process_set)
    is_root = engine.rank() == int(root_rank)
    n, data, error = encode(obj) if is_root else (0, b"", None)
    n = int(broadcast(np.array([n], np.int64), part_name(name, "sz"))[0])
    payload = np.frombuffer(bytearray(data), np.uint8) if is_root else np.empty(abs(n), np.uint8)
    payload = broadcast(payload, part_name(name, "t"))
    if is_root:
        if error is not None:
            raise error
        return obj
    return decode(n, payload.tobytes(), "broadcast_object", int(root_rank))


def allgather_object(obj, name=None, process_set=global_process_set, allgather=None):
    """The list of every rank's ``obj`` (pickled as by broadcast_object), in rank order of
    the set (Horovod's defaults): the sizes are gathered first (``name.sz``, ``name`` by
    default "allgather_object"), then the bytes (``name.t``).
    ``allgather(array, name)``: as broadcast_object's ``broadcast``."""
    name = "allgather_object" if name is None else name
    set_id = _set_id(process_set)
    allgather = allgather or _host_allgather(process_set)
    n, data, error = encode(obj)
    sizes = allgather(np.array([n], np.int64), part_name(name, "sz"))
    gathered = allgather(np.frombuffer(bytearray(data), np.uint8), part_name(name, "t"))
    ranks = engine.process_set_ranks(set_id) if set_id else list(range(engine.size()))
    return decode_all(sizes.tolist(), gathered.tobytes(), "allgather_object", ranks, error)
