"""kolo for JAX: collectives on arrays and whole pytrees, eagerly and inside ``jax.jit``,
with gradients, and an Optax transformation that averages gradients over the ranks.

    import kolo.jax as kj
    kj.init()
    params = kj.broadcast_parameters(params, root_rank=0)
    tx = kj.DistributedOptimizer(optax.adam(1e-3))

All leaves of one call form one grouped operation: one negotiation, fused. The modules:
this one (names, compression, Optax), _collectives.py (the collectives on trees, with
their gradients), _trees.py (leaves, the tree check, running a kernel eagerly or as an
ordered io_callback), _xla.py (allreduce inside jit as an XLA FFI call).
docs/api-jax.md documents every name and how arrays reach the runtime.
"""
import jax.numpy as jnp

from kolo.common.basics import (  # noqa: F401
    cross_rank, cross_size, cuda_built, init, is_initialized, local_rank, local_size,
    mpi_threads_supported, nccl_built, rank, shutdown, size, start_timeline, stop_timeline)
from kolo.common.compression import CastCompressor, compressors
from kolo.common.exceptions import HorovodInternalError, KoloInternalError  # noqa: F401
from kolo.common.ops import Adasum, Average, Max, Min, Product, Sum, check_op  # noqa: F401
from kolo.common.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, remove_process_set)
from kolo.jax._collectives import (  # noqa: F401
    allgather, allgather_object, allreduce, alltoall, barrier, broadcast, broadcast_object,
    broadcast_parameters, join, reducescatter)


def is_chief():
    """Whether this process is global rank 0: the one that logs, writes checkpoints and
    shows progress bars (every rank doing it is what makes "File exists" errors)."""
    return rank() == 0


# --- compression -------------------------------------------------------------------------

class _JaxCast(CastCompressor):
    is_floating = staticmethod(lambda x: jnp.issubdtype(x.dtype, jnp.floating))
    cast = staticmethod(lambda x, dtype: x.astype(dtype))


FP16Compressor, BF16Compressor, Compression = compressors(_JaxCast, jnp.float16, jnp.bfloat16)


# --- Optax ---------------------------------------------------------------------------------

def allreduce_gradients(grads, op=Average, compression=Compression.none,
                        process_set=global_process_set):
    """``grads`` (a pytree) averaged (``op``) over the set's ranks in one fused operation:
    for custom training loops, jitted or not."""
    return allreduce(grads, op=op, compression=compression, process_set=process_set,
                     name=None)


def DistributedOptimizer(tx, op=Average, backward_passes_per_step=1,
                         compression=Compression.none, process_set=global_process_set):
    """An optax.GradientTransformation that averages the gradients over the set's ranks
    (or reduces them with ``op``: ``Adasum`` combines them adaptively), then applies ``tx``;
    usable inside a jitted train step. With
    ``backward_passes_per_step`` N > 1 it is ``optax.MultiSteps``: the mean of N calls'
    gradients is averaged over the ranks and applied on every N-th call (the other calls
    return zero updates)."""
    import optax
    check_op(op, "kolo.jax")
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be >= 1, got %r"
                         % backward_passes_per_step)

    def update_fn(updates, state, params=None):
        reduced = allreduce(updates, op=op, compression=compression, process_set=process_set)
        return tx.update(reduced, state, params)

    distributed_tx = optax.GradientTransformation(tx.init, update_fn)
    if int(backward_passes_per_step) == 1:
        return distributed_tx
    return optax.MultiSteps(distributed_tx, every_k_schedule=int(backward_passes_per_step))


distributed = DistributedOptimizer
