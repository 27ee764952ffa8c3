"""Refusals reach every rank: a collective that this rank refuses before the runtime has it
(a tensor that fails the reader's checks, raised in the adapter's words; bad splits; a root
outside the set) is announced through the engine (``engine.refuse``), so that the other
ranks' matching collective fails with this rank's reason instead of waiting for it
(docs/errors.md, "Bad input on one rank"). The runtime announces the refusals of its own
checks itself."""
import functools
import inspect

from kolo.common import engine as _engine
from kolo.common.process_sets import _set_id


def announces_refusals(op, tensors=None):
    """Decorates a collective's ``*_async`` entry point of collective ``op`` ("allreduce",
    ...), whose code before the core call only checks its arguments: an exception it raises
    that the core did not raise is announced to the other ranks of the set, then raised.
    ``tensors``: the argument holding a grouped call's list (its length is the group's)."""
    def wrap(fn):
        signature = inspect.signature(fn)

        def refused(args, kwargs, e):
            """Announces ``e``, raised by ``fn(*args, **kwargs)``, once: not what the core
            raised (it announced that), and not again by an outer entry point
            (broadcast_async calls broadcast_async_)."""
            if not getattr(e, "_kolo_core", False) and not getattr(e, "_kolo_announced", False):
                _announce(op, signature, args, kwargs, tensors, e)
                try:
                    e._kolo_announced = True
                except AttributeError:  # an exception type without a __dict__
                    pass

        @functools.wraps(fn)
        def entry(*args, **kwargs):
            # Nothing but the call on the way in: this is every collective's submit path.
            try:
                return fn(*args, **kwargs)
            except Exception as e:
                refused(args, kwargs, e)
                raise
        # Collectives.form calls ``fn`` itself and ``refused`` on an error, saving a frame
        # on the public forms' path.
        entry.refused = refused
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
    _engine.refuse(op, str(name), set_id, count, "%s: %s" % (type(error).__name__, error))
