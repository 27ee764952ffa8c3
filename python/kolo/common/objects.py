"""How ``broadcast_object`` and ``allgather_object`` turn objects into bytes and back, in
every binding that has them.

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
