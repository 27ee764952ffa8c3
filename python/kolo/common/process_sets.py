"""Process sets: subsets of ranks that run collectives among themselves.

The semantics are those of Horovod's ``horovod.common.process_sets``: ranks
are global ranks, kept sorted; ``rank()``/``size()`` return None until the
set is registered; adding a set whose ranks are already registered (the global
set included) raises ValueError. Registration is collective: every rank calls
``init(process_sets=...)`` / ``add_process_set`` / ``remove_process_set``
alike, so this module's registry is the same on every rank.
"""
import numbers

from kolo.common import engine as _engine
from kolo.common.engine import KoloInternalError

_NOT_RANKS = ("ProcessSet should be initialized with a list of process ranks or an mpi4py Comm "
              "object")


class ProcessSet:
    """A set of global ranks. Register it with ``init(process_sets=[...])`` or
    ``add_process_set()``, then pass it as ``process_set=`` to a collective."""
    process_set_id = None
    ranks = None
    mpi_comm = None

    def __init__(self, ranks_or_comm):
        try:
            items = list(ranks_or_comm)
        except TypeError:
            items = None
        if items is not None:
            if any(isinstance(r, bool) or not isinstance(r, numbers.Integral) for r in items):
                raise ValueError(_NOT_RANKS)
            self.ranks = sorted(int(r) for r in items)
            return
        try:
            from mpi4py import MPI
        except ImportError:
            raise ValueError(_NOT_RANKS) from None
        if not isinstance(ranks_or_comm, MPI.Comm):
            raise ValueError(_NOT_RANKS)
        self.mpi_comm = ranks_or_comm

    def _invalidate(self):
        self.process_set_id = None

    def size(self):
        """The number of ranks in the set, or None while it is not registered."""
        if self.process_set_id is None:
            return None
        return len(_query(_engine.process_set_ranks, self.process_set_id))

    def rank(self):
        """This process's rank within the set (its index in ``ranks``), or None while the
        set is not registered. ValueError when this process is not a member. Collectives
        take global ranks (``root_rank``), as in Horovod; this is for reading results."""
        if self.process_set_id is None:
            return None
        r = _query(_engine.process_set_rank, self.process_set_id)
        if r < 0:
            raise ValueError("Process is not part of provided process set.")
        return r

    def included(self):
        """Whether this process is a member, or None while ``ranks`` is unknown."""
        if self.ranks is None:
            return None
        return _query(_engine.rank) in self.ranks

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__


def _query(fn, *args):
    """Runs a core query; before init() that is Horovod's ValueError, not an internal error."""
    try:
        return fn(*args)
    except KoloInternalError as e:
        raise ValueError(str(e)) from None


global_process_set = ProcessSet([])
global_process_set.process_set_id = 0

# id -> ProcessSet object registered under that id (not the global set).
_registry = {}


def _set_id(process_set):
    """The core's id of ``process_set`` (None and global_process_set: 0)."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("process_set must be a kolo ProcessSet, got %s"
                        % type(process_set).__name__)
    if process_set.process_set_id is None:
        raise ValueError("process set %s is not registered; pass it to init(process_sets=) "
                         "or add_process_set() first" % process_set.ranks)
    return process_set.process_set_id


def root_in_set(root_rank, set_id):
    """The core's root for Horovod's ``root_rank``, a global rank also with a process set:
    the root's rank within the set; ValueError when it is not a member."""
    root_rank = int(root_rank)
    if set_id == 0:
        return root_rank
    ranks = _engine.process_set_ranks(set_id)
    if root_rank not in ranks:
        raise ValueError("broadcast root_rank %d is not a member of process set %d (global "
                         "ranks %s); root_rank is a global rank, as hvd.rank() returns"
                         % (root_rank, set_id, ranks))
    return ranks.index(root_rank)


_root_in_set = root_in_set


def _set_size(process_set):
    if process_set is None or process_set is global_process_set:
        return _engine.size()
    return process_set.size()


def _set_rank(process_set):
    if process_set is None or process_set is global_process_set:
        return _engine.rank()
    return process_set.rank()


def _find(ranks):
    if ranks == global_process_set.ranks:
        return global_process_set
    for ps in _registry.values():
        if ps.ranks == ranks:
            return ps
    return None


def _comm_ranks(sets, base_comm):
    """Fills ``ranks`` of sets given as mpi4py communicators: their ranks in ``base_comm``
    (kolo's communicator). Each process knows only its own communicators, so the lists
    are gathered: every rank then registers the same sets in the same order."""
    from mpi4py import MPI
    base = base_comm if base_comm is not None else MPI.COMM_WORLD
    mine = []
    for ps in sets:
        group = ps.mpi_comm.Get_group()
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), base.Get_group())
        if any(r == MPI.UNDEFINED for r in ranks):
            raise ValueError("process set communicator %s has processes outside kolo's "
                             "communicator" % ps.mpi_comm)
        ps.ranks = sorted(ranks)
        mine.append(ps.ranks)
    every = []
    for lists in base.allgather(mine):
        every.extend(r for r in lists if r not in every)
    return every


def _has_comm_sets(process_sets):
    """Whether ``process_sets`` (init()'s argument) holds a set given as a communicator."""
    if process_sets is None or isinstance(process_sets, str):
        return False
    sets = [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in process_sets]
    return any(ps.ranks is None for ps in sets)


def _prepare_init(process_sets, comm):
    """The rank lists to register at init, and the ProcessSet objects they belong to."""
    if process_sets is None:
        return [], []
    if isinstance(process_sets, str):
        if process_sets.lower() != "dynamic":
            raise ValueError("process_sets must be a list of ProcessSet or \"dynamic\", got %r"
                             % process_sets)
        return [], []  # kolo always allows add_process_set(); nothing to enable
    sets = [ps if isinstance(ps, ProcessSet) else ProcessSet(ps) for ps in process_sets]
    by_ranks = [ps for ps in sets if ps.ranks is not None]
    by_comm = [ps for ps in sets if ps.ranks is None]
    lists = [ps.ranks for ps in by_ranks]
    if by_comm:
        lists += [r for r in _comm_ranks(by_comm, comm) if r not in lists]
    unique = []
    for ranks in lists:
        if ranks not in unique:
            unique.append(ranks)
    return unique, sets


def _finish_init(registered, sets, size):
    """After the core registered ``registered`` (ids 1, 2, ... in order): ids for the
    objects, Horovod's ValueError for a set given twice or equal to the global set."""
    global_process_set.ranks = list(range(size))
    for i, ranks in enumerate(registered):
        # Another process's communicator has no object here: make one, for _find().
        ps = next((s for s in sets if s.ranks == ranks), None) or ProcessSet(ranks)
        ps.process_set_id = i + 1
        _registry[i + 1] = ps
    for i, ps in enumerate(sets):
        if _find(ps.ranks) is not ps:
            if _registry.get(ps.process_set_id) is ps:
                del _registry[ps.process_set_id]
            ps._invalidate()
            raise ValueError("kolo could not be initialized because process_sets entry number "
                             "%d is a duplicate: %s" % (i, ps))


def _reset():
    """After shutdown(): registered sets are gone with the runtime."""
    for ps in _registry.values():
        ps._invalidate()
    _registry.clear()


def add_process_set(process_set):
    """Registers a set (a ProcessSet or a list of global ranks) and returns the ProcessSet.
    Collective: every rank calls it with the same ranks. Unlike Horovod, no
    HOROVOD_DYNAMIC_PROCESS_SETS setting is needed."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.ranks is None:
        raise NotImplementedError(
            "Dynamically adding process sets defined by an MPI communicator is not "
            "implemented. Please build the process set via a list of ranks.")
    if _find(ps.ranks) is not None:
        raise ValueError("Attempted to add a duplicate process set: %s" % ps)
    ps.process_set_id = _engine.add_process_set(ps.ranks)
    _registry[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Removes a registered set; collective. Returns True when a set was removed, False
    for the global set or a set that is not registered (as Horovod)."""
    pid = process_set.process_set_id
    if pid is None or pid == 0:
        return False
    process_set._invalidate()
    _registry.pop(pid, None)
    try:
        _engine.remove_process_set(pid)
    except ValueError:  # unknown to the core
        return False
    return True
