"""Starting and stopping kolo, topology, and what this build has (Horovod's
``HorovodBasics``: the same names, return types and errors). The framework-neutral part
lives in ``kolo.common.basics``, shared by every binding."""
import torch

from kolo.common import basics as _common
from kolo.common import elastic_env
from kolo.common.basics import (  # noqa: F401
    _on_new_run, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
    gloo_enabled, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
    mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size,
    start_timeline, stop_timeline)


def init(comm=None, process_sets=None):
    if not is_initialized():
        _import_before_joining()
    _common.init(comm, process_sets)


init.__doc__ = _common.init.__doc__


def _import_before_joining():
    """A process started to grow an elastic job in place (docs/elastic.md) imports now what
    torch imports at the first optimizer's construction (torch._dynamo, seconds of a
    core): before init() starts MPI, while the job's ranks still train, rather than after
    it joined them, while they wait for it to reach ``train(state)``."""
    try:
        env = elastic_env.read()
    except ValueError:
        return  # init() names the bad variable
    if env is None or not env.replacement:
        return
    try:
        import torch._dynamo  # noqa: F401
    except Exception:  # a speed-up only: the optimizer imports it again, or does without
        pass


def _check_has_gpu():
    return torch.cuda.is_available()


def _check_join_device(device):
    """Horovod's ``device`` says where the joined rank makes its zero tensors (-1: the CPU).
    kolo makes them on the device of the allreduce they stand in for (negotiation makes every
    rank's tensors be on the same device), so a device needs no effect. As in Horovod's
    builds without GPU allreduce, a CUDA device is accepted whatever this machine has
    (Horovod's tests call ``join(hvd.local_rank())`` on CPU-only machines); only what is not a
    device at all fails, here, on the calling rank, before it joins."""
    if isinstance(device, bool) or not isinstance(device, (int, str, torch.device)):
        raise TypeError("join(): device must be -1 (the CPU), a CUDA device index, or a "
                        "torch.device, got %s" % type(device).__name__)
    if isinstance(device, int):
        if device < -1:
            raise ValueError("join(device=%d): device must be -1 (the CPU) or a CUDA device "
                             "index >= 0" % device)
        return
    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise ValueError("join(device=%r): not a device (%s)" % (device, e)) from None
    if parsed.type not in ("cpu", "cuda"):
        raise ValueError("join(device=%r): kolo runs collectives on the CPU or a CUDA "
                         "device, not on %s" % (device, parsed.type))
