"""Starting and stopping kolo, topology, and what this build has (Horovod's
``HorovodBasics``: the same names, return types and errors)."""
import atexit

import torch

from kolo import _core
from kolo.torch import process_sets as _ps

def _comm_handle(comm):
    if comm is None:
        return 0
    if isinstance(comm, (list, tuple)):
        raise NotImplementedError("init(comm=[ranks]) is not supported; pass an mpi4py "
                                  "communicator (e.g. MPI.COMM_WORLD.Split(...)) or use "
                                  "process sets")
    try:
        from mpi4py import MPI
    except ImportError:
        raise TypeError("init(comm=...) takes an mpi4py communicator, but mpi4py is not "
                        "installed (Debian: python3-mpi4py)") from None
    if not isinstance(comm, MPI.Comm):
        raise TypeError("init(comm=...) takes an mpi4py communicator, got %s"
                        % type(comm).__name__)
    return MPI._handleof(comm)


def init(comm=None, process_sets=None):
    """Starts kolo (MPI and the background thread); every rank calls it. Idempotent.

    ``comm``: an mpi4py communicator to run on (kolo duplicates it). ``process_sets``:
    ProcessSet objects (ranks or mpi4py communicators) or rank lists to register now, the
    same on every rank; ``"dynamic"`` is accepted (sets can always be added later).
    """
    if _core.is_initialized():  # by an earlier init(), or by kolo.numpy
        for ps in ([] if process_sets is None or isinstance(process_sets, str)
                   else process_sets):
            ps = ps if isinstance(ps, _ps.ProcessSet) else _ps.ProcessSet(ps)
            known = _ps._find(ps.ranks)
            if known is None:
                raise ValueError("kolo is already initialized and %s is not registered; use "
                                 "add_process_set()" % ps)
            ps.process_set_id = known.process_set_id
    else:
        registered, sets = _ps._prepare_init(process_sets, comm)
        _core.init(registered, _comm_handle(comm))
        _reset_run()
        _ps._finish_init(registered, sets, _core.size())
    _ps.global_process_set.ranks = list(range(_core.size()))


def _reset_run():
    from kolo.torch import mpi_ops  # the handle table belongs to the run that made it
    mpi_ops._reset_handles()


def shutdown():
    """Stops kolo on every rank; pending operations fail with KoloInternalError. A later
    init() starts it again when the application owns MPI (init(comm=...) with mpi4py)."""
    _core.shutdown()
    _reset_run()
    _ps._reset()


atexit.register(shutdown)


def start_timeline(file_path, mark_cycles=False):
    """Starts writing a Chrome-trace timeline (rank 0 writes it). Unlike Horovod, no
    HOROVOD_TIMELINE setting is needed beforehand."""
    _ps._query(_core.start_timeline, str(file_path), bool(mark_cycles))


def stop_timeline():
    _ps._query(_core.stop_timeline)


def _checked(query):
    def run():
        return _ps._query(query)
    run.__name__ = query.__name__
    run.__doc__ = "As Horovod: ValueError before init()."
    return run


is_initialized = _core.is_initialized
rank = _checked(_core.rank)
size = _checked(_core.size)
local_rank = _checked(_core.local_rank)
local_size = _checked(_core.local_size)
cross_rank = _checked(_core.cross_rank)
cross_size = _checked(_core.cross_size)


def mpi_threads_supported():
    """Whether MPI was initialized with MPI_THREAD_MULTIPLE (bool)."""
    return bool(_ps._query(_core.mpi_threads_supported))


def is_homogeneous():
    """Whether every host runs the same number of ranks (bool)."""
    return bool(_ps._query(_core.is_homogeneous))


# What this build has. kolo always runs on MPI; it has no Gloo, DDL, oneCCL or ROCm path.
def mpi_built():
    return True


def mpi_enabled():
    return True


def gloo_built():
    return False


def gloo_enabled():
    return False


def ddl_built():
    return False


def ccl_built():
    return False


def rocm_built():
    return False


def cuda_built():
    return bool(_core.cuda_built())


def nccl_built():
    """NCCL's version code (e.g. 21805 for 2.18.5) when built with NCCL, else 0 (an int,
    as Horovod's)."""
    version = getattr(_core, "nccl_version", None)
    if version is not None:
        return int(version())
    return 1 if _core.cuda_built() else 0  # an older _core: built or not, no version


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
