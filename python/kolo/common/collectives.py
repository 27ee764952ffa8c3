"""Horovod's collectives, written once for every binding: what a call does between its
arguments and the engine (kolo.common.engine), over a framework's adapter
(kolo.common.adapter).

A binding makes one :class:`Collectives` for its adapter; its public functions keep
Horovod's signatures and docstrings and call the methods here, which

- resolve the reduce op (``op``, the deprecated ``average``; kolo.common.ops) and the
  process set (its id, the root's rank in it; kolo.common.process_sets);
- check the tensors (through the adapter's reader, in C++) and make result tensors like
  the inputs (the adapter's ``empty``);
- start the operation and keep its finisher in the binding's handle table
  (kolo.common.handles): ``poll`` and ``synchronize`` give the result, made like the
  input, once it finished;
- announce a refusal to the other ranks (kolo.common.refusals), so that theirs fails too.

Every ``start_*`` method starts one operation and returns it *started*: ``(handle,
finish)``, ``finish`` making the call's result from the finished operation's Output (the
tensor or tuple of tensors reduced or gathered into, ``(output, received_splits)`` for
alltoall) and keeping the tensors the core reads alive. ``Collectives.later`` puts it in
the handle table and returns the handle (Horovod's ``*_async``: ``poll`` and
``synchronize`` take it); :meth:`Collectives.now` returns the result of a blocking call,
which passes ``caller_waits=True``: the same call into the core starts the operation and
waits for it, the waiting thread running the round itself (KOLO_CALLER_RUNS), and
``started`` holds the finished operation's Output instead of a handle.
:meth:`Collectives.form` makes a binding's public ``*_async``, in-place and blocking
functions of a ``start_*`` method, with its signature and docstring.
"""
import inspect

from kolo.common import basics
from kolo.common import engine
from kolo.common.engine import KoloInternalError  # noqa: F401  (re-exported for the bindings)
from kolo.common.handles import Handles
from kolo.common.ops import Average, reduce_op, reducescatter_op
from kolo.common.process_sets import _set_id, global_process_set, root_in_set
from kolo.common.refusals import announces_refusals

# What each of Collectives.form's functions does, after the operation's own docstring.
_FORMS = {
    (False, False): "Starts it into new tensors and returns its handle for poll() and "
                    "synchronize(), which return them.",
    (True, False): "Starts it in place and returns its handle for poll() and synchronize(), "
                   "which return the input.",
    (True, True): "Runs it in place, the calling thread running the round, and returns the "
                  "input.",
    (False, True): "Runs it, the calling thread running the round, and returns new tensors.",
}


class Collectives:
    """Horovod's collectives on one framework's tensors (``adapter``: a
    kolo.common.adapter.Adapter). ``handles``: the binding's table of handles waited for
    later, emptied when a run starts or ends."""

    def __init__(self, adapter):
        self.adapter = adapter
        self.binding = adapter.binding
        self._reader = adapter.reader
        self.handles = Handles()
        basics._on_new_run(self.handles.clear)
        # Horovod's *_async: the handle of a started operation, its result kept for
        # synchronize() (the table's own method: one call on every submit path).
        self.later = self.handles.later

    # --- handles --------------------------------------------------------------------------

    def poll(self, handle):
        """True once the operation behind ``handle`` has finished; ValueError for a handle
        that was never returned or was already synchronized."""
        return self.handles.poll(handle)

    def synchronize(self, handle):
        """Waits for ``handle`` and returns its result; None for an unknown or already
        synchronized handle (as Horovod). A wait that a signal interrupts leaves the handle
        waitable."""
        return self.handles.wait(handle)

    def release(self, handle):
        """Forgets a handle that will not be synchronized (an error abandoned it): its
        name is free again once its operation completes."""
        self.handles.release(handle)

    @staticmethod
    def now(started):
        """The result of a started operation, waited for at once. A wait that a signal
        interrupts releases the operation: nobody else holds its handle. A ``start_*``
        method called with ``caller_waits`` has waited already, in the same call into the
        core (``engine``'s ``waits``): its ``started`` holds the Output itself."""
        handle, finish = started
        if type(handle) is not int:
            return finish(handle)
        try:
            out = engine.wait(handle)
        except (KoloInternalError, ValueError):
            raise
        except BaseException:
            engine.release(handle)
            raise
        return finish(out)

    def form(self, start, in_place=False, waits=False):
        """Horovod's public function for the ``start_*`` method ``start``: its parameters
        (less ``in_place`` and ``caller_waits``, which the form sets) and docstring, and the
        name Horovod's convention gives the form (for ``start_allreduce``):
        ``allreduce_async`` returns the handle of the operation started into new tensors,
        ``allreduce_async_`` (``in_place``) that of the operation in place, and
        ``allreduce_`` (``in_place``, ``waits``) waits, the caller running the round, and
        returns the input. ``waits`` alone returns new tensors (Horovod's ``allreduce``
        without autograd)."""
        flags = {"in_place": True} if in_place else {}
        # The method under announces_refusals, called here with the wrapper's error
        # handling: one Python frame less on every call of a public form.
        fn, refused, owner = start.__func__.__wrapped__, start.__func__.refused, start.__self__
        now, later = self.now, self.later
        if waits:
            flags["caller_waits"] = True

            def call(*args, **kwargs):
                try:
                    started = fn(owner, *args, **flags, **kwargs)
                except Exception as e:
                    refused((owner,) + args, kwargs, e)
                    raise
                out, finish = started
                # Waited for in the core (the Output) unless a signal cut the wait short.
                return finish(out) if type(out) is not int else now(started)
        else:
            def call(*args, **kwargs):
                try:
                    started = fn(owner, *args, **flags, **kwargs)
                except Exception as e:
                    refused((owner,) + args, kwargs, e)
                    raise
                return later(started)
        signature = inspect.signature(start)
        call.__signature__ = signature.replace(parameters=[
            p for p in signature.parameters.values() if p.name not in ("in_place", "caller_waits")])
        call.__module__ = self.binding
        call.__name__ = call.__qualname__ = "%s%s%s" % (
            start.__name__[len("start_"):], "" if waits else "_async", "_" if in_place else "")
        call.__doc__ = "%s\n\n%s" % (inspect.cleandoc(start.__doc__), _FORMS[in_place, waits])
        return call

    # --- allreduce ------------------------------------------------------------------------

    @announces_refusals("allreduce")
    def start_allreduce(self, tensor, average=None, name=None, op=None, prescale_factor=1.0,
                        postscale_factor=1.0, process_set=global_process_set, in_place=False,
                        caller_waits=False):
        """An allreduce of ``tensor`` in place, or into a new tensor like it."""
        op = reduce_op(op, average, self.binding)
        output = None
        if not in_place:
            self._reader.check(tensor, "allreduce input")  # before empty, which takes anything
            output = self.adapter.empty_like(tensor)
        h = engine.allreduce_async(self._reader, tensor, output, "allreduce input", name, op,
                                   prescale_factor, postscale_factor, _set_id(process_set),
                                   waits=caller_waits)
        result = tensor if in_place else output
        # The finisher keeps the input alive until the core has read it.
        return h, lambda out, _input=tensor: result

    @announces_refusals("allreduce", tensors="tensors")
    def start_grouped_allreduce(self, tensors, average=None, name=None, op=None,
                                prescale_factor=1.0, postscale_factor=1.0,
                                process_set=global_process_set, in_place=False,
                                caller_waits=False):
        """One allreduce of a list, negotiated and fused as a unit; the result is the tuple
        reduced into (the inputs themselves in place)."""
        op = reduce_op(op, average, self.binding)
        tensors = tuple(tensors)  # the caller's list may change after the call
        outputs = None
        if not in_place:
            self._check_list(tensors, "grouped_allreduce")
            outputs = tuple(self.adapter.empty_like(t) for t in tensors)
        h = engine.grouped_allreduce_async(self._reader, tensors, outputs, "grouped_allreduce",
                                           name, op, prescale_factor, postscale_factor,
                                           _set_id(process_set), waits=caller_waits)
        result = tensors if in_place else outputs
        return h, lambda out, _inputs=tensors: result

    def _check_list(self, tensors, what):
        if not tensors:
            raise ValueError("%s needs at least one tensor" % what)
        for i, t in enumerate(tensors):
            self._reader.check(t, what, i)

    # --- allgather ------------------------------------------------------------------------

    @announces_refusals("allgather")
    def start_allgather(self, tensor, name=None, process_set=global_process_set,
                        caller_waits=False):
        """Every rank's ``tensor`` concatenated along dimension 0 (its size may differ
        between ranks; the other dimensions may not)."""
        h = engine.allgather_async(self._reader, tensor, "allgather input", name,
                                   _set_id(process_set), waits=caller_waits)
        return h, lambda out: self.adapter.result(out, tensor)

    @announces_refusals("allgather", tensors="tensors")
    def start_grouped_allgather(self, tensors, name=None, process_set=global_process_set,
                                caller_waits=False):
        """An allgather of every tensor of a list, negotiated as one unit; a tuple."""
        tensors = tuple(tensors)
        h = engine.grouped_allgather_async(self._reader, tensors, "grouped_allgather", name,
                                           _set_id(process_set), waits=caller_waits)
        return h, lambda out: self.adapter.results(out, tensors)

    # --- broadcast ------------------------------------------------------------------------

    @announces_refusals("broadcast")
    def start_broadcast(self, tensor, root_rank, name=None, process_set=global_process_set,
                        in_place=False, caller_waits=False):
        """Global rank ``root_rank``'s ``tensor``, in place or into a new tensor."""
        if not in_place:
            self._reader.check(tensor, "broadcast tensor")
            tensor = self.adapter.copy(tensor)
        set_id = _set_id(process_set)
        h = engine.broadcast_async(self._reader, tensor, "broadcast tensor",
                                   root_in_set(root_rank, set_id), name, set_id,
                                   waits=caller_waits)
        return h, lambda out: tensor

    # --- alltoall -------------------------------------------------------------------------

    @announces_refusals("alltoall")
    def start_alltoall(self, tensor, splits=None, name=None, process_set=global_process_set,
                       caller_waits=False):
        """``splits[i]`` rows of ``tensor`` to rank i of the set (None: an even split); the
        result is ``(output, received_splits)``."""
        splits = self.adapter.split_list(splits)
        h = engine.alltoall_async(self._reader, tensor, "alltoall input", splits, name,
                                  _set_id(process_set), waits=caller_waits)
        return h, lambda out: (self.adapter.result(out, tensor),
                               self.adapter.int32_vector(out.received_splits))

    # --- reducescatter --------------------------------------------------------------------

    @announces_refusals("reducescatter")
    def start_reducescatter(self, tensor, name=None, op=Average, process_set=global_process_set,
                            prescale_factor=1.0, postscale_factor=1.0, caller_waits=False):
        """``tensor`` reduced over the set; rank i keeps the i-th block of rows (the first
        ``rows % size`` ranks one row more)."""
        op = reducescatter_op(op, self.binding)
        h = engine.reducescatter_async(self._reader, tensor, "reducescatter input", name, op,
                                       prescale_factor, postscale_factor, _set_id(process_set),
                                       waits=caller_waits)
        return h, lambda out: self.adapter.result(out, tensor)

    @announces_refusals("reducescatter", tensors="tensors")
    def start_grouped_reducescatter(self, tensors, name=None, op=Average,
                                    process_set=global_process_set, prescale_factor=1.0,
                                    postscale_factor=1.0, caller_waits=False):
        """A reducescatter of every tensor of a list, negotiated as one unit; a tuple."""
        op = reducescatter_op(op, self.binding)
        tensors = tuple(tensors)
        h = engine.grouped_reducescatter_async(self._reader, tensors, "grouped_reducescatter",
                                               name, op, prescale_factor, postscale_factor,
                                               _set_id(process_set), waits=caller_waits)
        return h, lambda out: self.adapter.results(out, tensors)

    # --- join and barrier -----------------------------------------------------------------

    def join(self):
        """Waits until every rank has joined (a joined rank takes part in the others'
        allreduces with zeros); the global rank that joined last."""
        return self.now((engine.join_async(), lambda out: int(out.value)))

    def barrier(self, process_set=global_process_set):
        """Returns (None) once every rank of the set has called it."""
        self.now((engine.barrier_async(_set_id(process_set)), lambda out: None))
