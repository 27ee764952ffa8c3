"""The process group of kolo's torch.distributed backend (see the package's __init__.py):
what PyTorch needs registered on a group, the names that pair operations across ranks,
barrier and point-to-point, and kolo process sets for new groups. Its collectives are in
collectives.py."""

import torch
import torch.distributed as dist

from kolo.common import engine as _engine
from kolo.common.basics import cuda_built as _cuda_built
from kolo.common import basics as _basics
from kolo.torch.c10d.collectives import ProcessGroupCollectives
from kolo.torch.c10d.p2p import P2PChannels
from kolo.torch.c10d.work import KoloWork, _called_from_cpp, _context, _parent, caller_waits

BACKEND_NAME = "kolo"
_c10d = dist.distributed_c10d

# --- process sets ------------------------------------------------------------------------

# Sorted global ranks -> kolo process set id, for the sets this module registered.
_sets = {}


def _register_set(ranks):
    """The kolo set of ``ranks`` (sorted global ranks): 0 for all ranks; else registered,
    collectively (every rank calls this for every new group, members or not)."""
    if ranks == list(range(_engine.size())):
        return 0
    if tuple(ranks) not in _sets:
        _sets[tuple(ranks)] = _engine.add_process_set(ranks)
    return _sets[tuple(ranks)]


# kolo set id -> the last barrier started on it (see KoloProcessGroup.barrier).
_barriers = {}


def _forget_sets():
    _sets.clear()
    _barriers.clear()


_basics._on_new_run(_forget_sets)


# --- the process group -------------------------------------------------------------------

def _device_types():
    return ["cpu", "cuda"] if _cuda_built() else ["cpu"]


class _Placeholder(torch._C._distributed_c10d.Backend):
    """What a KoloProcessGroup registers as its backend for each device: PyTorch reads a
    group's name, devices and default backend from its registered backends
    (destroy_process_group(group) needs the name, monitored_barrier a CPU device). The
    group itself runs every operation; PyTorch's C++ reaches its Python methods."""

    def getBackendName(self):
        return BACKEND_NAME

    # PyTorch 2.15's Backend answers these through a Python override that calls itself
    # back (RecursionError, e.g. in batch_isend_irecv): the answers, given here.
    supports_coalescing = property(lambda self: False)
    supports_splitting = property(lambda self: False)
    supports_shrinking = property(lambda self: False)
    supports_reconfigure = property(lambda self: False)
    supports_window = property(lambda self: False)
    _supports_time_estimate = property(lambda self: False)


class KoloProcessGroup(ProcessGroupCollectives, dist.ProcessGroup):
    """A torch.distributed process group on kolo's runtime (one per torch group).
    ``global_ranks``: its members (global ranks, in group order); ``timeout``: bounds its
    point-to-point waits (collectives end by kolo's stall shutdown). Collective over the
    members (they make the group's point-to-point communicators)."""

    def __init__(self, rank, size, set_id, group_name, global_ranks, timeout=None):
        super().__init__(rank, size)
        self._set_id = set_id
        placeholder = _Placeholder(rank, size)
        self._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        for device in _device_types():
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM,
                                   placeholder)
        self._set_group_name(str(group_name))
        self._p2p = P2PChannels(global_ranks, timeout)
        tag = "" if set_id == 0 else "g%s." % group_name
        self._bucket_prefix = "ddp." + tag
        self._label_prefix = "c10d.%s" % tag
        self._graph_task = -1
        self._in_backward = 0
        self._unnamed = 0

    def getBackendName(self):
        return BACKEND_NAME

    def __repr__(self):
        return "KoloProcessGroup(rank=%d, size=%d, kolo process set %d)" % (
            self.rank(), self.size(), self._set_id)

    # names ----------------------------------------------------------------------------

    def _name(self, op, tensor=None):
        """The kolo name of the next operation (docs/api-torch-distributed.md, "DDP"); an
        empty name leaves the numbering to kolo, which records the caller's line for its
        errors. Its label, for the operations that its future's callbacks start, is kept
        for _start() (per thread)."""
        parent = _parent()
        task = torch._C._current_graph_task_id() if op == "allreduce" else -1
        if parent is not None:
            name = label = "%s.then%d" % (parent.label, parent.children)
            parent.children += 1
        elif task != -1:
            if task != self._graph_task:
                self._graph_task, self._in_backward = task, 0
            size = "" if tensor is None else ".%sx%d" % (str(tensor.dtype)[6:], tensor.numel())
            name = label = "%sbucket%d%s" % (self._bucket_prefix, self._in_backward, size)
            self._in_backward += 1
        else:
            self._unnamed += 1
            name, label = "", "%s%s.%d" % (self._label_prefix, op, self._unnamed)
        _context.label = label
        return name

    def _start(self, what, handle, finish, opts=None, timeout=None):
        """The Work of kolo's ``handle``; ``finish(output)`` makes its result. ``opts``: the
        call's options, which say whether the caller waits at once (work.caller_waits)."""
        work = KoloWork(what, getattr(_context, "label", what), handle, finish, timeout)
        waits = timeout is None and caller_waits(opts)  # a Python caller, then
        work.from_cpp = not waits and _called_from_cpp()
        return work.start(waits)

    # barrier, point to point (p2p.py) --------------------------------------------------

    def barrier(self, opts=None):
        """Bounded by ``dist.barrier(timeout=...)``, else by the group's timeout, as gloo's.
        One that a rank left on a timeout stays pending in kolo and is that rank's next
        barrier on the set (docs/api-torch-distributed.md, "Timeouts"): also when the other
        ranks' next barriers have completed it already (started anew, this rank's barrier
        would wait for a partner that never comes)."""
        timeout = getattr(opts, "timeout", None)
        if timeout is None or timeout.total_seconds() <= 0:
            timeout = self._p2p.timeout
        if 0 < _engine.stall_shutdown_seconds() <= timeout.total_seconds():
            timeout = None  # kolo's stall shutdown ends it first, naming the missing ranks
        left = _barriers.get(self._set_id)
        if left is not None and (left.left_on_timeout or not left.is_completed()):
            left.left_on_timeout = False  # this call takes it over
            left._timeout = timeout
            return left
        self._name("barrier")  # kolo names barriers itself; this sets the label
        work = self._start("barrier", _engine.barrier_async(self._set_id), lambda out: [],
                           opts, timeout)
        _barriers[self._set_id] = work
        return work

    def send(self, tensors, dst, tag=0):
        return self._p2p.start(tensors, dst, tag, recv=False)

    def recv(self, tensors, src, tag=0):
        return self._p2p.start(tensors, src, tag, recv=True)

    def recv_anysource(self, tensors, tag=0):
        return self._p2p.start(tensors, -1, tag, recv=True)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        return self._p2p.monitored_barrier(self.rank(), self.size(), timeout, wait_all_ranks)

    def shutdown(self):
        """destroy_process_group(): frees the group's point-to-point communicators (its kolo
        process set stays registered: kolo removes sets collectively, and PyTorch destroys
        a group on its members only)."""
        self._p2p.free()

    # new groups (PyTorch asks the default group on every rank) -------------------------

    def new_group(self, ranks, timeout=None, backend=None, pg_options=None, group_name=None,
                  group_desc=None):
        ranks = sorted(int(r) for r in ranks)
        me = _engine.rank()
        backend = str(dist.Backend(backend)) if backend else BACKEND_NAME
        if backend == BACKEND_NAME:
            if ranks != list(range(_engine.size())) and not str(group_name).isdigit():
                # PyTorch names a group by a hash of its ranks only with
                # use_local_synchronization=True, where non-members never come here.
                raise NotImplementedError(
                    "kolo's torch.distributed backend: dist.new_group(%s, "
                    "use_local_synchronization=True) is not supported: kolo registers a "
                    "group with every rank taking part; leave the option out" % ranks)
            set_id = _register_set(ranks)
            if me not in ranks:
                return None
            pg = KoloProcessGroup(ranks.index(me), len(ranks), set_id, group_name, ranks,
                                  timeout or self._p2p.timeout)
            pg._set_group_desc(group_desc or "undefined")
            return pg
        # Another backend beside kolo (e.g. gloo for send/recv): PyTorch's own path.
        store = _c10d._world.pg_map[self][1]
        pg, _ = _c10d._new_process_group_helper(
            len(ranks), ranks.index(me) if me in ranks else None, ranks, backend, store,
            group_name, backend_options=pg_options, timeout=timeout, group_desc=group_desc)
        if pg is dist.GroupMember.NON_GROUP_MEMBER:
            return None
        # PyTorch registers what new_group() returns; its helper already did.
        _c10d._unregister_process_group(group_name)
        tagged = _c10d._world.tags_to_pg.get("ptd:%s" % group_name, [])
        if pg in tagged:
            tagged.remove(pg)
        return pg
