"""Handles that are waited for later: Horovod's ``poll`` and ``synchronize``, one table per
binding (kolo.common.collectives keeps it)."""
from kolo.common import engine


class Handles:
    """Handles that are waited for later, each with its finisher: a function of the
    finished operation's Output that makes the caller's result (and keeps the tensors it
    needs alive until then). An entry leaves when its wait ended with the operation's
    result or error, never when a signal interrupted it."""

    def __init__(self):
        self._pending = {}

    def add(self, handle, finish):
        self._pending[handle] = finish
        return handle

    def later(self, started):
        """The handle of a started operation ``(handle, finish)``, kept for :meth:`wait`."""
        handle, finish = started
        self._pending[handle] = finish
        return handle

    def __contains__(self, handle):
        return handle in self._pending

    def poll(self, handle):
        """True once the operation has finished; ValueError for an unknown handle."""
        if handle not in self._pending:
            raise ValueError("Handle %s was not created or has been cleared." % (handle,))
        return engine.poll(handle)

    def wait(self, handle):
        """The finisher's result; None for an unknown or already waited-for handle."""
        finish = self._pending.get(handle)
        if finish is None:
            return None
        try:
            out = engine.wait(handle)
        except (engine.KoloInternalError, ValueError):
            self._pending.pop(handle, None)
            raise
        self._pending.pop(handle, None)
        return finish(out)

    def release(self, handle):
        """Forgets a handle that will not be waited for (an error abandoned it)."""
        if self._pending.pop(handle, None) is not None:
            engine.release(handle)

    def clear(self):
        """A new run (init) or none (shutdown): the old run's handles are gone."""
        self._pending.clear()
