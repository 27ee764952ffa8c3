"""The collectives of ``kolo.torch``, with the signatures, defaults, return
values and autograd rules of Horovod 0.28's ``horovod.torch.mpi_ops``
(docs/moving-from-horovod.md lists every name and the few deliberate
differences).

This module is the namespace Horovod's users import; the code is in
kolo.torch._async (the ``*_async`` and in-place forms, ``poll``,
``synchronize``, ``join``, ``barrier``) and kolo.torch.autograd (the forms that
return a new tensor, differentiable), both over Horovod's collectives written
once in kolo.common.collectives.
"""
# kolo._core, as Horovod's mpi_ops has its library object: tests reach the core's
# functions through it (the engine looks them up on the module at every call).
from kolo import _core  # noqa: F401
from kolo.common.collectives import KoloInternalError  # noqa: F401
from kolo.common.exceptions import HorovodInternalError  # noqa: F401  (is KoloInternalError)
from kolo.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from kolo.torch._async import (  # noqa: F401
    _release, allgather_async, allreduce_, allreduce_async, allreduce_async_, alltoall_async,
    barrier, broadcast_, broadcast_async, broadcast_async_, grouped_allgather_async,
    grouped_allreduce_, grouped_allreduce_async, grouped_allreduce_async_,
    grouped_reducescatter_async, join, poll, reducescatter_async, sparse_allreduce_async,
    synchronize)
from kolo.torch._tensors import UnsupportedDtypeError  # noqa: F401
from kolo.torch._tensors import sparse_coo as _sparse_coo  # noqa: F401
from kolo.torch.autograd import (  # noqa: F401
    allgather, allreduce, alltoall, broadcast, grouped_allgather, grouped_allreduce,
    grouped_reducescatter, reducescatter)
from kolo.torch.basics import (  # noqa: F401  (Horovod's mpi_ops exports them too)
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
    is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size)
from kolo.torch.compression import Compression  # noqa: F401
from kolo.torch.process_sets import (  # noqa: F401
    ProcessSet, add_process_set, global_process_set, remove_process_set)

