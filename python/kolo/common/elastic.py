"""Horovod's elastic training, framework-independent (``horovod.common.elastic``): the
State classes that the framework states extend, and ``run_fn``, under which a training
function survives hosts that leave or join.

Elastic kolorun (``--min-np``/``--max-np``/``--host-discovery-script``) starts each
incarnation of the job with KOLO_ELASTIC=1 (docs/elastic.md); ``state.commit()`` keeps the
state where the next incarnation finds it (kolo.common.elastic_store, each host's
/dev/shm) and asks kolorun whether the hosts changed; a change ends every worker with
exit code 0 and kolorun starts the next incarnation, whose ``run`` loads the newest
commit that any rank holds and broadcasts it. A lost rank: on Open MPI 5
(KOLO_ELASTIC_IN_PLACE=1) the survivors shrink kolo's runtime to themselves and ``run``
resumes in the same processes (``_shrink_in_place``); elsewhere every worker exits and
kolorun restarts them. Free slots, on Open MPI 5: kolorun offers them at a commit, rank 0
starts new processes there while the job trains, and at the first commit after they
started every rank joins them and ``run`` resumes from that commit (``elastic_grow.check_or_grow``,
``_join_new_processes``).

Without KOLO_ELASTIC (plain kolorun: no restart is possible) ``run`` is Horovod's run
without its reset: it syncs from rank 0 and calls the function; commits stay in memory
(``restore()`` returns to the last one); errors propagate.
"""
import functools
import os
import sys
import warnings

from kolo.common import basics
from kolo.common import elastic_env
from kolo.common import elastic_grow
from kolo.common import elastic_resume
from kolo.common import elastic_store as store
from kolo.common.elastic_collectives import barrier as _barrier, rank0_answer as _rank0_answer
from kolo.common.exceptions import HostsUpdatedInterrupt, KoloInternalError


class State:
    """The state that ``run`` keeps across resets (Horovod's ``State``): a subclass says
    how to ``save``, ``restore`` and ``sync`` it.

    Args:
        bcast_object: broadcasts a picklable object: ``bcast_object(obj, root_rank)``.
        get_rank: returns this process's rank.
    """

    # How a commit's tensors are copied (kolo.common.elastic_store); a framework's state
    # sets its own.
    _codec = store.ArrayCodec()

    def __init__(self, bcast_object, get_rank):
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._reset_callbacks = []
        self._store = store.CommitStore()
        self._commit = store.NO_COMMIT  # the newest commit this state wrote or loaded
        self._generation = 0
        self._env = None  # an ElasticEnv while run() runs this state under elastic kolorun
        self._sync_root = 0
        self._save_after_sync = True

    def register_reset_callbacks(self, callbacks):
        """Registers functions called after a reset: under elastic kolorun, in a new
        incarnation that resumed from a commit, after the state is synced (e.g. to scale
        the learning rate by the new ``size()``)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (to memory, and under elastic kolorun to this host's store, at
        memory speed: raw tensor bytes into a reused mapping) and then checks for host
        updates: raises HostsUpdatedInterrupt on every rank when kolorun's hosts changed.
        Collective: every rank commits at the same point."""
        self.save()
        self.check_host_updates()

    def check_host_updates(self):
        """Under elastic kolorun, rank 0 asks kolorun whether the hosts changed and
        broadcasts the answer; every rank raises HostsUpdatedInterrupt when they did.
        Collective. Without elastic kolorun hosts never change: nothing to do."""
        if self._env is None:
            return
        env = self._env
        update = _rank0_answer(lambda: elastic_grow.check_or_grow(env), "kolo.elastic.check")
        if update == elastic_env.GROW:
            if _join_new_processes(self):
                raise _GrowInPlace()
            return  # they did not come: the job goes on as it was
        if update != elastic_env.NO_UPDATE:
            raise HostsUpdatedInterrupt(update == elastic_env.REMOVED)

    def save(self):
        """Saves the state to host memory."""
        raise NotImplementedError()

    def restore(self):
        """Restores the last committed state, undoing any uncommitted modifications."""
        raise NotImplementedError()

    def sync(self):
        """Synchronizes the state across workers (from ``self._sync_root``, rank 0 unless
        ``run`` found the newest commit on another rank)."""
        raise NotImplementedError()

    def reset(self):
        """Resets objects and variables following a reset event."""

    # --- what a commit keeps (kolo): a subclass that has a snapshot persists it ----------

    def _snapshot(self):
        """The tree that a commit keeps (tensors as leaves of ``_codec``), or None: a
        State subclass without one keeps its commits in memory only, by its own save()."""
        return None

    def _load_snapshot(self, tree):
        """Makes the state the committed ``tree``."""
        raise NotImplementedError()

    def _write_commit(self, commit=None):
        """Writes the snapshot as commit ``commit`` (default: the next number)."""
        tree = self._snapshot()
        if tree is None:
            return
        number = self._commit + 1 if commit is None else commit
        self._store.write(store.commit_key(self._generation, number), tree, self._codec)
        self._commit = number

    def _keep_synced(self):
        """After a sync, restore() returns to the synced state, not to this rank's values
        from before it (the ranks would train apart): the snapshot is saved again as the
        current commit. Horovod's TensorFlow states save in sync too. (``_resume`` saves
        itself once the reset callbacks have run, so its sync does not.)"""
        if self._save_after_sync:
            self._write_commit(self._commit)

    def _newest_commit(self):
        """The tree of the newest commit in this process's store, or None."""
        return self._store.newest(self._codec)


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and exposed as
    attributes (Horovod's ``ObjectState``). A commit keeps them pickled, so ``restore()``
    returns copies of the committed values.

    Args:
        bcast_object: broadcasts a picklable object: ``bcast_object(obj, root_rank)``.
        get_rank: returns this process's rank.
        kwargs: the objects.
    """

    def __init__(self, bcast_object, get_rank, **kwargs):
        self._saved_state = kwargs
        self._set_attrs()
        super().__init__(bcast_object=bcast_object, get_rank=get_rank)

    def save(self):
        self._saved_state = {attr: getattr(self, attr) for attr in self._saved_state}
        self._write_commit()

    def restore(self):
        tree = self._newest_commit()
        if tree is None:  # never saved: the values given at construction (Horovod's)
            self._set_attrs()
        else:
            self._load_snapshot(tree)

    def sync(self):
        if self._saved_state:
            self._saved_state = _broadcast_from(self._bcast_object, self._saved_state,
                                                self._sync_root)
            self._set_attrs()
        self._keep_synced()

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, value)

    def _snapshot(self):
        return {"objects": self._saved_state}

    def _load_snapshot(self, tree):
        self._saved_state = tree["objects"]
        self._set_attrs()


class StateHandler:
    """How one framework object of a :class:`HandlerState` is committed and synced (the
    handlers of Horovod's ``TorchState``): by default its ``state_dict()`` is the snapshot
    and ``load_state_dict()`` loads it; a framework says how it syncs. ``sync_first``: synced
    before the handlers without it."""
    sync_first = False

    def __init__(self, value):
        self.value = value

    def before_save(self):
        """Called on every rank before a save (may be collective)."""

    def snapshot(self):
        return self.value.state_dict()

    def load(self, snapshot):
        self.value.load_state_dict(snapshot)

    def sync(self, root_rank):
        raise NotImplementedError()


class HandlerState(ObjectState):
    """An ObjectState whose framework objects (models, optimizers, variables) are kept by
    handlers: ``handlers`` maps an attribute's name to its :class:`StateHandler`, and
    assigning the attribute gives the handler the new object. A commit keeps every
    handler's snapshot beside the plain objects (``kwargs``); before the first commit
    ``restore()`` returns to the state at construction."""

    def __init__(self, handlers, bcast_object, get_rank, **kwargs):
        self._handlers = handlers
        for name, handler in handlers.items():
            setattr(self, name, handler.value)
        super().__init__(bcast_object=bcast_object, get_rank=get_rank, **kwargs)
        self._write_commit(store.NO_COMMIT)  # what restore() returns to before a commit

    def save(self):
        for handler in self._handlers.values():
            handler.before_save()
        super().save()

    def sync(self):
        for handler in sorted(self._handlers.values(), key=lambda h: not h.sync_first):
            handler.sync(self._sync_root)
        super().sync()

    def __setattr__(self, name, value):
        handlers = self.__dict__.get("_handlers")
        if handlers and name in handlers:
            handlers[name].value = value  # committed by the next save()
        super().__setattr__(name, value)

    def _snapshot(self):
        tree = super()._snapshot()
        tree["handlers"] = {name: h.snapshot() for name, h in self._handlers.items()}
        return tree

    def _load_snapshot(self, tree):
        for name, handler in self._handlers.items():
            if name in tree["handlers"]:
                handler.load(tree["handlers"][name])
        super()._load_snapshot(tree)


def _broadcast_from(bcast_object, obj, root):
    # Horovod's bcast_object takes (obj, root_rank=0); a user's may take obj alone.
    return bcast_object(obj) if root == 0 else bcast_object(obj, root)


# --- run -----------------------------------------------------------------------------------

def run_fn(func, reset=None):
    """Wraps ``func(state, *args, **kwargs)`` as Horovod's ``run_fn`` does: the returned
    function syncs ``state`` and calls ``func``, under elastic kolorun across restarts.
    ``reset`` (Horovod's shutdown-then-init between attempts) is accepted and not called:
    kolo restarts the processes instead."""
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        env = elastic_env.read()
        if env is None:
            return _run_plain(func, state, args, kwargs)
        return _run_elastic(env, func, state, args, kwargs)
    return wrapper


def _run_plain(func, state, args, kwargs):
    """Horovod's loop without its reset: a HostsUpdatedInterrupt that the function raises
    itself calls the reset callbacks and starts it again (synced unless skip_sync); any
    other error propagates (no restart is possible without elastic kolorun)."""
    skip_sync = False
    while True:
        if not skip_sync:
            state.sync()
        try:
            return func(state, *args, **kwargs)
        except HostsUpdatedInterrupt as e:
            skip_sync = e.skip_sync
        state.on_reset()


def _run_elastic(env, func, state, args, kwargs):
    resume = _resume
    if env.replacement:  # started by rank 0 to grow the job: joined it in init()
        env = _grown(env, [])
        resume = functools.partial(elastic_resume.resume_grown, joined=True)
    while True:
        try:
            commit = resume(env, state)
            resume = _resume
            if basics.rank() == 0:
                elastic_env.resumed(env, commit, basics.size())
            result = func(state, *args, **kwargs)
            _barrier()  # every rank finished: the commits are no longer needed
            break
        except HostsUpdatedInterrupt:
            _leave_for_restart(env, state)
        except _GrowInPlace:
            env = _grown(env, elastic_grow.take_starting())
            resume = functools.partial(elastic_resume.resume_grown, joined=False)
        except KoloInternalError as e:
            env = _shrink_in_place(env, state, e)
            resume = elastic_resume.resume_in_place
    _release_new_processes()
    state._store.close(remove=True)
    state._env = None
    return result


def _shrink_in_place(env, state, error):
    """A collective failed. Under Open MPI 5 with fault tolerance (kolorun sets
    KOLO_ELASTIC_IN_PLACE=1) the survivors shrink kolo's communicators to themselves, kolorun
    agrees (rank 0 asks), and the returned environment is the next incarnation's, in these
    same processes: run() then resumes from the newest commit as after a restart. Elsewhere,
    or when the shrink or kolorun refuses, this process leaves for kolorun's restart."""
    if not env.in_place or basics.in_place_unavailable():
        _leave_after_failure(state, error)
    old_rank = basics.rank()
    # A rank alive that does not join the shrink: kolorun blames the ranks that did not
    # exit, not this one (code 75, launcher/elastic.cc).
    _join_or_leave(state, basics.shrink_in_place, old_rank,
                   "the survivors did not all join the shrink within 30 s: a rank is alive "
                   "but does not answer (stuck in its own code, or stopped)",
                   code=_GAVE_UP_IN_PLACE)
    try:
        _rank0_answer(lambda: elastic_env.shrunk(env, basics.size()) or 0, "kolo.elastic.shrunk")
    except (KoloInternalError, elastic_env.RendezvousError) as e:  # --reset-limit, --min-np
        _leave_after_failure(state, e, rank=old_rank)
    if basics.rank() == 0:
        message = (str(error).strip().splitlines() or [type(error).__name__])[0]
        sys.stderr.write("kolo: elastic: %s; the %d survivors go on in place (rank %d was %d)\n"
                         % (message, basics.size(), basics.rank(), old_rank))
        sys.stderr.flush()
    return env._replace(generation=env.generation + 1)


# --- growing in place (Open MPI 5): new processes join at a commit ------------------------

class _GrowInPlace(Exception):
    """Raised by a commit on every rank once the processes that rank 0 started joined:
    ``run`` then resumes from that commit with them."""


def _join_new_processes(state):
    """Every rank, at the commit where rank 0's new processes were ready: one runtime on
    all of them (the new ones do the same in their init()). Returns whether they joined;
    if not (one died after it initialized MPI, or stopped), the runtime is rebuilt on the
    ranks there before, rank 0 says why and tells kolorun, and the job goes on. A failure
    of the join itself leaves for kolorun's restart."""
    size = basics.size()
    where = " on " + elastic_env.format_slots(elastic_grow.starting) \
        if elastic_grow.starting else ""  # rank 0's
    _join_or_leave(state, basics.grow_in_place, basics.rank(),
                   "the new processes%s did not join within 30 s" % where)
    if basics.size() > size:
        return True
    if basics.rank() == 0:
        elastic_grow.give_up(state._env, basics.replacements())
    return False


def _release_new_processes():
    """Every rank, once the training ended: the processes that rank 0 is starting, which
    no commit joins now, are told to end (``elastic_grow.release``), and the other ranks
    wait for it: PRRTE fails a new process's MPI_Init once its parent, or every process of
    the job on its host, has ended. A rank lost after the training ended leaves nothing to
    do together."""
    def release():
        if elastic_grow.starting:
            elastic_grow.release()
        return 0
    try:
        _rank0_answer(release, "kolo.elastic.released")
    except KoloInternalError:
        pass


def _grown(env, hosts):
    """On every rank of the grown job: rank 0 tells kolorun (GREW: the new processes on
    ``hosts`` joined) and gives everyone the new incarnation's number (the new processes
    were told an older one)."""
    def tell_kolorun():
        elastic_env.grew(env, basics.size(), hosts)
        return env.generation + 1
    generation = _rank0_answer(tell_kolorun, "kolo.elastic.grown")
    return env._replace(generation=generation, replacement=False)


def _resume(env, state):
    """``elastic_resume.resume``, with a warning on rank 0 for a state without a snapshot."""
    if basics.rank() == 0 and type(state)._snapshot is State._snapshot:
        warnings.warn("kolo: elastic: %s has no snapshot (it is not an ObjectState, "
                      "TorchState or TensorFlowKerasState): its commits stay in memory, and "
                      "after a restart it starts from its initial state"
                      % type(state).__name__, RuntimeWarning, stacklevel=3)
    return elastic_resume.resume(env, state)


def _leave_for_restart(env, state):
    """Every rank leaves with exit code 0; rank 0 first tells kolorun to restart."""
    if basics.rank() == 0:
        elastic_env.restart(env, state._commit)
    state._store.close()
    basics.shutdown()
    raise SystemExit(0)


_GAVE_UP_IN_PLACE = 75  # EX_TEMPFAIL; kolorun's kGaveUpInPlace


def _join_or_leave(state, join, old_rank, not_joined, code=1):
    """``join()`` (the shrink, or the growth: True once every rank is in the new runtime),
    or this process leaves for kolorun's restart: with its error, or ``not_joined``'s
    words and exit ``code`` when a rank never came."""
    try:
        joined = join()
    except KoloInternalError as e:
        _leave_after_failure(state, e, rank=old_rank)
    if not joined:
        _leave_after_failure(state, KoloInternalError(not_joined), rank=old_rank, code=code)


def _leave_after_failure(state, error, rank=None, code=1):
    """A collective failed (a rank died, or the job broke): this process cannot go on,
    and kolorun restarts the job from the newest commit. One line, then exit ``code`` (1)
    at once (MPI_Finalize could wait for ranks that are gone)."""
    if rank is None:
        rank = basics.rank() if basics.is_initialized() else -1
    message = (str(error).strip().splitlines() or [type(error).__name__])[0]
    where = "its last commit (commit %d here)" % state._commit if state._commit >= 0 \
        else "the start (no commit yet)"
    sys.stdout.flush()
    sys.stderr.write("kolo: elastic: rank %d: %s; the job will be restarted by kolorun "
                     "from %s\n" % (rank, message, where))
    sys.stderr.flush()
    os._exit(code)


__all__ = ["State", "ObjectState", "StateHandler", "HandlerState", "HostsUpdatedInterrupt",
           "run_fn"]
