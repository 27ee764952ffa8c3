"""Starting and stopping kolo, topology, and what this build has (Horovod's
``HorovodBasics``: the same names, return types and errors)."""
import atexit
import numbers
import os
import sys

from kolo import _core
from kolo.common import launch_checks as _checks
from kolo.common import process_sets as _ps


def _world_ranks(comm):
    """``comm`` as Horovod's list of ranks of MPI_COMM_WORLD, or None when it is no list
    (None, or an mpi4py communicator, which is not iterable). Any iterable of ints, as in
    Horovod; empty means every rank, as None does."""
    if comm is None or isinstance(comm, (str, bytes)):
        return None
    try:
        items = list(comm)
    except TypeError:
        return None
    if any(isinstance(r, bool) or not isinstance(r, numbers.Integral) for r in items):
        raise TypeError("init(comm=...) takes a list of ranks of MPI_COMM_WORLD (ints) or an "
                        "mpi4py communicator, got %r" % (items,))
    return [int(r) for r in items]


def _comm_handle(comm):
    if comm is None:
        return 0
    what = "init(comm=...) takes a list of ranks or an mpi4py communicator"
    if isinstance(comm, (str, bytes)):
        raise TypeError("%s, got %s" % (what, type(comm).__name__))
    try:
        from mpi4py import MPI
    except ImportError:
        raise TypeError("%s, but mpi4py is not installed (Debian: python3-mpi4py)"
                        % what) from None
    if not isinstance(comm, MPI.Comm):
        raise TypeError("%s, got %s" % (what, type(comm).__name__))
    return MPI._handleof(comm)


def _spans_processes(comm):
    """Whether ``comm`` is an mpi4py communicator of several processes (the application
    made its job, whoever started the processes)."""
    get_size = getattr(comm, "Get_size", None)
    return callable(get_size) and get_size() > 1


def init(comm=None, process_sets=None):
    """Starts kolo (MPI and the background thread); every rank calls it. Idempotent.

    ``comm``: None (every rank of MPI_COMM_WORLD); a list of ranks of MPI_COMM_WORLD to run
    on, whose order gives their kolo ranks (Horovod's ``init(comm=[ranks])``: every listed
    rank passes the same list, and a process that is not in its list gets ValueError); or
    an mpi4py communicator to run on (kolo duplicates it). ``process_sets``: ProcessSet
    objects (ranks or mpi4py communicators) or rank lists to register now, the same on
    every rank; ``"dynamic"`` is accepted (sets can always be added later).

    A process that no MPI launcher started, but that is one of several (WORLD_SIZE > 1, or
    one host of a SageMaker job without MPI), gets RuntimeError: kolo would run each as a
    job of its own (kolo.common.launch_checks).
    """
    # An mpi4py communicator of several processes is a job the application made.
    if not _core.is_initialized() and not _spans_processes(comm):
        _checks.refuse_separate_copies()
    _start(comm, process_sets)


def _start(comm=None, process_sets=None):
    """init() without the launch checks: also for kolo.common.join, when torch.distributed's
    job is MPI's or this one process, whatever WORLD_SIZE says."""
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
        world_ranks = _world_ranks(comm)
        if world_ranks is None:
            registered, sets = _ps._prepare_init(process_sets, comm)
            if not _core.init(registered, _comm_handle(comm)):
                _end_as_not_needed()
        else:
            if _ps._has_comm_sets(process_sets):
                raise NotImplementedError(  # Horovod's words
                    "At this time process sets defined via MPI communicators are only "
                    "supported when calling hvd.init() with comm set to a global MPI "
                    "communicator.")
            registered, sets = _ps._prepare_init(process_sets, None)
            _core.init(registered, 0, world_ranks)
        _reset_run()
        _ps._finish_init(registered, sets, _core.size())
    _ps.global_process_set.ranks = list(range(_core.size()))


def _end_as_not_needed():
    """In a process that kolo started to grow an elastic job in place (Open MPI 5): the
    training ended before this process joined it. It is no part of the job, and ends with
    exit code 0 (MPI is finalized at the exit)."""
    sys.stdout.flush()
    sys.stderr.write("kolo: elastic: the training ended before this new process (pid %d) "
                     "joined it; it is not needed and exits\n" % os.getpid())
    sys.stderr.flush()
    raise SystemExit(0)


# Called on init() and shutdown(): each binding's handle table belongs to the run that
# made it (kolo.torch and kolo.tensorflow share the one runtime of the process).
_run_resets = []


def _on_new_run(reset):
    """Registers ``reset()``, called whenever a run starts or ends."""
    _run_resets.append(reset)


def _reset_run():
    for reset in _run_resets:
        reset()


def shutdown():
    """Stops kolo on every rank; pending operations fail with KoloInternalError. A later
    init() starts it again when the application owns MPI (init(comm=...) with mpi4py)."""
    _core.shutdown()
    _reset_run()
    _ps._reset()


atexit.register(shutdown)


def in_place_unavailable():
    """Why this process cannot recover from a lost rank in place ("" when it can): its MPI
    has no ULFM (Open MPI 5's fault tolerance), or kolorun did not turn it on
    (KOLO_ELASTIC_IN_PLACE)."""
    return _core.in_place_unavailable()


def shrink_in_place():
    """After a lost rank or host (a collective failed with KoloInternalError), on every
    survivor: kolo's runtime is rebuilt on the survivors, ranked in their old order, with
    the global process set only (registered sets are gone, as after shutdown()). Used by
    kolo.common.elastic's run; raises KoloInternalError naming why where it cannot. Returns
    False, changing nothing, when not every living rank joined within 30 s (one alive but
    stuck in its own code): this process must then leave."""
    if not _core.shrink_in_place():
        return False
    _reset_run()
    _ps._reset()
    _ps._finish_init([], [], _core.size())
    return True


def start_replacements(command, args, hosts, environment, added=()):
    """Growing in place (Open MPI 5 with fault tolerance): starts ``command args`` as new
    processes, one per entry of ``hosts``, each with ``environment`` (a dict), from this
    rank (rank 0) on a thread of its own, and returns at once; the job trains on meanwhile.
    The hosts of ``added`` join mpirun's allocation. Raises KoloInternalError where the
    job cannot grow in place."""
    _core.start_replacements(command, list(args), list(hosts),
                             ["%s=%s" % kv for kv in environment.items()], list(added))


def replacements():
    """Where the processes of start_replacements are: "none" (none started), "starting",
    "ready" (every one has initialized MPI: grow_in_place may run), or why they failed
    (then they are forgotten)."""
    return _core.replacements()


def abandon_replacements():
    """Gives up the processes of start_replacements that are still starting."""
    _core.abandon_replacements()


def release_replacements(patience):
    """Rank 0, when the training ended before the processes of start_replacements joined:
    waits up to ``patience`` seconds for them to initialize MPI, then tells them that there
    is nothing to join (they exit with code 0). Returns "" when they were told (or none were
    starting), else why not."""
    return _core.release_replacements(float(patience))


def grow_in_place():
    """Collective over this job's ranks and the new processes that rank 0 started (once
    replacements() said "ready" there): kolo's runtime is rebuilt on all of them, the
    ranks there before first in their order, with the global process set only (registered
    sets are gone, as after shutdown()). Used by kolo.common.elastic's run. When the new
    processes do not come (one died after it initialized MPI, or stopped: no answer to rank
    0 within 10 s), the runtime is rebuilt on this job's ranks alone (size() is unchanged)
    and replacements() says why on rank 0. Returns False, changing nothing, when the join
    did not end within 30 s: this process must then leave."""
    if not _core.grow_in_place():
        return False
    _reset_run()
    _ps._reset()
    _ps._finish_init([], [], _core.size())
    return True


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


