"""kolo.jax's trees: pytrees as flat lists of leaves (NumPy views of the host buffers
eagerly, tracers inside jit), the check that every rank's tree agrees, and running a host
kernel (kolo.common.host) on the leaves, eagerly or as one ordered io_callback."""
import zlib

import numpy as np
import jax
import jax.numpy as jnp
from jax.experimental import io_callback

from kolo.common import engine as _engine
from kolo.common import host as _host
from kolo.common import objects as _objects
from kolo.common.basics import cuda_built
from kolo.common.collectives import KoloInternalError
from kolo.common.ops import Sum

def _path_name(path):
    return jax.tree_util.keystr(path) or "<root>"


def _flatten(tree, what):
    """The tree's leaves (JAX arrays as they are, NumPy arrays and numbers as NumPy
    arrays), its structure, and the leaves' paths. None is an empty subtree, not a leaf:
    it stays None. A tracer's dtype is checked here; a concrete leaf's after the tree
    check (``_structured``), so that a rank whose dtype differs fails every rank."""
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
    leaves, paths = [], []
    for path, leaf in with_paths:
        path = _path_name(path)
        if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, bool)):
            raise TypeError("%s: the leaf at %s is a %s, not an array or a number"
                            % (what, path, type(leaf).__name__))
        if not isinstance(leaf, jax.Array):
            leaf = np.asarray(leaf)  # host data stays on the host (no copy to a device)
        if _traced([leaf]) and np.dtype(leaf.dtype) not in _host.NP_CODES:
            raise _host.unsupported_dtype("%s: the leaf at %s" % (what, path), leaf.dtype)
        leaves.append(leaf)
        paths.append(path)
    return leaves, treedef, paths


def _traced(leaves):
    return any(isinstance(x, jax.core.Tracer) for x in leaves)


def _host_view(leaf):
    """An eager leaf's host memory as a NumPy array (no copy on the CPU)."""
    if isinstance(leaf, np.ndarray):
        return np.require(leaf, requirements="C")  # (ascontiguousarray makes 0-d 1-d)
    device = next(iter(leaf.devices()))
    if device.platform != "cpu" and not cuda_built():
        raise ValueError("a JAX array on %s reached kolo, which was built without GPU "
                         "support: move it to the CPU (jax.device_get) or use a GPU build"
                         % device)
    return np.asarray(leaf)


def _adopt(array):
    """An aligned NumPy result as a JAX array (no copy; bfloat16, which NumPy cannot
    export through DLPack, and scalars are copied once)."""
    if array.dtype == np.dtype(jnp.bfloat16) or array.size == 0 or array.ndim == 0:
        return jnp.asarray(array)
    return jax.dlpack.from_dlpack(array)


def _signature(leaves, paths, gathered):
    """What every rank's tree must agree on: each leaf's path, dtype and shape (without the
    first dimension for an allgather, where it may differ)."""
    return [(p, str(np.dtype(x.dtype)), tuple(x.shape[1:] if gathered else x.shape))
            for p, x in zip(paths, leaves)]


def _signature_text(signature):
    """The signature as one line per leaf, "path dtype shape": what ranks exchange when
    their trees differ, for the engine's first_difference."""
    return "\n".join("%s %s %s" % leaf for leaf in signature)


def _sentinel(signature):
    """A zero-size array whose shape carries a digest of the tree's signature."""
    digest = zlib.crc32(repr(signature).encode()) % 65521 + 1
    return np.zeros((0, digest), np.uint8)


def _structured(kernel, leaves, paths, what, set_id, name, gathered=False):
    """``kernel``, after the ranks have checked that their trees (``_signature`` of the
    leaves) agree: a zero-size allreduce whose shape carries a digest of the signature goes
    first, on its own, and ranks whose trees differ (other paths, shapes, dtypes or leaf
    counts) send different shapes, which the coordinator refuses on every rank at once.
    (Sent inside the group instead, a rank with one leaf more would wait for a member the
    others never send.) The ranks then exchange their signatures, and the error names the
    first leaf that is not the same everywhere. A dtype kolo does not move is refused after
    the check: by then every rank has it."""
    signature = _signature(leaves, paths, gathered)
    sentinel = _sentinel(signature)
    check = _host.allreduce_kernel([1], name and name + ".tree", Sum, 1.0, 1.0, set_id)

    def run(arrays):
        try:
            check([sentinel])
        except KoloInternalError as e:
            if "ismatch" not in str(e):
                raise
            difference = _engine.first_difference(
                _allgather_object_in_set(_signature_text(signature), set_id))
            if not difference:
                raise
            raise KoloInternalError("%s: mismatched trees across the ranks: %s" % (
                what, difference)) from None
        for (path, _, _), array in zip(signature, arrays):
            if array.dtype not in _host.NP_CODES:  # the same on every rank, after the check
                raise _host.unsupported_dtype("%s: the leaf at %s" % (what, path), array.dtype)
        return kernel(arrays)
    return run


def _after_dispatched_collectives():
    """Waits until the jitted computations dispatched so far have run their collectives
    (they carry JAX's ordered effect), so that an eager collective is submitted after them
    on every rank, whichever rank's computation runs late. Not for kernels that run inside
    a callback: the computation calling them is one of those waited for."""
    jax.effects_barrier()


def _run(kernel, leaves, result_shapes=None):
    """``kernel(list of NumPy arrays) -> list of aligned arrays`` on the leaves, as a tuple:
    directly when they are concrete, else as one ordered io_callback with the results'
    shapes (by default the leaves')."""
    if not _traced(leaves):
        _after_dispatched_collectives()
        return tuple(_adopt(a) for a in kernel([_host_view(x) for x in leaves]))

    def callback(*arrays):
        return kernel([np.asarray(a) for a in arrays])
    return tuple(io_callback(callback, result_shapes or [_shape(x) for x in leaves],
                             *leaves, ordered=True))


def _shape(x, shape=None):
    return jax.ShapeDtypeStruct(x.shape if shape is None else shape, x.dtype)


def _allgather_object_in_set(obj, set_id, name=""):
    """Every rank's ``obj`` (kolo.common.objects); ``name`` as a collective's, "" unnamed."""
    n, data, error = _objects.encode(obj)
    sizes, raw = _host.allgather_kernel(name, set_id)(
        [np.asarray([n], np.int64), np.frombuffer(data, np.uint8)])
    return _objects.decode_all(sizes.tolist(), raw.tobytes(), "allgather_object",
                               _engine.process_set_ranks(set_id), error)
