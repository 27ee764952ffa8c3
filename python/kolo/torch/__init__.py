"""kolo for PyTorch with Horovod 0.28's API: ``import kolo.torch as hvd``.

Every public name of ``horovod.torch`` is here with Horovod's signature,
defaults, return values and autograd rules; docs/moving-from-horovod.md has
the table, with the few deliberate differences. The collectives live in
``kolo.torch.mpi_ops`` (as in Horovod), process sets in
``kolo.torch.process_sets``.
"""
from kolo.torch import elastic  # noqa: F401
from kolo.torch.basics import (  # noqa: F401
    _check_has_gpu, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
    gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
    mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size)
from kolo.torch.basics import start_timeline, stop_timeline  # noqa: F401
from kolo.torch.compression import Compression  # noqa: F401
from kolo.torch.mpi_ops import (  # noqa: F401
    Adasum, Average, HorovodInternalError, KoloInternalError, Max, Min, Product, Sum,
    allgather, allgather_async, allreduce, allreduce_, allreduce_async, allreduce_async_,
    alltoall, alltoall_async, barrier, broadcast, broadcast_, broadcast_async,
    broadcast_async_, grouped_allgather, grouped_allgather_async, grouped_allreduce,
    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
    grouped_reducescatter, grouped_reducescatter_async, join, poll, reducescatter,
    reducescatter_async, sparse_allreduce_async, synchronize)
from kolo.torch.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, remove_process_set)
from kolo.torch.functions import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_optimizer_state, broadcast_parameters)
from kolo.torch.optimizer import DistributedOptimizer  # noqa: F401
from kolo.torch.sync_batch_norm import SyncBatchNorm  # noqa: F401

__all__ = [
    # lifecycle, topology, build
    "init", "shutdown", "is_initialized", "start_timeline", "stop_timeline", "size",
    "local_size", "cross_size", "rank", "local_rank", "cross_rank", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    # reduce ops, errors
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "HorovodInternalError",
    "KoloInternalError",
    # collectives
    "allreduce", "allreduce_async", "allreduce_", "allreduce_async_", "grouped_allreduce",
    "grouped_allreduce_async", "grouped_allreduce_", "grouped_allreduce_async_",
    "sparse_allreduce_async", "allgather", "allgather_async", "grouped_allgather",
    "grouped_allgather_async", "broadcast", "broadcast_async", "broadcast_",
    "broadcast_async_", "alltoall", "alltoall_async", "reducescatter", "reducescatter_async",
    "grouped_reducescatter", "grouped_reducescatter_async", "join", "barrier", "poll",
    "synchronize",
    # process sets
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    # training
    "Compression", "DistributedOptimizer", "SyncBatchNorm", "broadcast_parameters",
    "broadcast_optimizer_state", "broadcast_object", "allgather_object", "elastic",
]
