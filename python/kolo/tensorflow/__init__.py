"""kolo for TensorFlow with Horovod 0.28's API: ``import kolo.tensorflow as hvd``.

Every public name of ``horovod.tensorflow`` that TensorFlow 2 can run is here with
Horovod's signature, defaults and gradients; docs/api-tensorflow.md has the table and
docs/moving-from-horovod.md the differences. Pure Python over kolo's engine
(``kolo.common.engine``): one kolo build serves every TensorFlow 2.x. Keras users: ``import kolo.tensorflow.keras as hvd``.
"""
import tensorflow as tf

from kolo.tensorflow import elastic, util  # noqa: F401
from kolo.tensorflow import legacy_optimizer as _legacy
from kolo.tensorflow.compression import Compression  # noqa: F401
from kolo.tensorflow.functions import (  # noqa: F401
    allgather_object, broadcast_global_variables, broadcast_object, broadcast_object_fn,
    broadcast_variables)
from kolo.tensorflow.gradients import (  # noqa: F401
    DistributedGradientTape, PartialDistributedGradientTape, allreduce, grouped_allreduce,
    grouped_reducescatter, reducescatter)
from kolo.tensorflow.mpi_ops import (  # noqa: F401
    Adasum, Average, HorovodInternalError, KoloInternalError, Max, Min, Product, ProcessSet,
    Sum, add_process_set, allgather, alltoall, barrier, broadcast, broadcast_, ccl_built,
    cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, global_process_set,
    grouped_allgather, init, is_homogeneous, is_initialized, join, local_rank, local_rank_op,
    local_size, local_size_op, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built,
    process_set_included_op, rank, rank_op, remove_process_set, rocm_built, shutdown, size,
    size_op, start_timeline, stop_timeline)
from kolo.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from kolo.tensorflow.util import (  # noqa: F401
    _cache, _executing_eagerly, _make_subgraph, refs_to_vars, vars_to_refs)


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none,
                         sparse_as_dense=False, backward_passes_per_step=1, op=Average,
                         gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=global_process_set,
                         scale_local_gradients=True):
    """A ``tf.compat.v1.train.Optimizer`` is wrapped as by Horovod's ``_DistributedOptimizer``
    (its compute_gradients() averages over the ranks, kolo.tensorflow.legacy_optimizer); a
    Keras optimizer as by ``kolo.tensorflow.keras.DistributedOptimizer`` (as Horovod
    does)."""
    import keras
    if op == Adasum and average_aggregated_gradients:
        raise ValueError("Adasum does not support average_aggregated_gradients == True")
    if isinstance(optimizer, tf.compat.v1.train.Optimizer):
        return _legacy.DistributedOptimizer(
            optimizer, name, use_locking, compression, sparse_as_dense,
            backward_passes_per_step, op, gradient_predivide_factor,
            average_aggregated_gradients, num_groups, groups, process_set,
            scale_local_gradients)
    if isinstance(optimizer, keras.optimizers.Optimizer):
        if op == Adasum:  # Horovod's Adasum optimizer is a tf.compat.v1 one
            raise ValueError("op == Adasum is not supported yet with Keras")
        from kolo.tensorflow.keras import DistributedOptimizer as keras_optimizer
        return keras_optimizer(
            optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
            compression=compression, sparse_as_dense=sparse_as_dense,
            gradient_predivide_factor=gradient_predivide_factor, op=op,
            backward_passes_per_step=backward_passes_per_step,
            average_aggregated_gradients=average_aggregated_gradients, num_groups=num_groups,
            groups=groups, process_set=process_set, scale_local_gradients=scale_local_gradients)
    raise ValueError(
        "Provided optimizer doesn't inherit from either legacy TensorFlow or Keras optimizer: "
        "%s is neither a tf.compat.v1.train.Optimizer nor a keras.optimizers.Optimizer"
        % type(optimizer).__name__)


__all__ = [
    "init", "shutdown", "is_initialized", "start_timeline", "stop_timeline", "size",
    "local_size", "cross_size", "rank", "local_rank", "cross_rank", "is_homogeneous",
    "rank_op", "local_rank_op", "size_op", "local_size_op", "process_set_included_op",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "Average", "Sum", "Adasum", "Min", "Max", "Product", "HorovodInternalError",
    "KoloInternalError",
    "allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast",
    "broadcast_", "broadcast_variables", "broadcast_global_variables", "alltoall",
    "reducescatter", "grouped_reducescatter", "broadcast_object", "broadcast_object_fn",
    "allgather_object", "join", "barrier",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "Compression", "DistributedGradientTape", "PartialDistributedGradientTape",
    "DistributedOptimizer", "SyncBatchNormalization", "elastic",
]
