"""Where an incarnation of an elastic job resumes (kolo.common.elastic's ``run``): from the
newest commit that any rank holds. Three ways, from the most general to the cheapest:

- ``resume``: a new incarnation of fresh processes (a restart), or any case the others
  do not cover: the ranks agree on the newest commit, the lowest rank holding it loads it,
  and the state's ``sync()`` broadcasts all of it to every rank.
- ``resume_in_place``: the survivors of a shrink, which committed together: each makes
  its own slot equal to rank 0's by receiving only the chunks that differ, and loads it.
- ``resume_grown``: after new processes joined at a commit (growing in place): the ranks
  that were there do as the survivors of a shrink, and only the new processes receive the
  whole commit, from rank 0.
"""
import numpy as np

from kolo.common import basics
from kolo.common import elastic_store as store
from kolo.common import host
from kolo.common.elastic_collectives import (
    allgather_int64 as _allgather_int64, allgather_int64_rows as _allgather_int64_rows,
    barrier as _barrier)


def resume(env, state):
    """The start of every incarnation: the ranks agree on the newest complete commit that
    any of them holds (each reads its host's store), the lowest rank holding it loads it
    and is the root of the sync. Returns the commit's number (-1: none, a fresh start)."""
    directory = store.job_directory(env.directory, env.job)
    key, path = store.newest_in(directory)
    keys = _allgather_int64(key, "kolo.elastic.resume")
    newest = max(keys)
    root = keys.index(newest) if newest >= 0 else 0
    _, commit = store.key_parts(newest)
    if newest >= 0 and basics.rank() == root:
        _, tree = store.read_file(path, state._codec)
        state._load_snapshot(tree)
    state._generation = env.generation
    state._store.attach(directory, env.generation, basics.rank())
    state._env = env
    state._sync_root = root
    state._save_after_sync = False  # saved below, after the reset
    try:
        state.sync()
    finally:
        state._sync_root = 0
        state._save_after_sync = True
    if commit >= 0:
        state.on_reset()
    # Saved again as the same commit (-1: as the state to restore, not a commit): this
    # rank's store now holds the resumed state under this generation's key, newer than
    # any file of earlier incarnations on this host, so those files can go.
    state._commit = commit - 1
    state.save()
    state._commit = commit
    store.remove_older_generations(directory, env.generation)
    return commit


def resume_in_place(env, state):
    """The start of an incarnation that shrank in place. The survivors committed together,
    so they usually all hold the same newest commit in their own slots (the same key and
    layout, and no newer commit in any of their hosts' stores). Then, instead of loading
    the commit on one rank and broadcasting all of it, each survivor makes its slot equal
    to rank 0's by receiving only the 1 MiB chunks that differ (the statistics that ranks
    keep from their own data; usually nothing else), loads its own copy, and renames its
    slot files to the new generation and rank: the state ends as after ``resume`` (rank
    0's commit everywhere), without moving what every rank already holds. Otherwise this is
    ``resume``."""
    return _resume_from_own_slots(env, state, joined=False)


def resume_grown(env, state, joined):
    """The start of an incarnation that grew in place: the ranks that were there committed
    together just before the new processes (``joined`` is True in those) joined, ranked
    after them. The ranks there before equalize their slots as after a shrink
    (``resume_in_place``); rank 0
    sends its whole slot to the new processes alone (an alltoall in which every other rank
    sends and receives nothing), which load it. The state ends as after ``resume``: rank
    0's commit everywhere. Falls back to ``resume`` where the ranks there before do not
    all hold the same newest commit."""
    return _resume_from_own_slots(env, state, joined=joined)


def _resume_from_own_slots(env, state, joined):
    """``resume_in_place`` (``joined`` False on every rank) and ``resume_grown``."""
    directory = store.job_directory(env.directory, env.job)
    own, end = state._store.newest_key(), state._store.newest_end()
    on_host, _ = store.newest_in(directory)
    rows = _allgather_int64_rows([int(joined), own, on_host, end],
                                 "kolo.elastic.resume_own_slots")
    there = [row for row in rows if not row[0]]
    key, end = there[0][1], there[0][3]
    if key < 0 or any(row[1] != key or row[3] != end for row in there) \
            or any(row[2] > key for row in rows):
        return resume(env, state)
    if joined:
        state._store.attach(directory, env.generation, basics.rank())
    _equalize_slots(state, rows, end)
    # Loaded on every rank, also where the state in memory is the commit itself: loading
    # is what makes it the new size's (the sampler repartitions the rest of the epoch).
    state._load_snapshot(state._store.newest(state._codec))
    state._generation = env.generation
    if not joined:
        state._store.rename(env.generation, basics.rank())
    state._env = env
    state.on_reset()
    _, state._commit = store.key_parts(key)
    _barrier()  # every rank renamed or wrote its files: the older generations' can go
    store.remove_older_generations(directory, env.generation)
    return state._commit


def _equalize_slots(state, rows, end):
    """Makes this rank's newest slot rank 0's (its first ``end`` bytes): the ranks there
    before receive the 1 MiB chunks where any of them differs from rank 0 (a broadcast),
    the ranks that ``rows`` marks as joined all of it (an alltoall from rank 0, in which
    the others send and receive nothing)."""
    rank, joined = basics.rank(), rows[basics.rank()][0]
    chunk = store.CommitStore.CHUNK
    count = (end + chunk - 1) // chunk
    digests = np.zeros((count, 2), np.int64) if joined else state._store.chunk_digests(end)
    [zero] = host.broadcast_kernel(0, "kolo.elastic.resume_digests", 0)([digests])
    differ = np.zeros(count, np.int64) if joined \
        else np.any(zero != digests, axis=1).astype(np.int64)
    [every] = host.allgather_kernel("kolo.elastic.resume_differ", 0)([differ[None, :]])
    chunks = np.flatnonzero(every.any(axis=0)).tolist()
    if chunks:
        payload = np.empty(sum(min(end, (c + 1) * chunk) - c * chunk for c in chunks),
                           np.uint8) if joined else state._store.read_chunks(chunks, end)
        [payload] = host.broadcast_kernel(0, "kolo.elastic.resume_chunks", 0)([payload])
        if rank != 0 and not joined:
            state._store.write_chunks(chunks, end, payload)
    if any(row[0] for row in rows):
        pieces = [np.empty(0, np.uint8)] * len(rows)
        if rank == 0:
            pieces = [state._store.newest_bytes(end) if row[0] else pieces[0] for row in rows]
        splits = np.array([len(p) for p in pieces], np.int64)
        [whole, _] = host.alltoall_kernel("kolo.elastic.resume_slots", 0)(
            [np.concatenate(pieces), splits])
        if joined:
            state._store.write_whole(whole)
