"""The one engine under every framework binding: every collective of kolo's C++ core
(``kolo._core``) is started, waited for and read back here, and nowhere else.

A binding hands the engine *views*: ``(data pointer, dtype code, shape, device)``, the
device -1 for host memory. It gets them from its own small adapter (``kolo.torch._tensors``
for torch tensors, ``kolo.common.host`` for NumPy arrays, which TensorFlow and JAX use),
which also says how a result becomes a tensor again. The allreduces of kolo.torch hand over
the tensors themselves instead, with a reader its adapter made (:func:`tensor_reader`): the
core reads a whole list in one call. Everything else is the same for every
framework and lives here once:

- the dtype table (the core's codes by dtype name; :func:`dtype_codes` maps a framework's
  dtypes onto it);
- names (``None`` is unnamed; the members of a split group are ``name.0``, ``name.1``);
- starting operations (``*_async``: a handle, an int), waiting, polling, releasing, and
  the table of handles that are waited for later (:class:`Handles`);
- process sets as the core knows them (ids, ranks, registering, removing);
- refusals announced to the other ranks, the point-to-point communicators, and the tree
  check of kolo.jax.

The core's own errors are :class:`KoloInternalError` (a RuntimeError) and ValueError.
"""
from kolo import _core
from kolo._core import KoloInternalError  # noqa: F401  (re-exported for the bindings)

# The core's codes, by name: "float32" -> its kolo::DataType, "average" -> its ReduceOp.
DTYPES = _core.DTYPES
REDUCE_OPS = _core.REDUCE_OPS


def dtype_codes(resolve):
    """``{framework dtype: core code}`` for every dtype of the core that ``resolve(name)``
    knows; ``resolve`` returns None for a name the framework has no dtype for."""
    codes = {}
    for name, code in DTYPES.items():
        dtype = resolve(name)
        if dtype is not None:
            codes[dtype] = code
    return codes


def member_name(name, index, count):
    """The name of member ``index`` of ``count`` operations started for one call named
    ``name`` (unnamed stays unnamed; a single one keeps the name)."""
    if not name or count == 1:
        return name or ""
    return "%s.%d" % (name, index)


# --- starting operations: views in, a handle out --------------------------------------------
# ``stream``: the CUDA stream that produces the input (kolo's stream waits on it), or 0.

def allreduce_async(view, out, name, op, prescale, postscale, set_id, stream=0):
    """Reduces ``view`` into the memory at ``out`` (the same shape and dtype; ``out`` may be
    the input's own pointer)."""
    data, code, shape, device = view
    return _core.allreduce_async(data, out, code, shape, device, name or "", op,
                                 float(prescale), float(postscale), set_id, stream)


def grouped_allreduce_async(views, outs, name, op, prescale, postscale, set_id, stream=0):
    """One allreduce of every view, negotiated and fused as a unit."""
    specs = [(data, out, code, shape, device)
             for (data, code, shape, device), out in zip(views, outs)]
    return _core.grouped_allreduce_async(specs, name or "", op, float(prescale),
                                         float(postscale), set_id, stream)


# The same two for a framework whose adapter made a reader (:func:`tensor_reader`): the core
# reads the tensors itself, one call however many there are. ``out`` / ``outs``: None to
# reduce in place, else tensors like the inputs; ``what`` names the inputs in a refusal.

def tensor_reader(tensor_type, dtypes, refuse, stream):
    """How the core reads a framework's tensors (bindings/tensor_reader.h): instances of
    ``tensor_type`` with torch.Tensor's attributes, ``dtypes`` ``{dtype: core code}``;
    ``refuse(tensor, what, index)`` raises the adapter's error for a tensor that fails a
    check, ``stream(tensor)`` gives the CUDA stream that produces a device tensor."""
    return _core.TensorReader(tensor_type, dtypes, refuse, stream)


# ``caller_waits``: the caller waits for the handle at once (a blocking call): the core does
# not wake its background thread, and the waiting thread runs the round (KOLO_CALLER_RUNS).

def allreduce_tensor_async(reader, tensor, out, what, name, op, prescale, postscale, set_id,
                           caller_waits=False):
    return _core.allreduce_tensor_async(reader, tensor, out, what, name or "", op,
                                        float(prescale), float(postscale), set_id, caller_waits)


def grouped_allreduce_tensors_async(reader, tensors, outs, what, name, op, prescale, postscale,
                                    set_id, caller_waits=False):
    return _core.grouped_allreduce_tensors_async(reader, tensors, outs, what, name or "", op,
                                                 float(prescale), float(postscale), set_id,
                                                 caller_waits)


def allgather_async(view, name, set_id, stream=0):
    data, code, shape, device = view
    return _core.allgather_async(data, code, shape, device, name or "", set_id, stream)


def grouped_allgather_async(views, name, set_id, stream=0):
    return _core.grouped_allgather_async(list(views), name or "", set_id, stream)


def broadcast_async(view, root_in_set, name, set_id, stream=0):
    """In place; ``root_in_set`` is the root's rank within the set (:func:`root_in_set`)."""
    data, code, shape, device = view
    return _core.broadcast_async(data, code, shape, device, root_in_set, name or "", set_id,
                                 stream)


def alltoall_async(view, splits, name, set_id, stream=0):
    """``splits``: rows for each rank of the set, a list of ints (empty: an even split)."""
    data, code, shape, device = view
    return _core.alltoall_async(data, code, shape, device, splits, name or "", set_id, stream)


def reducescatter_async(view, name, op, prescale, postscale, set_id, stream=0):
    data, code, shape, device = view
    return _core.reducescatter_async(data, code, shape, device, name or "", op,
                                     float(prescale), float(postscale), set_id, stream)


def grouped_reducescatter_async(views, name, op, prescale, postscale, set_id, stream=0):
    return _core.grouped_reducescatter_async(list(views), name or "", op, float(prescale),
                                             float(postscale), set_id, stream)


def join_async():
    return _core.join_async(0)


def barrier_async(set_id):
    return _core.barrier_async(set_id)


def cycle_stats():
    """Which threads ran this rank's cycles since init: {"by_background", "by_callers",
    "left_unfinished"} (kolo::CycleStats)."""
    return _core.cycle_stats()


# --- waiting ----------------------------------------------------------------------------------

def wait(handle):
    """Blocks (without the GIL; Ctrl-C interrupts it) until the operation finishes and
    returns its Output: ``shape``, ``nbytes``, ``copy_to(pointer, nbytes)``,
    ``take_parts()`` for a grouped one, ``received_splits``, ``value``."""
    return _core.wait(handle)


def poll(handle):
    return _core.poll(handle)


def release(handle):
    """Forgets a handle that will not be waited for; its name is free once it completes."""
    if _core.is_initialized():
        _core.release(handle)


def wait_all(handles):
    """Waits for every handle (so that none is left running after an error), then raises
    the first error; the Outputs otherwise."""
    outs, error = [], None
    for h in handles:
        try:
            outs.append(_core.wait(h))
        except (KoloInternalError, ValueError) as e:
            outs.append(None)
            error = error or e
    if error is not None:
        raise error
    return outs


class Handles:
    """Handles that are waited for later (Horovod's ``synchronize``), each with its
    finisher: a function of the finished operation's Output that makes the caller's result
    (and keeps the tensors it needs alive until then). An entry leaves when its wait ended
    with the operation's result or error, never when a signal interrupted it."""

    def __init__(self):
        self._pending = {}

    def add(self, handle, finish):
        self._pending[handle] = finish
        return handle

    def __contains__(self, handle):
        return handle in self._pending

    def poll(self, handle):
        """True once the operation has finished; ValueError for an unknown handle."""
        if handle not in self._pending:
            raise ValueError("Handle %s was not created or has been cleared." % (handle,))
        return _core.poll(handle)

    def wait(self, handle):
        """The finisher's result; None for an unknown or already waited-for handle."""
        finish = self._pending.get(handle)
        if finish is None:
            return None
        try:
            out = _core.wait(handle)
        except (KoloInternalError, ValueError):
            self._pending.pop(handle, None)
            raise
        self._pending.pop(handle, None)
        return finish(out)

    def release(self, handle):
        """Forgets a handle that will not be waited for (an error abandoned it)."""
        if self._pending.pop(handle, None) is not None:
            release(handle)

    def clear(self):
        """A new run (init) or none (shutdown): the old run's handles are gone."""
        self._pending.clear()


# --- process sets, as the core knows them -----------------------------------------------------

def rank():
    """This process's global rank (KoloInternalError before init)."""
    return _core.rank()


def size():
    """The number of ranks (KoloInternalError before init)."""
    return _core.size()


def stall_shutdown_seconds():
    """The stall shutdown time, read as the runtime reads it (0: never)."""
    return _core.stall_shutdown_seconds()


def process_set_ranks(set_id):
    """The global ranks of a registered set; ValueError for an unknown id."""
    return _core.process_set_ranks(set_id)


def process_set_rank(set_id):
    """This process's rank in the set, -1 when it is not a member."""
    return _core.process_set_rank(set_id)


def add_process_set(ranks):
    """Registers a set with the core (collective); its id."""
    return _core.wait(_core.add_process_set_async(list(ranks))).value


def remove_process_set(set_id):
    """Removes a set (collective); ValueError when the core does not know it."""
    _core.wait(_core.remove_process_set_async(set_id))


def root_in_set(root_rank, set_id):
    """Horovod's root_rank is a global rank, also with a process set; the core takes the
    root's rank within the set."""
    root_rank = int(root_rank)
    if set_id == 0:
        return root_rank
    ranks = _core.process_set_ranks(set_id)
    if root_rank not in ranks:
        raise ValueError("broadcast root_rank %d is not a member of process set %d (global "
                         "ranks %s); root_rank is a global rank, as hvd.rank() returns"
                         % (root_rank, set_id, ranks))
    return ranks.index(root_rank)


def set_rank(set_id):
    """This process's rank in the set (the global set: its global rank)."""
    return _core.rank() if set_id == 0 else _core.process_set_rank(set_id)


# --- what only some bindings use --------------------------------------------------------------

def refuse(op, name, set_id, count, reason):
    """Tells the other ranks of the set that this rank refused collective ``op`` (a bad
    input found before the core was called), so that theirs fails naming ``reason``."""
    _core.refuse(op, name, set_id, count, reason)


def p2p_comm(global_ranks):
    """A point-to-point communicator over ``global_ranks`` (bindings/p2p.cc), collective
    over them."""
    return _core.P2PComm.create(list(global_ranks), _core.rank(), _core.size())


def first_difference(signatures):
    """kolo.jax's tree check: every rank's signature text in, the first leaf that is not
    the same everywhere in words out ("" when they agree)."""
    return _core.first_difference(signatures)


def call_site():
    """The Python line that called an unnamed collective (kolo.jax records it when
    tracing, for the collectives XLA runs later)."""
    return _core.call_site()


def xla_ffi_handlers():
    """The core's XLA FFI handlers by target name; empty when built without XLA's
    headers."""
    return getattr(_core, "xla_ffi_handlers", {})
