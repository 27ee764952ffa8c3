"""Starting and stopping kolo, topology, and what this build has (Horovod's
``HorovodBasics``: the same names, return types and errors). The framework-neutral part
lives in ``kolo.common.basics``, shared by every binding."""
import torch

from kolo import _core
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
    rank's tensors be on the same device), so a device needs no effect; it is checked, so that
    a CUDA device this build or machine cannot serve fails here, before joining."""
    if isinstance(device, bool) or not isinstance(device, (int, str, torch.device)):
        raise TypeError("join(): device must be -1 (the CPU), a CUDA device index, or a "
                        "torch.device, got %s" % type(device).__name__)
    if isinstance(device, int):
        if device == -1:
            return
        if device < -1:
            raise ValueError("join(device=%d): device must be -1 (the CPU) or a CUDA device "
                             "index >= 0" % device)
        index = device
    else:
        try:
            parsed = torch.device(device)
        except (RuntimeError, ValueError) as e:
            raise ValueError("join(device=%r): not a device (%s)" % (device, e)) from None
        if parsed.type == "cpu":
            return
        if parsed.type != "cuda":
            raise ValueError("join(device=%r): kolo runs collectives on the CPU or a CUDA "
                             "device, not on %s" % (device, parsed.type))
        index = parsed.index
    if not _core.cuda_built():
        raise ValueError("join(device=%r): this kolo build has no GPU support (built without "
                         "CUDA/NCCL); use device=-1 (the CPU)" % (device,))
    count = _core.gpu_count()
    if count == 0 or (index is not None and index >= count):
        raise ValueError("join(device=%r): this process sees %d CUDA device(s) (check the "
                         "driver and CUDA_VISIBLE_DEVICES); use device=-1 (the CPU)"
                         % (device, count))
