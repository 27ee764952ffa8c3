"""The one way into kolo's C++ core (``kolo._core``) for every binding: each collective is
started, waited for and read back here, and nowhere else.

A tensor enters the core through a *reader* (:func:`tensor_reader`; bindings/tensor_reader.h):
a framework's adapter makes one for its tensors, and every collective below takes it with
the tensors themselves. The core reads DLPack's fields (pointer, dtype, shape, strides,
device, stream) and makes every check (the type, a dtype it moves, a contiguous layout, a
device it reaches) in C++, in one order, for every binding; a tensor that fails one goes
back to the adapter's ``refuse``, which raises the framework's error in its words. One call
reads a whole list, however many tensors.

Besides the collectives: waiting, polling and releasing handles, process sets as the core
knows them, refusals announced to the other ranks, the point-to-point communicators, and
what kolo.jax needs of the core (the tree check, call sites, XLA's FFI handlers). The
lifecycle (kolo.common.basics, kolo.common.join) is the only other caller of ``_core``.

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


def tensor_reader(protocol, tensor_type, dtypes, refuse, stream=None):
    """How the core reads a framework's tensors. ``protocol``: "attributes" (torch.Tensor's:
    ``data_ptr()``, ``dtype``, ``shape``, ``is_contiguous()``, ``is_sparse``, ``is_cuda``,
    ``is_cpu``, ``get_device()``) or "buffer" (the buffer protocol and a ``dtype``
    attribute: NumPy arrays). ``tensor_type``: the tensors' class; ``dtypes``: ``{dtype:
    core code}`` (:func:`dtype_codes`). ``refuse(tensor, what, index, check)`` raises the
    adapter's error for a tensor that failed ``check`` ("type", "sparse", "dtype",
    "contiguous" or "device"; ``index`` its place in a list, or None). ``stream(tensor)``
    gives the CUDA stream that produces a device tensor (None: no devices).

    The reader's ``check(tensor, what, index=None)`` makes the same checks, for an adapter
    that allocates a result before the collective starts."""
    return _core.TensorReader(protocol, tensor_type, dtypes, refuse, stream)


# --- starting operations: a reader and tensors in, a handle (an int) out ------------------
# ``what`` names the inputs in a refusal ("allreduce input"); ``name`` None or "" leaves the
# name to the core. ``waits``: a blocking call: the core is told that the caller waits at
# once (it wakes no background thread, and the waiting thread runs the round,
# KOLO_CALLER_RUNS), the same call waits, and it returns the finished operation's Output
# (see :func:`wait`) instead of a handle: a blocking form is one call into the core. A wait
# that a signal interrupts releases the operation.

def allreduce_async(reader, tensor, out, what, name, op, prescale, postscale, set_id,
                    waits=False):
    """Reduces ``tensor`` into ``out`` (a tensor like it), or in place when ``out`` is None."""
    return _core.allreduce_async(reader, tensor, out, what, name or "", op, float(prescale),
                                 float(postscale), set_id, waits)


def grouped_allreduce_async(reader, tensors, outs, what, name, op, prescale, postscale, set_id,
                            waits=False):
    """One allreduce of every tensor, negotiated and fused as a unit; ``outs`` one tensor
    like each input, or None for in place."""
    return _core.grouped_allreduce_async(reader, tensors, outs, what, name or "", op,
                                         float(prescale), float(postscale), set_id,
                                         waits)


def allgather_async(reader, tensor, what, name, set_id, waits=False):
    return _core.allgather_async(reader, tensor, what, name or "", set_id, waits)


def grouped_allgather_async(reader, tensors, what, name, set_id, waits=False):
    return _core.grouped_allgather_async(reader, tensors, what, name or "", set_id,
                                         waits)


def broadcast_async(reader, tensor, what, root_in_set, name, set_id, waits=False):
    """In place; ``root_in_set`` is the root's rank within the set
    (kolo.common.process_sets.root_in_set)."""
    return _core.broadcast_async(reader, tensor, what, root_in_set, name or "", set_id,
                                 waits)


def alltoall_async(reader, tensor, what, splits, name, set_id, waits=False):
    """``splits``: rows for each rank of the set, a list of ints (empty: an even split)."""
    return _core.alltoall_async(reader, tensor, what, splits, name or "", set_id, waits)


def reducescatter_async(reader, tensor, what, name, op, prescale, postscale, set_id,
                        waits=False):
    return _core.reducescatter_async(reader, tensor, what, name or "", op, float(prescale),
                                     float(postscale), set_id, waits)


def grouped_reducescatter_async(reader, tensors, what, name, op, prescale, postscale, set_id,
                                waits=False):
    return _core.grouped_reducescatter_async(reader, tensors, what, name or "", op,
                                             float(prescale), float(postscale), set_id,
                                             waits)


def join_async():
    return _core.join_async(0)


def barrier_async(set_id):
    return _core.barrier_async(set_id)


def count_step():
    """One training step done (a DistributedOptimizer step): counted for kolorun's monitor
    (docs/monitoring.md). Costs one relaxed atomic add; does nothing before init."""
    _core.count_step()


def counters():
    """This rank's monitor counters so far (kolo::Runtime::Counters): "steps",
    "negotiate_us", "move_us", "wait_us" and "<op>.<set slot>.count" / ".bytes"."""
    return _core.counters()


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


def set_rank(set_id):
    """This process's rank in the set (the global set: its global rank)."""
    return _core.rank() if set_id == 0 else _core.process_set_rank(set_id)


# --- what only some bindings use --------------------------------------------------------------

def refuse(op, name, set_id, count, reason):
    """Tells the other ranks of the set that this rank refused collective ``op`` (a bad
    input found before the core was called), so that theirs fails naming ``reason``."""
    _core.refuse(op, name, set_id, count, reason)


def p2p_comm(global_ranks):
    """A point-to-point communicator over ``global_ranks`` (ops/p2p.h, through
    bindings/c10d_mpi.cc), collective over them."""
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


def tf_abi():
    """The address of the C table that kolo's TensorFlow op library starts operations
    through (bindings/tensorflow/kolo_tf_abi.h)."""
    return _core.tf_abi()


def tf_ops_enabled():
    """KOLO_TF_OPS, read through the settings table: whether kolo.tensorflow runs its
    collectives as TensorFlow ops."""
    return _core.tf_ops_enabled()
