"""Starting and stopping kolo, topology, and what this build has (Horovod's
``HorovodBasics``: the same names, return types and errors). The framework-neutral part
lives in ``kolo.common.basics``, shared by every binding."""
import torch

from kolo.common.basics import (  # noqa: F401
    _on_new_run, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
    gloo_enabled, init, is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
    mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size,
    start_timeline, stop_timeline)


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
