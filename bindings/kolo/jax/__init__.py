"""kolo for JAX: collectives on arrays and whole pytrees, eagerly and inside ``jax.jit``,
with gradients, and an Optax transformation that averages gradients over the ranks.

    import kolo.jax as kj
    kj.init()
    params = kj.broadcast_parameters(params, root_rank=0)
    tx = kj.DistributedOptimizer(optax.adam(1e-3))

Python over ``kolo._core``; nothing is linked against jaxlib.
- Eagerly, a leaf reaches the runtime as a NumPy view of its host buffer, and a result is
  written into a 64-byte-aligned NumPy buffer that JAX adopts through DLPack.
- Inside ``jax.jit`` (any tracing: jit, grad) allreduce is an XLA FFI call to kolo._core's
  handler (``_xla.py``), in place on XLA's buffers, after a data-free ordered
  ``jax.experimental.io_callback`` that checks the trees. The other collectives are one
  ordered io_callback each, which hands them host copies of the leaves and copies their
  results back (and so is allreduce where kolo was built without XLA's FFI headers). All
  carry the same ordered effect: XLA runs them in program order on every rank.
- All leaves of one call form one grouped operation: one negotiation, fused.
docs/api-jax.md documents every name.
"""
import functools
import pickle
import zlib

import numpy as np
import jax
import jax.numpy as jnp
from jax.experimental import io_callback

from kolo import _core
from kolo._core import KoloInternalError  # noqa: F401
from kolo.common import host as _host
from kolo.jax import _xla
from kolo.common.basics import (  # noqa: F401
    cross_rank, cross_size, cuda_built, init, is_initialized, local_rank, local_size,
    mpi_threads_supported, nccl_built, rank, shutdown, size, start_timeline, stop_timeline)
from kolo.common.compression import CastCompressor, NoneCompressor
from kolo.common import ops as _common_ops
from kolo.common.ops import Average, Max, Min, Product, Sum, check_op  # noqa: F401
from kolo.common.process_sets import (  # noqa: F401
    ProcessSet, _root_in_set, _set_id, _set_rank, _set_size, add_process_set,
    global_process_set, remove_process_set)

HorovodInternalError = KoloInternalError


def is_chief():
    """Whether this process is global rank 0: the one that logs, writes checkpoints and
    shows progress bars (every rank doing it is what makes "File exists" errors)."""
    return rank() == 0


# --- compression -------------------------------------------------------------------------

class _JaxCast(CastCompressor):
    is_floating = staticmethod(lambda x: jnp.issubdtype(x.dtype, jnp.floating))
    cast = staticmethod(lambda x, dtype: x.astype(dtype))


class FP16Compressor(_JaxCast):
    """Casts floating leaves to float16 for the allreduce and back."""
    dtype = jnp.float16


class BF16Compressor(_JaxCast):
    """Casts floating leaves to bfloat16 for the allreduce and back."""
    dtype = jnp.bfloat16


class Compression:
    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor


# --- leaves in, leaves out ---------------------------------------------------------------

def _path_name(path):
    return jax.tree_util.keystr(path) or "<root>"


def _flatten(tree, what):
    """The tree's leaves (JAX arrays as they are, NumPy arrays and numbers as NumPy
    arrays), its structure, and the leaves' paths. None is an empty subtree, not a leaf:
    it stays None."""
    with_paths, treedef = jax.tree_util.tree_flatten_with_path(tree)
    leaves, paths = [], []
    for path, leaf in with_paths:
        if not isinstance(leaf, (jax.Array, np.ndarray, np.generic, int, float, bool)):
            raise TypeError("%s: the leaf at %s is a %s, not an array or a number"
                            % (what, _path_name(path), type(leaf).__name__))
        if not isinstance(leaf, jax.Array):
            leaf = np.asarray(leaf)  # host data stays on the host (no copy to a device)
        if np.dtype(leaf.dtype) not in _host.NP_CODES:
            raise TypeError("%s: the leaf at %s has dtype %s, which kolo does not support; "
                            "supported: %s" % (what, _path_name(path), leaf.dtype, ", ".join(
                                sorted(str(d) for d in _host.NP_CODES))))
        leaves.append(leaf)
        paths.append(_path_name(path))
    return leaves, treedef, paths


def _traced(leaves):
    return any(isinstance(x, jax.core.Tracer) for x in leaves)


def _host_view(leaf):
    """An eager leaf's host memory as a NumPy array (no copy on the CPU)."""
    if isinstance(leaf, np.ndarray):
        return np.require(leaf, requirements="C")  # (ascontiguousarray makes 0-d 1-d)
    device = next(iter(leaf.devices()))
    if device.platform != "cpu" and not _core.cuda_built():
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
    their trees differ, for _core.first_difference."""
    return "\n".join("%s %s %s" % leaf for leaf in signature)


def _sentinel(signature):
    """A zero-size array whose shape carries a digest of the tree's signature."""
    digest = zlib.crc32(repr(signature).encode()) % 65521 + 1
    return np.zeros((0, digest), np.uint8)


def _structured(kernel, signature, what, set_id, name):
    """``kernel``, after the ranks have checked that their trees agree: a zero-size
    allreduce whose shape carries a digest of the signature goes first, on its own, and
    ranks whose trees differ (other paths, shapes, dtypes or leaf counts) send different
    shapes, which the coordinator refuses on every rank at once. (Sent inside the group
    instead, a rank with one leaf more would wait for a member the others never send.)
    The ranks then exchange their signatures, and the error names the first leaf that is
    not the same everywhere."""
    sentinel = _sentinel(signature)
    check = _host.allreduce_kernel([1], name and name + ".tree", Sum, 1.0, 1.0, set_id)

    def run(arrays):
        try:
            check([sentinel])
        except KoloInternalError as e:
            if "ismatch" not in str(e):
                raise
            difference = _core.first_difference(
                _allgather_object_in_set(_signature_text(signature), set_id))
            if not difference:
                raise
            raise KoloInternalError("%s: mismatched trees across the ranks: %s" % (
                what, difference)) from None
        return kernel(arrays)
    return run


def _after_dispatched_collectives():
    """Waits until the jitted computations dispatched so far have run their collectives
    (they carry JAX's ordered effect), so that an eager collective is submitted after them
    on every rank, whichever rank's computation runs late. Not for kernels that run inside
    a callback: the computation calling them is one of those waited for."""
    jax.effects_barrier()


def _run(kernel, leaves, result_shapes):
    """``kernel(list of NumPy arrays) -> list of aligned arrays`` on the leaves: directly
    when they are concrete, else as one ordered io_callback with the results' shapes."""
    if not _traced(leaves):
        _after_dispatched_collectives()
        return [_adopt(a) for a in kernel([_host_view(x) for x in leaves])]

    def callback(*arrays):
        return kernel([np.asarray(a) for a in arrays])
    return list(io_callback(callback, result_shapes, *leaves, ordered=True))


def _shape(x, shape=None):
    return jax.ShapeDtypeStruct(x.shape if shape is None else shape, x.dtype)


# --- the collectives, differentiable over the flat list of leaves -------------------------

def _in_place_in_jit(leaves):
    """Whether traced leaves go to XLA's FFI handler (in place, no copies) rather than an
    io_callback: on the CPU, when kolo was built with XLA's FFI headers."""
    return _traced(leaves) and _xla.available and jax.default_backend() == "cpu"


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _allreduce_leaves(cfg, *leaves):
    name, op, pre, post, set_id, paths = cfg
    signature = _signature(leaves, paths, False)
    if _in_place_in_jit(leaves):
        # XLA's FFI handler checks the trees (the same sentinel as _structured) and then
        # reduces the leaves in place.
        return tuple(_xla.allreduce(leaves, name, op, pre, post, set_id,
                                    _sentinel(signature).shape[1],
                                    _signature_text(signature)))
    kernel = _structured(_host.allreduce_kernel([len(leaves)], name, op, pre, post, set_id),
                         signature, "allreduce", set_id, name)
    return tuple(_run(kernel, leaves, [_shape(x) for x in leaves]))


def _allreduce_fwd(cfg, *leaves):
    return _allreduce_leaves(cfg, *leaves), None


def _allreduce_bwd(cfg, _, cotangents):
    name, op, pre, post, set_id, paths = cfg
    return _allreduce_leaves((None, op, pre, post, set_id, paths), *cotangents)


_allreduce_leaves.defvjp(_allreduce_fwd, _allreduce_bwd)


def allreduce(tree, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=global_process_set, compression=Compression.none):
    """The reduction (``op``, default the average) over the set's ranks of every leaf, as
    a tree of the same structure; all leaves are negotiated and fused as one unit.
    Differentiable: the cotangent is reduced the same way."""
    check_op(op, "kolo.jax")
    leaves, treedef, paths = _flatten(tree, "allreduce")
    if not leaves:
        return tree
    pairs = [compression.compress(x) for x in leaves]
    cfg = (name, op, float(prescale_factor), float(postscale_factor), _set_id(process_set),
           tuple(paths))
    reduced = _allreduce_leaves(cfg, *[c for c, _ in pairs])
    return jax.tree_util.tree_unflatten(
        treedef, [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, pairs)])


def _gathered_shape(x, set_size, stack):
    if stack:
        return (set_size,) + tuple(x.shape)
    return (x.shape[0] * set_size,) + tuple(x.shape[1:])


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _allgather_leaves(cfg, *leaves):
    name, set_id, set_size, paths = cfg
    if not _traced(leaves):
        kernel = _structured(_host.allgather_kernel(name, set_id),
                             _signature(leaves, paths, True), "allgather", set_id, name)
        return tuple(_run(kernel, leaves, None))
    # Inside jit the result's shape is fixed when tracing: every rank must send the same
    # first dimensions. Each rank sends its row counts along (one more array in the
    # group) and every rank checks all of them, so all raise or none does.
    rows = np.asarray([[x.shape[0] for x in leaves]], np.int32)
    gathered = _structured(_host.allgather_kernel(name, set_id),
                           _signature((rows,) + tuple(leaves), ("<rows>",) + paths, True),
                           "allgather", set_id, name)

    def kernel(arrays):
        out = gathered(arrays)
        _check_same_rows(out[0].reshape(set_size, len(leaves)), paths)
        return out
    shapes = [_shape(rows, (set_size, len(leaves)))] + [
        _shape(x, _gathered_shape(x, set_size, False)) for x in leaves]
    return tuple(_run(kernel, (rows,) + tuple(leaves), shapes)[1:])


def _check_same_rows(every, paths):
    for i, p in enumerate(paths):
        if len(set(every[:, i].tolist())) > 1:
            raise KoloInternalError(
                "allgather inside jax.jit needs the same first dimension on every rank (the "
                "result's shape is fixed when tracing); the leaf at %s has %s rows on the "
                "set's ranks in order; call it outside jit for differing sizes"
                % (p, every[:, i].tolist()))


def _allgather_fwd(cfg, *leaves):
    return _allgather_leaves(cfg, *leaves), tuple(x.shape[0] for x in leaves)


def _allgather_bwd(cfg, rows, cotangents):
    name, set_id, set_size, paths = cfg
    averaged = _allreduce_leaves((None, Average, 1.0, 1.0, set_id, paths), *cotangents)
    counts = _allgather_leaves((None, set_id, set_size, paths),
                               *[jnp.asarray([n], jnp.int64 if jax.config.jax_enable_x64
                                             else jnp.int32) for n in rows])
    mine = _set_rank_id(set_id)
    out = []
    for g, n, c in zip(averaged, rows, counts):
        start = jnp.sum(c[:mine])
        out.append(jax.lax.dynamic_slice_in_dim(g, start, n, axis=0))
    return tuple(out)


_allgather_leaves.defvjp(_allgather_fwd, _allgather_bwd)


def _set_rank_id(set_id):
    return _core.rank() if set_id == 0 else _core.process_set_rank(set_id)


def allgather(tree, name=None, process_set=global_process_set, stack=False):
    """Every leaf of every rank of the set, concatenated along axis 0 in rank order (the
    first dimension may differ between ranks eagerly; inside jit it must not). With
    ``stack=True`` the leaves get a new leading axis of the set's size instead (their shapes
    must be equal). Differentiable: the cotangent is averaged over the ranks and this
    rank's rows are kept."""
    leaves, treedef, paths = _flatten(tree, "allgather")
    if not leaves:
        return tree
    for x, p in zip(leaves, paths):
        if x.ndim == 0 and not stack:
            raise ValueError("allgather: the leaf at %s is a scalar; it needs at least one "
                             "dimension to concatenate (or pass stack=True)" % p)
    n = _set_size(process_set)
    if stack:
        leaves = [x[None] for x in leaves]
    out = _allgather_leaves((name, _set_id(process_set), n, tuple(paths)), *leaves)
    return jax.tree_util.tree_unflatten(treedef, list(out))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _broadcast_leaves(cfg, *leaves):
    name, root_in_set, root_rank, set_id, paths = cfg
    kernel = _structured(_host.broadcast_kernel(root_in_set, name, set_id),
                         _signature(leaves, paths, False), "broadcast", set_id, name)
    return tuple(_run(kernel, leaves, [_shape(x) for x in leaves]))


def _broadcast_fwd(cfg, *leaves):
    return _broadcast_leaves(cfg, *leaves), None


def _broadcast_bwd(cfg, _, cotangents):
    name, root_in_set, root_rank, set_id, paths = cfg
    averaged = _allreduce_leaves((None, Average, 1.0, 1.0, set_id, paths), *cotangents)
    if _core.rank() != root_rank:
        return tuple(jnp.zeros_like(g) for g in averaged)
    return averaged


_broadcast_leaves.defvjp(_broadcast_fwd, _broadcast_bwd)


def broadcast(tree, root_rank=0, name=None, process_set=global_process_set):
    """Global rank ``root_rank``'s tree on every rank of the set (same structure, shapes
    and dtypes everywhere). Differentiable: the root's cotangent is the average over the
    ranks, the others' zero."""
    leaves, treedef, paths = _flatten(tree, "broadcast")
    if not leaves:
        return tree
    set_id = _set_id(process_set)
    cfg = (name, _root_in_set(root_rank, set_id), int(root_rank), set_id, tuple(paths))
    return jax.tree_util.tree_unflatten(treedef, list(_broadcast_leaves(cfg, *leaves)))


def broadcast_parameters(params, root_rank=0, process_set=global_process_set):
    """Returns ``params`` (any pytree) with root_rank's values on every rank: the start of
    training, so that every rank begins from the same weights."""
    return broadcast(params, root_rank, name="broadcast_parameters", process_set=process_set)


def _rows_here(rows, set_size, rank_in_set):
    return rows // set_size + (1 if rank_in_set < rows % set_size else 0)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _reducescatter_leaves(cfg, *leaves):
    name, op, pre, post, set_id, set_size, rank_in_set, paths, _ = cfg
    kernel = _structured(_host.reducescatter_kernel(name, op, pre, post, set_id),
                         _signature(leaves, paths, False), "reducescatter", set_id, name)
    shapes = [_shape(x, (_rows_here(x.shape[0], set_size, rank_in_set),) + tuple(x.shape[1:]))
              for x in leaves]
    return tuple(_run(kernel, leaves, shapes))


def _reducescatter_fwd(cfg, *leaves):
    return _reducescatter_leaves(cfg, *leaves), None


def _reducescatter_bwd(cfg, _, cotangents):
    name, op, pre, post, set_id, set_size, rank_in_set, paths, rows = cfg
    factor = pre * post * (set_size if op == Sum else 1)
    scaled = [g * factor if factor != 1 else g for g in cotangents]
    # Blocks differ by a row when rows % size != 0, and inside jit an allgather needs equal
    # ones: every block is padded to the largest and the padding dropped after.
    most = [-(-n // set_size) for n in rows]
    padded = [jnp.pad(g, [(0, m - g.shape[0])] + [(0, 0)] * (g.ndim - 1))
              for g, m in zip(scaled, most)]
    gathered = _allgather_leaves((None, set_id, set_size, paths), *padded)
    out = []
    for g, n, m in zip(gathered, rows, most):
        keep = np.concatenate([np.arange(i * m, i * m + _rows_here(n, set_size, i))
                               for i in range(set_size)])
        out.append(jnp.take(g, keep, axis=0))
    return tuple(out)


_reducescatter_leaves.defvjp(_reducescatter_fwd, _reducescatter_bwd)


def reducescatter(tree, op=Average, name=None, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Every leaf reduced over the set (Average or Sum); rank i keeps the i-th block of rows
    (the first ``rows % size`` ranks one row more). Differentiable (Horovod's rule): the
    allgather of the cotangent, times the set's size for Sum, times the scale factors."""
    op = _common_ops.reducescatter_op(op, "kolo.jax")
    leaves, treedef, paths = _flatten(tree, "reducescatter")
    if not leaves:
        return tree
    for x, p in zip(leaves, paths):
        if x.ndim == 0:
            raise ValueError("reducescatter: the leaf at %s is a scalar; it needs a first "
                             "dimension to scatter" % p)
    set_id = _set_id(process_set)
    cfg = (name, op, float(prescale_factor), float(postscale_factor), set_id,
           _set_size(process_set), _set_rank_id(set_id), tuple(paths),
           tuple(x.shape[0] for x in leaves))
    return jax.tree_util.tree_unflatten(treedef, list(_reducescatter_leaves(cfg, *leaves)))


def alltoall(array, splits=None, name=None, process_set=global_process_set):
    """Sends ``splits[i]`` rows of ``array`` to rank i of the set (an even split when None).
    Returns the received rows, and ``(output, received_splits)`` when ``splits`` is given.
    Inside jit only the even split (``splits=None``): the received row count of uneven
    splits is only known when it runs."""
    leaves, _, _ = _flatten(array, "alltoall")
    if len(leaves) != 1:
        raise TypeError("alltoall takes one array, not a tree")
    x = leaves[0]
    set_id = _set_id(process_set)
    if _traced([x]):
        if splits is not None:
            raise NotImplementedError(
                "kolo.jax.alltoall with splits runs eagerly, not inside jax.jit: the number "
                "of rows it receives is only known when it runs (splits=None, the even "
                "split, works inside jit)")
        exchange = _host.alltoall_kernel(name, set_id)
        kernel = lambda arrays: exchange([arrays[0], np.zeros(0, np.int32)])[:1]  # noqa: E731
        return _run(kernel, [x], [_shape(x)])[0]
    split_array = np.asarray([] if splits is None else splits, np.int32).reshape(-1)
    out, received = _host.alltoall_kernel(name, set_id)([_host_view(x), split_array])
    output = _adopt(out)
    return output if splits is None else (output, jnp.asarray(received))


# --- objects, join, barrier ---------------------------------------------------------------

def _allgather_object_in_set(obj, set_id):
    data = np.frombuffer(pickle.dumps(obj), np.uint8)
    sizes, raw = _host.allgather_kernel("", set_id)(
        [np.asarray([data.size], np.int64), data])
    out, offset = [], 0
    for n in sizes.tolist():
        out.append(pickle.loads(raw[offset:offset + n].tobytes()))
        offset += n
    return out


def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every rank's ``obj`` (pickled), in rank order of the set."""
    _after_dispatched_collectives()
    return _allgather_object_in_set(obj, _set_id(process_set))


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Global rank ``root_rank``'s ``obj`` on every rank of the set (pickled; the size
    travels first). The root gets its own object back."""
    _after_dispatched_collectives()
    set_id = _set_id(process_set)
    root = _root_in_set(root_rank, set_id)
    is_root = _core.rank() == int(root_rank)
    data = np.frombuffer(pickle.dumps(obj), np.uint8) if is_root else None
    size = np.asarray([data.size if is_root else 0], np.int64)
    (size,) = _host.broadcast_kernel(root, (name or "object") + ".sz", set_id)([size])
    payload = data if is_root else np.zeros(int(size[0]), np.uint8)
    (payload,) = _host.broadcast_kernel(root, (name or "object") + ".t", set_id)([payload])
    return obj if is_root else pickle.loads(payload.tobytes())


def join():
    """This rank has no more data: until every rank has joined, it takes part in the
    others' allreduces with zeros. Returns the global rank that joined last."""
    _after_dispatched_collectives()
    return int(_core.wait(_core.join_async(0)).value)


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called it."""
    _after_dispatched_collectives()
    _core.wait(_core.barrier_async(_set_id(process_set)))


# --- Optax ---------------------------------------------------------------------------------

def allreduce_gradients(grads, op=Average, compression=Compression.none,
                        process_set=global_process_set):
    """``grads`` (a pytree) averaged (``op``) over the set's ranks in one fused operation:
    for custom training loops, jitted or not."""
    return allreduce(grads, op=op, compression=compression, process_set=process_set,
                     name=None)


def DistributedOptimizer(tx, op=Average, backward_passes_per_step=1,
                         compression=Compression.none, process_set=global_process_set):
    """An optax.GradientTransformation that averages the gradients over the set's ranks,
    then applies ``tx``; usable inside a jitted train step. With
    ``backward_passes_per_step`` N > 1 it is ``optax.MultiSteps``: the mean of N calls'
    gradients is averaged over the ranks and applied on every N-th call (the other calls
    return zero updates)."""
    import optax
    check_op(op, "kolo.jax")
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be >= 1, got %r"
                         % backward_passes_per_step)

    def init_fn(params):
        return tx.init(params)

    def update_fn(updates, state, params=None):
        reduced = allreduce(updates, op=op, compression=compression, process_set=process_set)
        return tx.update(reduced, state, params)

    distributed_tx = optax.GradientTransformation(init_fn, update_fn)
    if int(backward_passes_per_step) == 1:
        return distributed_tx
    return optax.MultiSteps(distributed_tx, every_k_schedule=int(backward_passes_per_step))


distributed = DistributedOptimizer
