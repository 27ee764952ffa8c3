"""kolo.jax's collectives, eagerly: every collective with every dtype JAX has on CPU, each
result checked against what every rank computes locally from every rank's (deterministic)
input; pytrees (nested dicts, lists, tuples, None leaves) keep their structure.

The contract: docs/api-jax.md. Horovod's semantics as in test/tensorflow/test_tf_ops.py.
"""
import numpy as np
import pytest
import jax
import jax.numpy as jnp

import kolo.jax as kj
import object_checks  # test/common

from jax_common import (FLOATS, N, NUMERIC, R, WITH_BOOL, as_np, assert_array,
                        assert_equal, const, expect, ids, reducescatter_rows, val)


NAMES = """
init shutdown is_initialized rank size local_rank local_size cross_rank cross_size is_chief
Average Sum Min Max Product Compression
allreduce allgather broadcast alltoall reducescatter broadcast_parameters broadcast_object
allgather_object barrier join DistributedOptimizer distributed allreduce_gradients
ProcessSet global_process_set add_process_set remove_process_set
""".split()


def test_every_name_of_the_contract_exists():
    missing = [n for n in NAMES if not hasattr(kj, n)]
    assert not missing


def test_basics():
    assert kj.is_initialized() is True
    for name in ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size"):
        assert type(getattr(kj, name)()) is int, name
    assert kj.rank() == R and kj.size() == N
    assert 0 <= kj.local_rank() < kj.local_size()
    assert 0 <= kj.cross_rank() < kj.cross_size()
    assert kj.is_chief() is (R == 0)
    assert len({kj.Average, kj.Sum, kj.Min, kj.Max, kj.Product}) == 5
    kj.init()  # idempotent
    assert kj.rank() == R and kj.size() == N


# --- allreduce --------------------------------------------------------------------------

OPS = ["Average", "Sum", "Min", "Max", "Product"]
KIND = {"Average": "avg", "Sum": "plain", "Min": "minmax", "Max": "minmax", "Product": "prod"}


def reduce_np(op, every):
    stack = np.stack(every).astype(np.float64)
    return {"Average": stack.sum(0) / N, "Sum": stack.sum(0), "Min": stack.min(0),
            "Max": stack.max(0), "Product": stack.prod(0)}[op]


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize("op", OPS)
def test_allreduce(op, dtype):
    every = [val(r, (2, 3), KIND[op]) for r in range(N)]
    out = kj.allreduce(const(every[R], dtype), op=getattr(kj, op))
    assert_array(out, dtype, (2, 3))
    assert_equal(out, reduce_np(op, every))


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_allreduce_prescale_postscale(op, dtype):
    every = [val(r, (5,), KIND[op]) for r in range(N)]
    out = kj.allreduce(const(every[R], dtype), op=getattr(kj, op), prescale_factor=2.0,
                       postscale_factor=1.5)
    assert_array(out, dtype, (5,))
    assert_equal(out, reduce_np(op, every) * 3.0)


def test_allreduce_defaults_to_average_names_and_scalars():
    every = [val(r, (4,), "avg") for r in range(N)]
    x = const(every[R], jnp.float64)
    assert_equal(kj.allreduce(x), reduce_np("Average", every))
    assert_equal(kj.allreduce(x, op=kj.Sum, name="jax.ops.named"), reduce_np("Sum", every))
    scalar = kj.allreduce(jnp.asarray(float(R + 1)), op=kj.Sum)
    assert_array(scalar, jnp.float64, ())
    assert float(scalar) == N * (N + 1) / 2


def test_allreduce_takes_numpy_arrays_and_python_numbers():
    out = kj.allreduce({"np": np.full(3, R + 1, np.float32), "int": R + 1,
                        "float": float(R) + 0.5, "npnum": np.float64(R)}, op=kj.Sum)
    assert set(out) == {"np", "int", "float", "npnum"}
    assert_equal(out["np"], [N * (N + 1) / 2] * 3)
    assert np.asarray(out["np"]).dtype == np.float32
    assert float(out["int"]) == N * (N + 1) / 2
    assert float(out["float"]) == N * (N - 1) / 2 + 0.5 * N
    assert float(out["npnum"]) == N * (N - 1) / 2


@pytest.mark.parametrize("compression", ["none", "fp16", "bf16"])
def test_allreduce_compression_keeps_the_dtype(compression):
    comp = getattr(kj.Compression, compression)
    every = [val(r, (3,)) for r in range(N)]
    for dtype in (jnp.float32, jnp.float64):
        out = kj.allreduce(const(every[R], dtype), op=kj.Sum, compression=comp)
        assert_array(out, dtype, (3,))
        assert_equal(out, reduce_np("Sum", every))
    i = jnp.asarray([1, 2], jnp.int32)  # not a float: left as it is
    out = kj.allreduce(i, op=kj.Sum, compression=comp)
    assert_array(out, jnp.int32, (2,))
    assert_equal(out, [N, 2 * N])


# --- allgather --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_allgather_different_first_dims(dtype):
    every = [val(r, (r + 1, 2, 3)) for r in range(N)]
    out = kj.allgather(const(every[R], dtype))
    rows = N * (N + 1) // 2
    assert_array(out, dtype, (rows, 2, 3))
    assert_equal(out, np.concatenate([expect(e, dtype) for e in every]))


@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_allgather_stack(dtype):
    every = [val(r, (2, 3)) for r in range(N)]
    out = kj.allgather(const(every[R], dtype), stack=True)
    assert_array(out, dtype, (N, 2, 3))
    assert_equal(out, np.stack([expect(e, dtype) for e in every]))


def test_allgather_scalar_stack_and_empty_rows():
    out = kj.allgather(jnp.asarray(float(R)), stack=True)
    assert_array(out, jnp.float64, (N,))
    assert_equal(out, np.arange(N))
    # rank 0 contributes no rows
    x = jnp.ones((R, 2), jnp.float32) * R
    out = kj.allgather(x)
    assert_array(out, jnp.float32, (N * (N - 1) // 2, 2))
    assert_equal(out, np.concatenate([np.full((r, 2), r) for r in range(N)]))


# --- broadcast --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
@pytest.mark.parametrize("root", ["first", "last"])
def test_broadcast(root, dtype):
    root_rank = 0 if root == "first" else N - 1
    every = [val(r, (3, 2)) for r in range(N)]
    out = kj.broadcast(const(every[R], dtype), root_rank=root_rank)
    assert_array(out, dtype, (3, 2))
    assert_equal(out, expect(every[root_rank], dtype))


def test_broadcast_default_root_and_name():
    out = kj.broadcast(jnp.asarray([R, R + 1.0]), name="jax.ops.bcast")
    assert_equal(out, [0.0, 1.0])


# --- alltoall ---------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_alltoall_equal_splits(dtype):
    # rank r's row block j (2 rows) goes to rank j
    every = [val(r, (2 * N, 3)) + 2 * r for r in range(N)]
    out = kj.alltoall(const(every[R], dtype))
    assert_array(out, dtype, (2 * N, 3))
    want = np.concatenate([expect(every[r], dtype)[2 * R:2 * R + 2] for r in range(N)])
    assert_equal(out, want)


def _splits(r):
    """What rank r sends to every rank: 1, 2 or 0 rows."""
    return [(r + j) % 3 for j in range(N)]


@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_alltoall_with_splits(dtype):
    every = [(val(r, (sum(_splits(r)), 2)) + 3 * r) for r in range(N)]
    out, received = kj.alltoall(const(every[R], dtype),
                                splits=jnp.asarray(_splits(R), jnp.int32))
    parts = []
    for r in range(N):
        start = sum(_splits(r)[:R])
        parts.append(expect(every[r], dtype)[start:start + _splits(r)[R]])
    want = np.concatenate(parts)
    assert_array(out, dtype, want.shape)
    assert_equal(out, want)
    assert [int(v) for v in np.asarray(received)] == [_splits(r)[R] for r in range(N)]


def test_alltoall_splits_as_a_list():
    x = jnp.arange(sum(_splits(R)), dtype=jnp.float32) + 10 * R
    out, received = kj.alltoall(x, splits=_splits(R))
    want = np.concatenate([(np.arange(sum(_splits(r)), dtype=np.float32) + 10 * r)
                           [sum(_splits(r)[:R]):sum(_splits(r)[:R + 1])] for r in range(N)])
    assert_array(out, jnp.float32, want.shape)
    assert_equal(out, want)
    assert [int(v) for v in np.asarray(received)] == [_splits(r)[R] for r in range(N)]


# --- reducescatter ----------------------------------------------------------------------

@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize("op", ["Average", "Sum"])
def test_reducescatter(op, dtype):
    rows = 2 * N + 1  # uneven: the first rank takes one more
    every = [val(r, (rows, 2), KIND[op]) for r in range(N)]
    out = kj.reducescatter(const(every[R], dtype), op=getattr(kj, op))
    full = reduce_np(op, every)
    mine = reducescatter_rows(rows, R, N)
    start = sum(reducescatter_rows(rows, r, N) for r in range(R))
    assert_array(out, dtype, (mine, 2))
    assert_equal(out, full[start:start + mine])


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.int32], ids=ids([jnp.float32, jnp.int32]))
def test_reducescatter_default_average_and_scales(dtype):
    every = [val(r, (N, 3), "avg") for r in range(N)]
    out = kj.reducescatter(const(every[R], dtype), prescale_factor=2.0, postscale_factor=1.5)
    assert_array(out, dtype, (1, 3))
    assert_equal(out, reduce_np("Average", every)[R:R + 1] * 3)


# --- pytrees ----------------------------------------------------------------------------

def _tree(r):
    """A nested tree with mixed dtypes, a tuple, a list, None leaves and a scalar."""
    return {"a": const(val(r, (2, 3)), jnp.float32),
            "b": [const(val(r, (4,)), jnp.int32), None,
                  (const(val(r, ()), jnp.float64), const(val(r, (1, 2)), jnp.bfloat16))],
            "c": None,
            "d": {"e": const(val(r, (3,)), jnp.uint8)}}


def _leaves(r):
    return [np.asarray(l) for l in jax.tree.leaves(_tree(r))]


def test_allreduce_pytree_keeps_structure_dtypes_and_none():
    tree = _tree(R)
    out = kj.allreduce(tree, op=kj.Sum)
    assert jax.tree.structure(out) == jax.tree.structure(tree)
    assert out["c"] is None and out["b"][1] is None
    assert isinstance(out["b"], list) and isinstance(out["b"][2], tuple)
    for o, i, k in zip(jax.tree.leaves(out), jax.tree.leaves(tree), range(99)):
        assert_array(o, i.dtype, i.shape)
        assert_equal(o, sum(_leaves(r)[k].astype(np.float64) for r in range(N)))


def test_allgather_pytree():
    tree = _tree(R)
    out = kj.allgather(jax.tree.map(lambda x: x.reshape((1,) + x.shape), tree))
    assert jax.tree.structure(out) == jax.tree.structure(tree)
    for k, o in enumerate(jax.tree.leaves(out)):
        assert_equal(o, np.stack([_leaves(r)[k].astype(np.float64) for r in range(N)]))
    out = kj.allgather(tree, stack=True)
    assert jax.tree.structure(out) == jax.tree.structure(tree)
    for k, o in enumerate(jax.tree.leaves(out)):
        assert_equal(o, np.stack([_leaves(r)[k].astype(np.float64) for r in range(N)]))


def test_broadcast_pytree():
    tree = _tree(R)
    out = kj.broadcast(tree, root_rank=N - 1)
    assert jax.tree.structure(out) == jax.tree.structure(tree)
    for k, (o, i) in enumerate(zip(jax.tree.leaves(out), jax.tree.leaves(tree))):
        assert_array(o, i.dtype, i.shape)
        assert_equal(o, _leaves(N - 1)[k].astype(np.float64))


def test_reducescatter_pytree():
    tree = {"x": [const(val(R, (N, 2)), jnp.float32), None],
            "y": (const(val(R, (2 * N,)), jnp.int64),)}
    out = kj.reducescatter(tree, op=kj.Sum)
    assert jax.tree.structure(out) == jax.tree.structure(tree)
    assert out["x"][1] is None
    assert_equal(out["x"][0], sum(val(r, (N, 2)) for r in range(N))[R:R + 1])
    assert_equal(out["y"][0], sum(val(r, (2 * N,)) for r in range(N))[2 * R:2 * R + 2])


def test_trees_of_only_none_and_empty_containers():
    out = kj.allreduce({"a": None, "b": [], "c": ()})
    assert out == {"a": None, "b": [], "c": ()}


class _Point:
    """A registered pytree node of the user's."""
    def __init__(self, x, y):
        self.x, self.y = x, y


jax.tree_util.register_pytree_node(_Point, lambda p: ((p.x, p.y), None),
                                   lambda _, c: _Point(*c))


def test_registered_pytree_nodes_are_trees():
    out = kj.allreduce(_Point(jnp.asarray([R + 1.0]), None), op=kj.Sum)
    assert isinstance(out, _Point) and out.y is None
    assert_equal(out.x, [N * (N + 1) / 2])


# --- parameters and objects -------------------------------------------------------------

def test_broadcast_parameters():
    params = {"dense": {"kernel": jnp.full((2, 3), float(R)), "bias": jnp.full((3,), R + 0.5)},
              "scale": jnp.asarray(R, jnp.int32), "extra": None}
    for root in (0, N - 1):
        out = kj.broadcast_parameters(params, root_rank=root)
        assert jax.tree.structure(out) == jax.tree.structure(params)
        assert_equal(out["dense"]["kernel"], np.full((2, 3), float(root)))
        assert_equal(out["dense"]["bias"], np.full((3,), root + 0.5))
        assert_array(out["scale"], jnp.int32, ())
        assert int(out["scale"]) == root
    assert_equal(kj.broadcast_parameters(params)["scale"], 0)  # default root 0


def test_broadcast_parameters_of_a_flax_model():
    import flax.linen as nn
    model = nn.Sequential([nn.Dense(4), nn.relu, nn.Dense(2)])
    params = model.init(jax.random.PRNGKey(R), jnp.ones((1, 3)))
    root = model.init(jax.random.PRNGKey(N - 1), jnp.ones((1, 3)))
    out = kj.broadcast_parameters(params, root_rank=N - 1)
    assert jax.tree.structure(out) == jax.tree.structure(params)
    for o, w in zip(jax.tree.leaves(out), jax.tree.leaves(root)):
        assert_array(o, w.dtype, w.shape)
        assert np.array_equal(np.asarray(o), np.asarray(w))


def test_broadcast_object():
    obj = {"rank": R, "list": [R] * (R + 1), "text": "r%d" % R, "arr": np.arange(R + 2)}
    out = kj.broadcast_object(obj, root_rank=N - 1)
    assert out["rank"] == N - 1 and out["list"] == [N - 1] * N and out["text"] == "r%d" % (N - 1)
    assert np.array_equal(out["arr"], np.arange(N + 1))
    assert kj.broadcast_object(obj if R == 0 else None)["text"] == "r0"  # default root 0
    assert kj.broadcast_object(("named", R), name="jax.obj.named") == ("named", 0)


def test_objects_pickle_with_cloudpickle_where_it_is_installed():
    object_checks.with_cloudpickle(kj.broadcast_object, kj.allgather_object, R, N)


def test_objects_pickle_with_pickle_without_cloudpickle(monkeypatch):
    object_checks.without_cloudpickle(kj.broadcast_object, kj.allgather_object, R, N,
                                      monkeypatch)


def test_allgather_object():
    out = kj.allgather_object({"rank": R, "payload": "x" * (10 * R + 1)})
    assert out == [{"rank": r, "payload": "x" * (10 * r + 1)} for r in range(N)]
    assert kj.allgather_object(R, name="jax.obj.ag") == list(range(N))


def test_barrier_and_join():
    assert kj.barrier() is None
    last = kj.join()
    assert type(last) is int and 0 <= last < N
    assert kj.allgather_object(last) == [last] * N
    # still in step after join
    assert_equal(kj.allreduce(jnp.ones(2), op=kj.Sum), [float(N)] * 2)


# --- process sets -----------------------------------------------------------------------

SUB = [0, 1] if N > 2 else [1]  # at np=2, [0, 1] would be the global set


def test_process_set():
    assert kj.global_process_set.included()
    ps = kj.add_process_set(SUB)
    try:
        if R in SUB:
            x = jnp.asarray([R + 1.0, 2.0 * R])
            out = kj.allreduce(x, op=kj.Sum, process_set=ps)
            assert_equal(out, [sum(r + 1.0 for r in SUB), sum(2.0 * r for r in SUB)])
            out = kj.allgather({"v": jnp.asarray([float(R)])}, process_set=ps)
            assert_equal(out["v"], [float(r) for r in SUB])
            out = kj.broadcast(jnp.asarray([float(R)]), root_rank=SUB[-1], process_set=ps)
            assert_equal(out, [float(SUB[-1])])
        else:
            assert not ps.included()
    finally:
        kj.remove_process_set(ps)
    assert_equal(kj.allreduce(jnp.ones(2), op=kj.Sum), [float(N)] * 2)


def test_unnamed_collectives_in_rank_dependent_branches_pair():
    # As in Horovod: the same collective, unnamed, on each side of a branch.
    if R == 0:
        b = kj.broadcast(jnp.arange(4.0), root_rank=0)
    else:
        b = kj.broadcast(jnp.zeros(4), root_rank=0)
    assert np.asarray(b).tolist() == [0.0, 1.0, 2.0, 3.0]
