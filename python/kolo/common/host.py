"""What every binding that hands NumPy arrays to the runtime shares (kolo.tensorflow,
kolo.jax): 64-byte-aligned result buffers, reused once the framework releases them, and
the collectives as "kernels": NumPy arrays in, aligned NumPy arrays out. The NumPy
adapter of the engine (kolo.common.collectives): views of arrays, results as arrays."""
import math
import sys

import numpy as np

from kolo.common import collectives as engine


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


def view(array):
    """The engine's view of a C-contiguous host array."""
    try:
        code = NP_CODES[array.dtype]
    except KeyError:
        raise TypeError("kolo does not support dtype %s" % array.dtype) from None
    return array.ctypes.data, code, list(array.shape), -1


def copy_out(output, dtype):
    array = empty(tuple(output.shape), dtype)
    output.copy_to(array.ctypes.data, array.nbytes)
    return array


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
                [view(a) for a in chunk], [r.ctypes.data for r in results],
                engine.member_name(name, i, len(groups)), op, prescale, postscale, set_id))
            outs.extend(results)
        engine.wait_all(handles)
        return outs
    return run


def allgather_kernel(name, set_id):
    def run(arrays):
        out = engine.wait(engine.grouped_allgather_async([view(a) for a in arrays], name,
                                                         set_id))
        return [copy_out(part, a.dtype) for part, a in zip(out.take_parts(), arrays)]
    return run


def broadcast_kernel(root_in_set, name, set_id):
    def run(arrays):
        outs, handles = [], []
        for i, a in enumerate(arrays):
            buf = empty(a.shape, a.dtype)
            buf[...] = a
            handles.append(engine.broadcast_async(
                view(buf), root_in_set, engine.member_name(name, i, len(arrays)), set_id))
            outs.append(buf)
        engine.wait_all(handles)
        return outs
    return run


def alltoall_kernel(name, set_id):
    def run(arrays):
        tensor, splits = arrays
        out = engine.wait(engine.alltoall_async(view(tensor), [int(s) for s in splits.reshape(-1)],
                                                name, set_id))
        received = empty((len(out.received_splits),), np.int32)
        received[...] = out.received_splits
        return [copy_out(out, tensor.dtype), received]
    return run


def reducescatter_kernel(name, op, prescale, postscale, set_id):
    def run(arrays):
        out = engine.wait(engine.grouped_reducescatter_async(
            [view(a) for a in arrays], name, op, prescale, postscale, set_id))
        return [copy_out(part, a.dtype) for part, a in zip(out.take_parts(), arrays)]
    return run


def scalar_kernel(start, value):
    """A kernel without inputs (join, barrier): waits for the operation ``start()`` and
    returns ``value(output)`` as an int32 scalar."""
    def run(_):
        out = empty((), np.int32)
        out[...] = value(engine.wait(start()))
        return [out]
    return run
