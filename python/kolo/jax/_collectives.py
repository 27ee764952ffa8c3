"""kolo.jax's collectives on pytrees, differentiable over the flat list of leaves
(``jax.custom_vjp``), and objects, join and barrier (see kolo.jax)."""
import functools

import numpy as np
import jax
import jax.numpy as jnp

from kolo.common import engine as _engine
from kolo.common import host as _host
from kolo.common import objects as _objects
from kolo.common.collectives import KoloInternalError
from kolo.common.compression import NoneCompressor
from kolo.common.ops import Adasum, Average, Sum, check_adasum, check_op, reducescatter_op
from kolo.common.process_sets import _set_id, _set_size, global_process_set, root_in_set
from kolo.jax import _xla
from kolo.jax._trees import (
    _adopt, _after_dispatched_collectives, _flatten, _host_view, _run, _shape, _structured,
    _traced)


def _differentiable(forward, backward, residuals=lambda cfg, leaves: None):
    """``forward(cfg, *leaves)`` as a ``jax.custom_vjp`` of the leaves (``cfg``, hashable,
    is not differentiated), whose cotangents are ``backward(cfg, residuals, cotangents)``
    with ``residuals(cfg, leaves)`` kept from the forward call."""
    collective = jax.custom_vjp(forward, nondiff_argnums=(0,))
    collective.defvjp(
        lambda cfg, *leaves: (collective(cfg, *leaves), residuals(cfg, leaves)), backward)
    return collective


def _first_dims(cfg, leaves):
    return tuple(x.shape[0] for x in leaves)


def _allreduce_forward(cfg, *leaves):
    name, op, pre, post, set_id, paths = cfg
    if _traced(leaves) and _xla.available and jax.default_backend() == "cpu":
        # In place on XLA's buffers, no copies: XLA's FFI handler checks the trees (the
        # same sentinel as _structured) and then reduces the leaves.
        return tuple(_xla.allreduce(leaves, paths, name, op, pre, post, set_id))
    return _run(_structured(_host.allreduce_kernel([len(leaves)], name, op, pre, post, set_id),
                            leaves, paths, "allreduce", set_id, name), leaves)


_allreduce_leaves = _differentiable(
    _allreduce_forward,  # the cotangents reduced the same way, unnamed: the name is the call's
    lambda cfg, _, cotangents: _allreduce_leaves((None,) + cfg[1:], *cotangents))


def allreduce(tree, op=Average, prescale_factor=1.0, postscale_factor=1.0, name=None,
              process_set=global_process_set, compression=NoneCompressor):
    """The reduction (``op``, default the average) over the set's ranks of every leaf, as
    a tree of the same structure; all leaves are negotiated and fused as one unit.
    Differentiable: the cotangent is reduced the same way."""
    check_op(op, "kolo.jax")
    if op == Adasum:  # inside jit: when traced (the core refuses the same eagerly)
        check_adasum(_set_id(process_set))
    leaves, treedef, paths = _flatten(tree, "allreduce")
    if not leaves:
        return tree
    pairs = [compression.compress(x) for x in leaves]
    cfg = (name, op, float(prescale_factor), float(postscale_factor), _set_id(process_set),
           tuple(paths))
    reduced = _allreduce_leaves(cfg, *[c for c, _ in pairs])
    return jax.tree_util.tree_unflatten(
        treedef, [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, pairs)])


def _allgather_forward(cfg, *leaves):
    name, set_id, set_size, paths = cfg
    if not _traced(leaves):
        return _run(_structured(_host.allgather_kernel(name, set_id), leaves, paths,
                                "allgather", set_id, name, gathered=True), leaves)
    # Inside jit the result's shape is fixed when tracing: every rank must send the same
    # first dimensions. Each rank sends its row counts along (one more array in the
    # group) and every rank checks all of them, so all raise or none does.
    rows = np.asarray([[x.shape[0] for x in leaves]], np.int32)
    gathered = _structured(_host.allgather_kernel(name, set_id), (rows,) + leaves,
                           ("<rows>",) + paths, "allgather", set_id, name, gathered=True)

    def kernel(arrays):
        out = gathered(arrays)
        every = out[0].reshape(set_size, len(leaves))
        for i, p in enumerate(paths):
            if len(set(every[:, i].tolist())) > 1:
                raise KoloInternalError(
                    "allgather inside jax.jit needs the same first dimension on every rank "
                    "(the result's shape is fixed when tracing); the leaf at %s has %s rows "
                    "on the set's ranks in order; call it outside jit for differing sizes"
                    % (p, every[:, i].tolist()))
        return out
    shapes = [_shape(rows, (set_size, len(leaves)))] + [
        _shape(x, (x.shape[0] * set_size,) + x.shape[1:]) for x in leaves]
    return _run(kernel, (rows,) + leaves, shapes)[1:]


def _allgather_backward(cfg, rows, cotangents):
    name, set_id, set_size, paths = cfg
    averaged = _allreduce_leaves((None, Average, 1.0, 1.0, set_id, paths), *cotangents)
    counts = _allgather_leaves((None, set_id, set_size, paths),
                               *[jnp.asarray([n], jnp.int64 if jax.config.jax_enable_x64
                                             else jnp.int32) for n in rows])
    mine = _engine.set_rank(set_id)
    out = []
    for g, n, c in zip(averaged, rows, counts):
        start = jnp.sum(c[:mine])
        out.append(jax.lax.dynamic_slice_in_dim(g, start, n, axis=0))
    return tuple(out)


_allgather_leaves = _differentiable(_allgather_forward, _allgather_backward, _first_dims)


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
    if stack:
        leaves = [x[None] for x in leaves]
    cfg = (name, _set_id(process_set), _set_size(process_set), tuple(paths))
    return jax.tree_util.tree_unflatten(treedef, list(_allgather_leaves(cfg, *leaves)))


def _broadcast_forward(cfg, *leaves):
    name, root_in_set, root_rank, set_id, paths = cfg
    return _run(_structured(_host.broadcast_kernel(root_in_set, name, set_id), leaves, paths,
                            "broadcast", set_id, name), leaves)


def _broadcast_backward(cfg, _, cotangents):
    name, root_in_set, root_rank, set_id, paths = cfg
    averaged = _allreduce_leaves((None, Average, 1.0, 1.0, set_id, paths), *cotangents)
    if _engine.rank() != root_rank:
        return tuple(jnp.zeros_like(g) for g in averaged)
    return averaged


_broadcast_leaves = _differentiable(_broadcast_forward, _broadcast_backward)


def broadcast(tree, root_rank=0, name=None, process_set=global_process_set):
    """Global rank ``root_rank``'s tree on every rank of the set (same structure, shapes
    and dtypes everywhere). Differentiable: the root's cotangent is the average over the
    ranks, the others' zero."""
    leaves, treedef, paths = _flatten(tree, "broadcast")
    if not leaves:
        return tree
    set_id = _set_id(process_set)
    cfg = (name, root_in_set(root_rank, set_id), int(root_rank), set_id, tuple(paths))
    return jax.tree_util.tree_unflatten(treedef, list(_broadcast_leaves(cfg, *leaves)))


def broadcast_parameters(params, root_rank=0, process_set=global_process_set):
    """Returns ``params`` (any pytree) with root_rank's values on every rank: the start of
    training, so that every rank begins from the same weights."""
    return broadcast(params, root_rank, name="broadcast_parameters", process_set=process_set)


def _rows_here(rows, set_size, rank_in_set):
    return rows // set_size + (1 if rank_in_set < rows % set_size else 0)


def _reducescatter_forward(cfg, *leaves):
    name, op, pre, post, set_id, set_size, rank_in_set, paths = cfg
    kernel = _structured(_host.reducescatter_kernel(name, op, pre, post, set_id), leaves,
                         paths, "reducescatter", set_id, name)
    shapes = [_shape(x, (_rows_here(x.shape[0], set_size, rank_in_set),) + x.shape[1:])
              for x in leaves]
    return _run(kernel, leaves, shapes)


def _reducescatter_backward(cfg, rows, cotangents):
    name, op, pre, post, set_id, set_size, rank_in_set, paths = cfg
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


_reducescatter_leaves = _differentiable(_reducescatter_forward, _reducescatter_backward,
                                        _first_dims)


def reducescatter(tree, op=Average, name=None, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Every leaf reduced over the set (Average or Sum); rank i keeps the i-th block of rows
    (the first ``rows % size`` ranks one row more). Differentiable (Horovod's rule): the
    allgather of the cotangent, times the set's size for Sum, times the scale factors."""
    op = reducescatter_op(op, "kolo.jax")
    leaves, treedef, paths = _flatten(tree, "reducescatter")
    if not leaves:
        return tree
    for x, p in zip(leaves, paths):
        if x.ndim == 0:
            raise ValueError("reducescatter: the leaf at %s is a scalar; it needs a first "
                             "dimension to scatter" % p)
    set_id = _set_id(process_set)
    cfg = (name, op, float(prescale_factor), float(postscale_factor), set_id,
           _set_size(process_set), _engine.set_rank(set_id), tuple(paths))
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
    if _traced([x]):
        if splits is not None:
            raise NotImplementedError(
                "kolo.jax.alltoall with splits runs eagerly, not inside jax.jit: the number "
                "of rows it receives is only known when it runs (splits=None, the even "
                "split, works inside jit)")
        exchange = _host.alltoall_kernel(name, _set_id(process_set))
        kernel = lambda arrays: exchange([arrays[0], np.zeros(0, np.int32)])[:1]  # noqa: E731
        return _run(kernel, [x])[0]
    _after_dispatched_collectives()
    out, received = _host.COLLECTIVES.now(_host.COLLECTIVES.start_alltoall(
        _host_view(x), splits, name, process_set, caller_waits=True))
    output = _adopt(out)
    return output if splits is None else (output, jnp.asarray(received))


# --- objects, join, barrier ---------------------------------------------------------------

def allgather_object(obj, name=None, process_set=global_process_set):
    """The list of every rank's ``obj`` (pickled as by broadcast_object), in rank order of
    the set."""
    _after_dispatched_collectives()
    # Named, as kolo.torch's and kolo.tensorflow's: ranks may call it from different places.
    return _objects.allgather_object(obj, name or "allgather_object", process_set)


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Global rank ``root_rank``'s ``obj`` on every rank of the set (pickled with cloudpickle
    where it is installed, else pickle; the size travels first). The root gets its own
    object back; when the root cannot pickle it, every rank raises (the others
    ``pickle.PicklingError`` with the root's error)."""
    _after_dispatched_collectives()
    return _objects.broadcast_object(obj, root_rank, name or "object", process_set)


def _after_dispatched(call):
    """kolo.common's ``call``, made once the jitted computations dispatched so far have run
    their collectives (``_after_dispatched_collectives``)."""
    @functools.wraps(call)
    def run(*args, **kwargs):
        _after_dispatched_collectives()
        return call(*args, **kwargs)
    return run


join = _after_dispatched(_host.COLLECTIVES.join)
barrier = _after_dispatched(_host.COLLECTIVES.barrier)
