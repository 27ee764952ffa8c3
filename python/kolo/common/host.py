"""The NumPy adapter (kolo.common.adapter) and what every binding that hands NumPy arrays to
the runtime shares (kolo.numpy, kolo.tensorflow, kolo.jax, and the object collectives):
the reader of NumPy arrays, 64-byte-aligned result buffers reused once the framework
releases them, Horovod's collectives on arrays (:data:`COLLECTIVES`), and the collectives
as "kernels": a list of arrays in, a list of aligned arrays out, for a framework that runs
them from its own graph (``tf.numpy_function``, JAX's ``io_callback``)."""
import math
import sys

import numpy as np

from kolo.common import engine
from kolo.common.adapter import Adapter
from kolo.common.collectives import Collectives
from kolo.common.names import member_name


def numpy_dtype(name):
    """The NumPy dtype of the core's dtype ``name``, None where NumPy has none (bfloat16
    is ml_dtypes' type, which TensorFlow and JAX hand over, when ml_dtypes is installed)."""
    if name == "bfloat16":
        try:
            import ml_dtypes
        except ImportError:  # no bfloat16 for NumPy in this environment
            return None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


# The core's dtype codes by NumPy dtype.
NP_CODES = engine.dtype_codes(numpy_dtype)

# TensorFlow's CPU allocator aligns to 64 bytes, and a tensor it adopts must be too
# (an unaligned buffer aborts the process in some kernels); XLA's CPU client likewise.
ALIGN = 64


class _BufferPool:
    """Result buffers of 64 KiB and more, kept for reuse once the framework (TensorFlow,
    JAX) has released the tensor made from them. Inside tf.function the results are
    allocated on TensorFlow's
    executor threads, whose malloc arenas hand large freed blocks back to the kernel:
    without reuse a ResNet-50 gradient set faults in ~10,000 fresh pages every step.
    A buffer is free when nothing but the pool refers to it (TensorFlow's tensor holds
    a view, whose base is the buffer). At most 64 buffers per size and 1 GiB in all are
    kept; beyond that a buffer is allocated and freed as usual."""
    MIN_BYTES = 1 << 16
    PER_SIZE = 64
    MAX_BYTES = 1 << 30

    def __init__(self):
        self._free = {}  # nbytes -> raw buffers of that size
        self._bytes = 0
        probe = [object()]
        self._unused_refs = sys.getrefcount(probe[0])  # what "only the pool" reads as

    def take(self, nbytes):
        if nbytes < self.MIN_BYTES:
            return np.empty(nbytes + ALIGN, np.uint8)
        kept = self._free.setdefault(nbytes, [])
        for i in range(len(kept)):
            if sys.getrefcount(kept[i]) == self._unused_refs:
                return kept[i]
        raw = np.empty(nbytes + ALIGN, np.uint8)
        if len(kept) < self.PER_SIZE and self._bytes + nbytes <= self.MAX_BYTES:
            kept.append(raw)
            self._bytes += nbytes
        return raw


_pool = _BufferPool()


def empty(shape, dtype):
    """An uninitialized NumPy array whose data is 64-byte aligned."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = _pool.take(nbytes)
    start = -raw.ctypes.data % ALIGN
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def unsupported_dtype(what, dtype):
    """The TypeError for ``what``, whose ``dtype`` the core does not move: it names those
    that it does."""
    return TypeError("%s has dtype %s, which kolo does not support; supported: %s"
                     % (what, dtype, ", ".join(sorted(str(d) for d in NP_CODES))))


def _refuse(array, what, index, check):
    """The NumPy words for an array that failed the reader's ``check``."""
    if index is not None:
        what = "%s input %d" % (what, index)
    if check == "type":
        raise TypeError("%s must be a numpy.ndarray, got %s" % (what, type(array).__name__))
    if check == "dtype":
        raise unsupported_dtype(what, array.dtype)
    if check == "contiguous":
        raise ValueError("%s is not C-contiguous; use numpy.ascontiguousarray()" % what)


# How the core reads NumPy arrays: the buffer protocol and their dtype.
READER = engine.tensor_reader("buffer", np.ndarray, NP_CODES, _refuse)


class NumpyAdapter(Adapter):
    """NumPy's primitives for kolo.common.collectives: results are 64-byte-aligned arrays
    (the buffers TensorFlow and JAX adopt)."""
    binding = "kolo.numpy"
    reader = READER

    def empty(self, shape, like):
        return empty(shape, like.dtype)

    def copy(self, array):
        out = empty(array.shape, array.dtype)
        out[...] = array
        return out

    def data_ptr(self, array):
        return array.ctypes.data

    def int32_vector(self, values):
        out = empty((len(values),), np.int32)
        out[...] = values
        return out


ADAPTER = NumpyAdapter()
# Horovod's collectives on NumPy arrays: kolo.numpy's, and the object collectives'.
COLLECTIVES = Collectives(ADAPTER)


# --- kernels: NumPy arrays in, aligned NumPy arrays out -----------------------------------

def allreduce_kernel(groups, name, op, prescale, postscale, set_id):
    """``groups``: lists of arrays; each list is one grouped allreduce, all enqueued before
    the first wait so that the runtime fuses them."""
    def run(arrays):
        outs, handles, start = [], [], 0
        for i, size in enumerate(groups):
            chunk = arrays[start:start + size]
            start += size
            results = [empty(a.shape, a.dtype) for a in chunk]
            handles.append(engine.grouped_allreduce_async(
                READER, chunk, results, "allreduce", member_name(name, i, len(groups)),
                op, prescale, postscale, set_id))
            outs.extend(results)
        engine.wait_all(handles)
        return outs
    return run


def allgather_kernel(name, set_id):
    def run(arrays):
        out = engine.wait(engine.grouped_allgather_async(READER, arrays, "allgather",
                                                         name, set_id))
        return list(ADAPTER.results(out, arrays))
    return run


def broadcast_kernel(root_in_set, name, set_id):
    def run(arrays):
        outs = [ADAPTER.copy(a) for a in arrays]
        engine.wait_all([engine.broadcast_async(READER, buf, "broadcast tensor", root_in_set,
                                                member_name(name, i, len(outs)), set_id)
                         for i, buf in enumerate(outs)])
        return outs
    return run


def alltoall_kernel(name, set_id):
    def run(arrays):
        tensor, splits = arrays
        out = engine.wait(engine.alltoall_async(READER, tensor, "alltoall input",
                                                [int(s) for s in splits.reshape(-1)], name,
                                                set_id))
        return [ADAPTER.result(out, tensor), ADAPTER.int32_vector(out.received_splits)]
    return run


def reducescatter_kernel(name, op, prescale, postscale, set_id):
    def run(arrays):
        out = engine.wait(engine.grouped_reducescatter_async(
            READER, arrays, "reducescatter", name, op, prescale, postscale, set_id))
        return list(ADAPTER.results(out, arrays))
    return run


def scalar_kernel(call):
    """A kernel without inputs (join, barrier): the blocking ``call()`` (a method of
    :data:`COLLECTIVES`), its int result (None: 0) as an int32 scalar."""
    def run(_):
        out = empty((), np.int32)
        out[...] = call() or 0
        return [out]
    return run
