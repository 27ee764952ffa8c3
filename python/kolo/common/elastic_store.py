"""The commit store of elastic training (kolo.common.elastic): where ``state.commit()``
puts the committed state, so that under elastic kolorun it outlives the process.

A commit is a tree of Python objects whose tensors ("leaves") a codec recognizes. The
tree is pickled with each leaf replaced by a reference ``(tag, shape, offset, nbytes)``;
the leaves' raw bytes are copied into a mapping that is reused from commit to commit (no
pickling of tensor data, no fresh pages after the first two commits). Each process has
two slots and writes the one that does not hold its newest commit. A slot is a file
(``g<generation>-r<rank>-s<slot>.commit`` in the job's directory, on /dev/shm by default)
or, without elastic kolorun, anonymous memory:

    bytes 0..47      magic "KOLOCMT1", generation, commit, skeleton offset,
                     skeleton length, skeleton CRC-32          (little-endian)
    bytes 48..51     CRC-32 of bytes 0..47
    from 4096        the leaves, each 64-byte aligned, then the pickled skeleton

A commit is written in this order: (1) the header is zeroed, (2) leaves and skeleton are
copied, (3) the header's fields are written, (4) their CRC is written last. A process
killed before (4) leaves a zeroed header or one whose CRC does not match, which every
reader ignores (with a warning); the process's other slot still holds its previous
commit. (Stores to a shared mapping are in the file as soon as they are made, in program
order; the page cache outlives the process. A host crash is not covered: nothing is
fsync'ed, and /dev/shm does not survive one anyway.)

Commits are ordered by key = (generation that wrote it, commit number): a later
incarnation's commits supersede those of an earlier one, also ones it never saw (a host
that was away and came back holds a dead branch).
"""
import mmap
import os
import pickle
import re
import struct
import warnings
import zlib

import numpy as np

MAGIC = b"KOLOCMT1"
_FIELDS = struct.Struct("<8sqqQQI")  # magic, generation, commit, skel offset/len/crc
_CRC = struct.Struct("<I")
_HEADER_END = _FIELDS.size + _CRC.size
DATA_START = 4096
ALIGN = 64
NO_COMMIT = -1
_SLOT_NAME = re.compile(r"^g(\d+)-r(\d+)-s([01])\.commit$")


def commit_key(generation, commit):
    """One int64 that orders commits: by generation, then commit number (-1: none)."""
    return NO_COMMIT if commit < 0 else (int(generation) << 32) | int(commit)


def key_parts(key):
    """(generation, commit) of a key."""
    return (-1, NO_COMMIT) if key < 0 else (key >> 32, key & 0xFFFFFFFF)


def job_directory(base, job):
    return os.path.join(base, "kolo-elastic-" + job)


def _aligned(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


# --- leaves --------------------------------------------------------------------------------

class ArrayCodec:
    """Leaves that are NumPy arrays (not of dtype object). A framework's codec extends
    ``leaf`` (what is a leaf: ``(tag, shape, nbytes, write)`` or None; ``write(dst)``
    copies the raw bytes into the uint8 array ``dst``) and ``make`` (a new leaf from the
    tag, the shape and the raw bytes, which belong to the mapping: copy them)."""

    def leaf(self, obj):
        if type(obj) is not np.ndarray or obj.dtype.hasobject:
            return None
        src = np.ascontiguousarray(obj)
        return ("numpy:" + src.dtype.name, src.shape, src.nbytes,
                lambda dst: np.copyto(dst, src.reshape(-1).view(np.uint8)))

    def make(self, tag, shape, raw):
        kind, _, name = tag.partition(":")
        if kind != "numpy":
            raise ValueError("a leaf of kind %r, which this codec does not read" % kind)
        return raw.view(_numpy_dtype(name)).reshape(shape).copy()


def _numpy_dtype(name):
    if name == "bfloat16":
        import ml_dtypes
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


class _Encoder(pickle.Pickler):
    def __init__(self, file, codec):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.codec = codec
        self.leaves = []  # (offset from DATA_START, nbytes, write)
        self.end = 0

    def persistent_id(self, obj):
        leaf = self.codec.leaf(obj)
        if leaf is None:
            return None
        tag, shape, nbytes, write = leaf
        offset = self.end
        self.leaves.append((offset, nbytes, write))
        self.end = _aligned(offset + nbytes)
        return (tag, tuple(shape), offset, nbytes)


class _Decoder(pickle.Unpickler):
    def __init__(self, file, codec, data):
        super().__init__(file)
        self.codec = codec
        self.data = data  # the leaves' region, uint8

    def persistent_load(self, pid):
        tag, shape, offset, nbytes = pid
        if offset < 0 or offset + nbytes > len(self.data):
            raise ValueError("a leaf outside the commit's data")
        return self.codec.make(tag, shape, self.data[offset:offset + nbytes])


def encode(tree, codec):
    """(skeleton bytes, leaves, leaves' length) of a commit's tree."""
    import io
    buf = io.BytesIO()
    encoder = _Encoder(buf, codec)
    encoder.dump(tree)
    return buf.getvalue(), encoder.leaves, encoder.end


# --- reading a slot ------------------------------------------------------------------------

class TornCommit(ValueError):
    """A slot that holds no complete commit."""


def _parse_header(header, size):
    """(generation, commit, skeleton offset, length, crc) of a complete header."""
    if len(header) < _HEADER_END or header[:8] == bytes(8):
        raise TornCommit("incomplete commit (its process ended while writing it)")
    fields = header[:_FIELDS.size]
    magic, generation, commit, skel_off, skel_len, skel_crc = _FIELDS.unpack(fields)
    (crc,) = _CRC.unpack(header[_FIELDS.size:_HEADER_END])
    if magic != MAGIC or crc != zlib.crc32(fields):
        raise TornCommit("not a complete kolo commit (bad header)")
    if skel_off < DATA_START or skel_off + skel_len > size:
        raise TornCommit("truncated: the header names %d bytes, the file has %d"
                         % (skel_off + skel_len, size))
    return generation, commit, skel_off, skel_len, skel_crc


def _read_slot(buffer, size, codec=None):
    """The key of the commit in ``buffer`` (bytes-like, ``size`` long), and its tree when
    ``codec`` is given. Raises TornCommit for anything but a complete commit."""
    generation, commit, skel_off, skel_len, skel_crc = _parse_header(
        bytes(buffer[:_HEADER_END]), size)
    skeleton = bytes(buffer[skel_off:skel_off + skel_len])
    if zlib.crc32(skeleton) != skel_crc:
        raise TornCommit("not a complete kolo commit (bad skeleton checksum)")
    key = commit_key(generation, commit)
    if codec is None:
        return key, None
    import io
    data = np.frombuffer(buffer, np.uint8, count=skel_off - DATA_START, offset=DATA_START)
    try:
        return key, _Decoder(io.BytesIO(skeleton), codec, data).load()
    except TornCommit:
        raise
    except Exception as e:  # a skeleton that does not unpickle: say which file, go on
        raise TornCommit("unreadable commit (%s: %s)" % (type(e).__name__, e)) from None


def _warn_ignored(path, reason):
    warnings.warn("kolo: elastic: ignoring %s: %s" % (path, reason), RuntimeWarning,
                  stacklevel=3)


def read_file(path, codec=None):
    """(key, tree) of the commit in the slot file ``path``; TornCommit if it has none."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < DATA_START:
            raise TornCommit("incomplete commit (%d bytes)" % size)
        with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as m:
            return _read_slot(m, size, codec)  # the tree holds copies only


def newest_in(directory):
    """(key, path) of the newest complete commit among the slot files in ``directory``
    ((NO_COMMIT, None) if none); files that hold none are named in a warning."""
    best = (NO_COMMIT, None)
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return best
    for name in names:
        if not _SLOT_NAME.match(name):
            continue
        path = os.path.join(directory, name)
        try:
            key, _ = read_file(path)
        except TornCommit as e:
            _warn_ignored(path, e)
            continue
        except FileNotFoundError:  # removed meanwhile by a rank of this host
            continue
        if key > best[0]:
            best = (key, path)
    return best


def remove_older_generations(directory, generation):
    """Removes the slot files that incarnations before ``generation`` wrote."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return
    for name in names:
        m = _SLOT_NAME.match(name)
        if m and int(m.group(1)) < generation:
            try:
                os.unlink(os.path.join(directory, name))
            except FileNotFoundError:
                pass


# --- this process's two slots --------------------------------------------------------------

class _Slot:
    def __init__(self, path=None):
        self.path = path  # None: anonymous memory
        self.map = None
        self.bytes = None  # the map as a uint8 array
        self.key = NO_COMMIT  # of the complete commit it holds

    def reserve(self, nbytes):
        if self.map is not None and len(self.map) >= nbytes:
            return
        size = max(nbytes, (len(self.map) * 5 // 4) if self.map is not None else 0)
        size = (size + (1 << 20) - 1) >> 20 << 20  # whole MiB
        self.bytes = None
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:  # a view of it is still alive; it goes with the view
                pass
        self.map = None
        self.key = NO_COMMIT
        populate = getattr(mmap, "MAP_POPULATE", 0)
        if self.path is None:
            self.map = mmap.mmap(-1, size, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS
                                 | populate)
        else:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.ftruncate(fd, size)
                try:  # reserve the space now: writing past a full tmpfs is SIGBUS
                    os.posix_fallocate(fd, 0, size)
                except OSError as e:
                    raise OSError(e.errno, "kolo: elastic: cannot keep a commit of %d MiB in "
                                  "%s (%s); free space there or set KOLO_ELASTIC_DIR"
                                  % (size >> 20, os.path.dirname(self.path),
                                     os.strerror(e.errno))) from None
                self.map = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | populate)
            finally:
                os.close(fd)
        self.bytes = np.frombuffer(self.map, np.uint8)

    def write(self, key, skeleton, leaves, leaves_end):
        skel_off = DATA_START + leaves_end
        self.reserve(skel_off + len(skeleton))
        self.key = NO_COMMIT
        self.map[:_HEADER_END] = bytes(_HEADER_END)  # (1) no longer a commit
        data = self.bytes
        for offset, nbytes, write in leaves:  # (2)
            start = DATA_START + offset
            write(data[start:start + nbytes])
        self.map[skel_off:skel_off + len(skeleton)] = skeleton
        generation, commit = key_parts(key) if key >= 0 else (0, NO_COMMIT)
        fields = _FIELDS.pack(MAGIC, generation, commit, skel_off, len(skeleton),
                              zlib.crc32(skeleton))
        self.map[:_FIELDS.size] = fields  # (3)
        self.map[_FIELDS.size:_HEADER_END] = _CRC.pack(zlib.crc32(fields))  # (4)
        self.key = key

    def read(self, codec):
        return _read_slot(self.map, len(self.map), codec)[1]

    def release(self, remove):
        self.bytes = None
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:
                pass
        self.map = None
        if remove and self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


class CommitStore:
    """A process's two slots: anonymous memory until ``attach`` gives it files."""

    def __init__(self):
        self._slots = [_Slot(), _Slot()]
        self._newest = None  # the slot that holds the newest commit
        self.directory = None

    def attach(self, directory, generation, rank):
        """From now on, commits go to files of ``directory`` named for ``generation`` and
        ``rank``."""
        os.makedirs(directory, mode=0o700, exist_ok=True)
        for slot in self._slots:
            slot.release(remove=True)
        self.directory = directory
        self._slots = [_Slot(os.path.join(directory, "g%d-r%d-s%d.commit"
                                          % (generation, rank, i))) for i in range(2)]
        self._newest = None

    def write(self, key, tree, codec):
        """Writes ``tree`` as the commit ``key`` into the slot that does not hold the
        newest commit; the newest stays intact until this one is complete."""
        skeleton, leaves, leaves_end = encode(tree, codec)
        slot = self._slots[1] if self._newest is self._slots[0] else self._slots[0]
        slot.write(key, skeleton, leaves, leaves_end)
        self._newest = slot

    def newest(self, codec):
        """The tree of the newest commit, or None."""
        if self._newest is None:
            return None
        return self._newest.read(codec)

    def newest_key(self):
        """The key of the newest commit (NO_COMMIT if none)."""
        return NO_COMMIT if self._newest is None else self._newest.key

    # A reset in place (kolo.common.elastic_resume) makes every survivor's newest
    # slot equal to rank 0's by sending only the chunks that differ: usually a few (the
    # BatchNorm statistics that each rank keeps from its own data), not the whole state.
    CHUNK = 1 << 20

    def newest_end(self):
        """The bytes of the newest commit in its slot (header, leaves, skeleton), rounded
        up to whole 8-byte words; 0 if none."""
        if self._newest is None:
            return 0
        _, _, skel_off, skel_len, _ = _parse_header(bytes(self._newest.map[:_HEADER_END]),
                                                    len(self._newest.map))
        return (skel_off + skel_len + 7) // 8 * 8

    def chunk_digests(self, end):
        """(chunks, 2) int64: per CHUNK bytes of the newest slot's first ``end`` bytes, the
        wrapping sum and the xor of its 8-byte words."""
        words = np.frombuffer(self._newest.map, np.uint64, count=end // 8)
        per = self.CHUNK // 8
        out = np.empty(((len(words) + per - 1) // per, 2), np.uint64)
        full = len(words) // per
        if full:
            blocks = words[:full * per].reshape(full, per)
            np.add.reduce(blocks, axis=1, dtype=np.uint64, out=out[:full, 0])
            np.bitwise_xor.reduce(blocks, axis=1, out=out[:full, 1])
        if len(words) > full * per:
            tail = words[full * per:]
            out[full] = (np.add.reduce(tail, dtype=np.uint64), np.bitwise_xor.reduce(tail))
        return out.view(np.int64)

    def _chunk_ranges(self, chunks, end):
        return [(c * self.CHUNK, min((c + 1) * self.CHUNK, end)) for c in chunks]

    def read_chunks(self, chunks, end):
        """The newest slot's ``chunks`` (indices), one after the other, as a uint8 copy."""
        data = self._newest.bytes
        return np.concatenate([data[a:b] for a, b in self._chunk_ranges(chunks, end)]
                              or [np.empty(0, np.uint8)])

    def write_chunks(self, chunks, end, payload):
        """Overwrites the newest slot's ``chunks`` with ``payload`` (read_chunks' layout):
        with rank 0's chunks, its slot becomes rank 0's commit, header included."""
        data, at = self._newest.bytes, 0
        for a, b in self._chunk_ranges(chunks, end):
            data[a:b] = payload[at:at + b - a]
            at += b - a

    def newest_bytes(self, end):
        """The newest slot's first ``end`` bytes (a view: valid until the next write)."""
        return self._newest.bytes[:end]

    def write_whole(self, payload):
        """Makes ``payload`` (another process's ``newest_bytes``: a whole commit, header
        first) this store's newest commit, in the slot that does not hold it: the header
        goes in last, so that a process killed meanwhile leaves no half commit."""
        slot = self._slots[1] if self._newest is self._slots[0] else self._slots[0]
        slot.reserve(len(payload))
        slot.key = NO_COMMIT
        slot.map[:_HEADER_END] = bytes(_HEADER_END)
        slot.bytes[_HEADER_END:len(payload)] = payload[_HEADER_END:]
        slot.bytes[:_HEADER_END] = payload[:_HEADER_END]
        slot.key, _ = _read_slot(slot.map, len(slot.map))
        self._newest = slot

    def rename(self, generation, rank):
        """Gives the slot files the names of ``generation`` and ``rank`` (a reset in place
        renumbers the ranks); their mappings and commits stay as they are."""
        for i, slot in enumerate(self._slots):
            if slot.path is None:
                continue
            path = os.path.join(self.directory, "g%d-r%d-s%d.commit" % (generation, rank, i))
            if slot.map is not None:
                os.rename(slot.path, path)
            slot.path = path

    def close(self, remove=False):
        """Releases the slots (and removes their files when ``remove``)."""
        for slot in self._slots:
            slot.release(remove)
        self._newest = None
        if remove and self.directory is not None:
            try:
                os.rmdir(self.directory)  # the last rank of the host to leave
            except OSError:
                pass
