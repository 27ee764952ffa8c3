"""The commit store of kolo.common.elastic, in one process (no MPI): what a commit keeps,
the order of commits, and that a commit cut short by SIGKILL at any point of its writing
is never loaded (the previous one is), and a torn or garbage file is ignored with a
warning."""
import multiprocessing
import os
import signal
import warnings

import numpy as np
import pytest
import torch

from kolo.common import elastic_env
from kolo.common import elastic_store as store
from kolo.torch.elastic.state import TorchCodec

CODEC = TorchCodec()


def tree_of(step):
    """A commit's tree: tensors of several dtypes and shapes, NumPy arrays, objects."""
    g = torch.Generator().manual_seed(step)
    return {
        "weights": torch.randn(300, 500, generator=g, dtype=torch.float64),
        "half": torch.randn(7, generator=g).to(torch.bfloat16),
        "scalar": torch.tensor(float(step)),
        "empty": torch.zeros(0, 3),
        "strided": torch.arange(12.0).reshape(3, 4).t(),
        "mask": np.arange(10) % (step + 2) == 0,
        "objects": {"step": step, "names": ["a", "b"], "none": None},
    }


def assert_same(got, want):
    assert got.keys() == want.keys()
    for k, w in want.items():
        g = got[k]
        if isinstance(w, torch.Tensor):
            assert g.dtype == w.dtype and g.shape == w.shape, k
            assert torch.equal(g, w), "leaf %s differs" % k
        elif isinstance(w, np.ndarray):
            assert g.dtype == w.dtype and np.array_equal(g, w), k
        else:
            assert g == w, k


def test_commit_round_trip_in_memory_and_in_files(tmp_path):
    mem = store.CommitStore()
    assert mem.newest(CODEC) is None
    mem.write(store.commit_key(0, 0), tree_of(0), CODEC)
    mem.write(store.commit_key(0, 1), tree_of(1), CODEC)
    assert_same(mem.newest(CODEC), tree_of(1))
    files = store.CommitStore()
    files.attach(str(tmp_path), 3, 1)
    files.write(store.commit_key(3, 7), tree_of(7), CODEC)
    key, path = store.newest_in(str(tmp_path))
    assert store.key_parts(key) == (3, 7) and path.endswith("g3-r1-s0.commit")
    assert_same(store.read_file(path, CODEC)[1], tree_of(7))
    files.close(remove=True)
    assert not tmp_path.exists()  # the last rank's files gone, the directory too


def test_writing_keeps_the_newest_commit_until_the_next_is_complete(tmp_path):
    s = store.CommitStore()
    s.attach(str(tmp_path), 0, 0)
    for step in range(5):
        s.write(store.commit_key(0, step), tree_of(step), CODEC)
        # Both slots: the newest and the one before (the one the next commit overwrites).
        keys = sorted(store.read_file(str(p))[0] for p in tmp_path.iterdir())
        assert [store.key_parts(k)[1] for k in keys] == list(range(max(0, step - 1), step + 1))
    assert_same(s.newest(CODEC), tree_of(4))


def test_the_chunks_that_differ_make_one_commit_equal_to_anothers(tmp_path):
    # A reset in place: two survivors' commits of the same key and layout that differ in
    # a few values (a statistic each rank keeps) become equal by the differing chunks.
    mine, rank0 = store.CommitStore(), store.CommitStore()
    mine.attach(str(tmp_path / "a"), 0, 1)
    rank0.attach(str(tmp_path / "b"), 0, 0)
    big = torch.arange(3 << 18, dtype=torch.float32)  # 3 MiB: spans whole chunks
    theirs = dict(tree_of(5), big=big.clone())
    ours = dict(tree_of(5), big=big.clone())
    ours["big"][-1] = -1.0  # in the last chunk of the leaves
    ours["weights"][0, 0] = 0.5  # in the first
    key = store.commit_key(0, 5)
    mine.write(key, ours, CODEC)
    rank0.write(key, theirs, CODEC)
    end = mine.newest_end()
    assert end == rank0.newest_end() and end % 8 == 0
    differ = np.flatnonzero(np.any(mine.chunk_digests(end) != rank0.chunk_digests(end),
                                   axis=1)).tolist()
    assert 1 <= len(differ) <= 2 and len(mine.chunk_digests(end)) >= 4, differ
    mine.write_chunks(differ, end, rank0.read_chunks(differ, end))
    assert (mine.chunk_digests(end) == rank0.chunk_digests(end)).all()
    assert_same({k: v for k, v in mine.newest(CODEC).items() if k != "big"}, tree_of(5))
    assert torch.equal(mine.newest(CODEC)["big"], big)
    # Renamed for a new generation and rank, the commit stays.
    mine.rename(1, 0)
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["g1-r0-s0.commit"]  # one written
    assert store.key_parts(store.newest_in(str(tmp_path / "a"))[0]) == (0, 5)
    mine.close(remove=True)
    rank0.close(remove=True)


def test_a_new_process_takes_rank_0s_whole_slot_as_its_commit(tmp_path):
    # Growing in place: a new process, whose store holds only its state at construction,
    # receives rank 0's slot bytes and holds rank 0's commit, beside it on its host.
    new, rank0 = store.CommitStore(), store.CommitStore()
    new.write(store.NO_COMMIT, tree_of(0), CODEC)  # HandlerState's, in memory
    rank0.attach(str(tmp_path / "b"), 0, 0)
    rank0.write(store.commit_key(0, 9), tree_of(9), CODEC)
    new.attach(str(tmp_path / "a"), 1, 2)
    new.write_whole(np.array(rank0.newest_bytes(rank0.newest_end())))
    assert new.newest_key() == rank0.newest_key() == store.commit_key(0, 9)
    assert_same(new.newest(CODEC), tree_of(9))
    assert store.newest_in(str(tmp_path / "a"))[0] == store.commit_key(0, 9)
    new.write(store.commit_key(1, 10), tree_of(10), CODEC)  # the next commit, the other slot
    assert_same(new.newest(CODEC), tree_of(10))
    new.close(remove=True)
    rank0.close(remove=True)


def test_a_later_generation_wins_over_a_higher_commit_number(tmp_path):
    old, new = store.CommitStore(), store.CommitStore()
    old.attach(str(tmp_path), 0, 5)
    old.write(store.commit_key(0, 12), tree_of(12), CODEC)  # a host that was away
    new.attach(str(tmp_path), 1, 0)
    new.write(store.commit_key(1, 8), tree_of(8), CODEC)
    key, _ = store.newest_in(str(tmp_path))
    assert store.key_parts(key) == (1, 8)
    store.remove_older_generations(str(tmp_path), 1)
    assert sorted(os.listdir(tmp_path)) == ["g1-r0-s0.commit"]


def test_no_commit_is_not_loaded(tmp_path):
    s = store.CommitStore()
    s.attach(str(tmp_path), 2, 0)
    s.write(store.NO_COMMIT, tree_of(0), CODEC)  # the state to restore, not a commit
    assert store.newest_in(str(tmp_path)) == (store.NO_COMMIT, None)


# --- a process killed while it commits ---------------------------------------------------

def _kill_self():
    os.kill(os.getpid(), signal.SIGKILL)


class _Dies:
    """Stands in for a struct.Struct whose pack() is the point where the process dies."""

    def __init__(self, real):
        self.real, self.size = real, real.size

    def pack(self, *args):
        _kill_self()


def _commit_then_die(directory, where):
    """In a child: commit 0 completely, then die at ``where`` inside commit 1."""
    torch.set_num_threads(1)
    s = store.CommitStore()
    s.attach(directory, 0, 0)
    s.write(store.commit_key(0, 0), tree_of(0), CODEC)
    tree = tree_of(1)
    if where in ("first byte", "half a leaf"):
        real_leaf = CODEC.leaf

        class Dying(TorchCodec):
            def leaf(self, obj):
                found = real_leaf(obj)
                if found is None or found[2] < 1000:
                    return found
                tag, shape, nbytes, write = found

                def half_then_die(dst):
                    if where == "half a leaf":
                        write(dst)  # all of it, then undo the second half's bytes: half
                        dst[nbytes // 2:] = 0
                    _kill_self()
                return tag, shape, nbytes, half_then_die
        s.write(store.commit_key(0, 1), tree, Dying())
    elif where == "before the header":
        store._FIELDS = _Dies(store._FIELDS)
        s.write(store.commit_key(0, 1), tree, CODEC)
    elif where == "before the checksum":
        store._CRC = _Dies(store._CRC)
        s.write(store.commit_key(0, 1), tree, CODEC)
    os._exit(3)  # not reached


@pytest.mark.parametrize("where", ["first byte", "half a leaf", "before the header",
                                   "before the checksum"])
def test_a_commit_killed_at_any_point_is_never_loaded(tmp_path, where):
    # A fresh interpreter (not fork: torch's thread pool does not survive a fork).
    child = multiprocessing.get_context("spawn").Process(target=_commit_then_die,
                                                         args=(str(tmp_path), where))
    child.start()
    child.join(60)
    assert child.exitcode == -signal.SIGKILL, "the child did not die in its commit: %s" % (
        child.exitcode,)
    with pytest.warns(RuntimeWarning, match=r"ignoring .*g0-r0-s1\.commit: .*"):
        key, path = store.newest_in(str(tmp_path))
    assert store.key_parts(key) == (0, 0)
    assert_same(store.read_file(path, CODEC)[1], tree_of(0))


def test_torn_and_garbage_files_are_ignored_with_a_warning(tmp_path):
    good = store.CommitStore()
    good.attach(str(tmp_path), 0, 0)
    good.write(store.commit_key(0, 4), tree_of(4), CODEC)
    good_path = tmp_path / "g0-r0-s0.commit"
    data = good_path.read_bytes()
    (tmp_path / "g0-r1-s0.commit").write_bytes(os.urandom(8192))  # garbage
    (tmp_path / "g0-r2-s0.commit").write_bytes(data[:-(1 << 20)])  # truncated
    corrupt = bytearray(data)  # a higher commit whose skeleton is damaged
    fields = bytearray(corrupt[:store._FIELDS.size])
    fields[16:24] = (9).to_bytes(8, "little")
    corrupt[:store._FIELDS.size] = fields
    import zlib
    corrupt[store._FIELDS.size:store._HEADER_END] = zlib.crc32(bytes(fields)).to_bytes(4,
                                                                                      "little")
    skel_off, skel_len = store._FIELDS.unpack(bytes(fields))[3:5]
    corrupt[skel_off + skel_len // 2] ^= 0xFF
    (tmp_path / "g0-r3-s0.commit").write_bytes(bytes(corrupt))
    (tmp_path / "g0-r4-s0.commit").write_bytes(b"")  # created, never written
    (tmp_path / "notes.txt").write_text("not ours: left alone, no warning")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        key, path = store.newest_in(str(tmp_path))
    reasons = sorted(str(w.message) for w in caught)
    assert len(reasons) == 4, reasons
    assert any("r1-s0.commit: not a complete kolo commit (bad header)" in r for r in reasons)
    assert any("r2-s0.commit: truncated" in r for r in reasons)
    assert any("r3-s0.commit: not a complete kolo commit (bad skeleton checksum)" in r
               for r in reasons)
    assert any("r4-s0.commit: incomplete commit" in r for r in reasons)
    assert store.key_parts(key) == (0, 4) and path == str(good_path)


def test_a_full_store_is_a_clear_error_not_a_crash(tmp_path, monkeypatch):
    def no_space(fd, offset, length):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "posix_fallocate", no_space)
    s = store.CommitStore()
    s.attach(str(tmp_path), 0, 0)
    with pytest.raises(OSError, match="cannot keep a commit of 1 MiB in .*KOLO_ELASTIC_DIR"):
        s.write(store.commit_key(0, 0), {"x": np.zeros(10)}, CODEC)


# --- the environment that elastic kolorun sets ------------------------------------------------

ENV = {"KOLO_ELASTIC": "1", "KOLO_ELASTIC_JOB": "0123456789abcdef0123456789ABCDEF",
       "KOLO_ELASTIC_GENERATION": "2", "KOLORUN_RENDEZVOUS": "10.0.0.1:4321",
       "KOLORUN_TOKEN": "tok"}


def test_the_environment_is_read_and_checked():
    assert elastic_env.read({}) is None
    assert elastic_env.read({"KOLO_ELASTIC": "0"}) is None
    env = elastic_env.read(ENV)
    assert env == elastic_env.ElasticEnv("0123456789abcdef0123456789abcdef", 2,
                                         ("10.0.0.1", 4321), "tok", "/dev/shm")
    assert elastic_env.read(dict(ENV, KOLO_ELASTIC_DIR="/tmp/x")).directory == "/tmp/x"
    for name, bad, said in [("KOLO_ELASTIC_JOB", "xyz", "32 hex digits"),
                            ("KOLO_ELASTIC_GENERATION", "-1", "a number >= 0"),
                            ("KOLORUN_RENDEZVOUS", "host", "address:port"),
                            ("KOLO_ELASTIC", "yes", "expected 1")]:
        with pytest.raises(ValueError, match="%s='%s': .*%s" % (name, bad, said)):
            elastic_env.read(dict(ENV, **{name: bad}))
    missing = dict(ENV)
    del missing["KOLORUN_TOKEN"]
    with pytest.raises(ValueError, match="KOLORUN_TOKEN .* is not set"):
        elastic_env.read(missing)


def test_the_slots_that_kolorun_offers_to_grow_in_place_are_read_and_written():
    assert elastic_env.parse_slots("a:1,+c:2") == (["a", "c", "c"], ["c"])
    assert elastic_env.format_slots(["a", "c", "c"]) == "a:1,c:2"
    for bad in ("a", "a:0", ":2", "a:x"):
        with pytest.raises(elastic_env.RendezvousError, match="expected host:n"):
            elastic_env.parse_slots(bad)
    env = elastic_env.read(dict(ENV, KOLO_ELASTIC_GROW_IN_PLACE="0",
                                KOLO_ELASTIC_REPLACEMENT="1"))
    assert (env.grow_in_place, env.replacement) == (False, True)
