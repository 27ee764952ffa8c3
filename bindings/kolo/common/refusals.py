"""Refusals reach every rank: a collective that this rank refuses before calling the core
(a check in Python: an unsupported dtype, a non-contiguous tensor, bad splits) is announced
through ``_core.refuse``, so that the other ranks' matching collective fails with this
rank's reason instead of waiting for it (docs/errors.md, "Bad input on one rank"). The core
announces the refusals of its own checks itself."""
import functools
import inspect
import threading

from kolo import _core
from kolo.common.process_sets import _set_id

_active = threading.local()  # how deep this thread is in announcing entry points


def announces_refusals(op, tensors=None):
    """Decorates a collective's ``*_async`` entry point of collective ``op`` ("allreduce",
    ...), whose code before the core call only checks its arguments: an exception it raises
    that the core did not raise is announced to the other ranks of the set, then raised.
    ``tensors``: the argument holding a grouped call's list (its length is the group's)."""
    def wrap(fn):
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def entry(*args, **kwargs):
            depth = getattr(_active, "depth", 0)
            _active.depth = depth + 1
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                # Only the outermost entry point announces (broadcast_async calls
                # broadcast_async_), and never what the core raised: it announced that.
                if depth == 0 and not getattr(e, "_kolo_core", False):
                    _announce(op, signature, args, kwargs, tensors, e)
                raise
            finally:
                _active.depth = depth
        return entry
    return wrap


def _announce(op, signature, args, kwargs, tensors, error):
    try:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        set_id = _set_id(bound.arguments.get("process_set"))
    except Exception:  # noqa: BLE001 - no set to tell (an unregistered one): nobody waits
        return
    count = 1
    if tensors is not None:
        try:
            count = max(1, len(bound.arguments[tensors]))
        except TypeError:
            pass
    name = bound.arguments.get("name") or ""
    _core.refuse(op, str(name), set_id, count, "%s: %s" % (type(error).__name__, error))
