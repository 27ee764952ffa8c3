"""kolo.tensorflow's collectives, eagerly, against Horovod 0.28's horovod.tensorflow: every
collective with every dtype TF has on CPU, each result checked against what every rank
computes locally from every rank's (deterministic) input.

Horovod references: horovod/tensorflow/__init__.py (allreduce, grouped_allreduce,
reducescatter, grouped_reducescatter, IndexedSlices), horovod/tensorflow/mpi_ops.py
(allgather, grouped_allgather, broadcast, broadcast_, alltoall, join),
horovod/tensorflow/functions.py (broadcast_object, allgather_object, broadcast_variables),
horovod/common/util.py (the deprecated ``average``).
"""
import inspect
import warnings

import numpy as np
import pytest
import tensorflow as tf

import kolo.tensorflow as hvd
import object_checks  # test/common
from kolo.common import process_sets as common_process_sets

from tf_common import (FLOATS, N, NUMERIC, R, WITH_BOOL, KoloInternalError, as_np, assert_equal,
                       const, expect, ids, reducescatter_rows, val)


# --- names and signatures ----------------------------------------------------------------

NAMES = """
init shutdown is_initialized rank size local_rank local_size cross_rank cross_size
mpi_built mpi_enabled nccl_built cuda_built gloo_built gloo_enabled ddl_built ccl_built
rocm_built mpi_threads_supported start_timeline stop_timeline
Average Sum Min Max Product Adasum Compression
allreduce grouped_allreduce allgather grouped_allgather broadcast broadcast_
broadcast_variables alltoall reducescatter grouped_reducescatter broadcast_object
allgather_object join barrier DistributedGradientTape DistributedOptimizer
ProcessSet global_process_set add_process_set remove_process_set SyncBatchNormalization
PartialDistributedGradientTape broadcast_global_variables broadcast_object_fn util
_executing_eagerly _make_subgraph _cache vars_to_refs refs_to_vars
""".split()


def test_every_name_of_the_contract_exists():
    missing = [n for n in NAMES if not hasattr(hvd, n)]
    assert not missing


def test_basics_have_horovods_types():
    assert hvd.is_initialized() is True
    for name in ("rank", "size", "local_rank", "local_size", "cross_rank", "cross_size"):
        assert type(getattr(hvd, name)()) is int, name
    assert hvd.rank() == R and hvd.size() == N
    assert 0 <= hvd.local_rank() < hvd.local_size()
    assert hvd.mpi_built() and hvd.mpi_enabled()
    assert not hvd.gloo_built() and not hvd.gloo_enabled()
    assert type(hvd.nccl_built()) is int
    assert hvd.init() is None  # idempotent
    # Horovod's codes (test_tf_adasum.py runs Adasum itself).
    assert [hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product] == list(range(6))


def test_topology_ops_are_tensors_with_the_values():
    # Horovod's rank_op / size_op / local_rank_op / local_size_op / process_set_included_op.
    assert int(hvd.rank_op()) == R and int(hvd.size_op()) == N
    assert int(hvd.local_rank_op()) == hvd.local_rank()
    assert int(hvd.local_size_op()) == hvd.local_size()
    assert int(hvd.process_set_included_op()) == 1

    @tf.function
    def f():
        return hvd.rank_op(), hvd.size_op()

    r, n = f()
    assert int(r) == R and int(n) == N


# Horovod 0.28's parameter names, in Horovod's positional order.
HOROVOD_PARAMS = {
    "allreduce": "tensor average device_dense device_sparse compression op prescale_factor "
                 "postscale_factor name process_set",
    "grouped_allreduce": "tensors average device_dense device_sparse compression op "
                         "prescale_factor postscale_factor process_set",
    "allgather": "tensor name ignore_name_scope process_set",
    "grouped_allgather": "tensors name ignore_name_scope process_set",
    "broadcast": "tensor root_rank name ignore_name_scope process_set",
    "broadcast_": "variables root_rank name process_set",
    "broadcast_variables": "variables root_rank process_set",
    "alltoall": "tensor splits name ignore_name_scope process_set",
    "reducescatter": "tensor device_dense compression op name process_set ignore_name_scope "
                     "prescale_factor postscale_factor",
    "grouped_reducescatter": "tensors device_dense compression op process_set "
                             "prescale_factor postscale_factor",
    "broadcast_object": "obj root_rank session name process_set",
    "allgather_object": "obj session name process_set",
    "DistributedGradientTape": "gradtape device_dense device_sparse compression "
                               "sparse_as_dense op gradient_predivide_factor num_groups "
                               "groups process_set",
    "PartialDistributedGradientTape": "gradtape device_dense device_sparse compression "
                                      "sparse_as_dense op gradient_predivide_factor "
                                      "num_groups groups process_set local_layers "
                                      "scale_local_gradients",
    "DistributedOptimizer": "optimizer name use_locking device_dense device_sparse "
                            "compression sparse_as_dense backward_passes_per_step op "
                            "gradient_predivide_factor average_aggregated_gradients "
                            "num_groups groups process_set",
    "init": "comm process_sets",
}


@pytest.mark.parametrize("name", sorted(HOROVOD_PARAMS))
def test_horovods_keyword_arguments_are_accepted(name):
    params = inspect.signature(getattr(hvd, name)).parameters
    has_kwargs = any(p.kind is p.VAR_KEYWORD for p in params.values())
    missing = [p for p in HOROVOD_PARAMS[name].split() if p not in params]
    assert has_kwargs or not missing, missing


@pytest.mark.parametrize("name", sorted(HOROVOD_PARAMS))
def test_horovods_positional_order(name):
    params = [p.name for p in inspect.signature(getattr(hvd, name)).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    want = HOROVOD_PARAMS[name].split()
    assert params[:len(want)] == want


def test_defaults_are_horovods():
    sig = inspect.signature
    assert sig(hvd.reducescatter).parameters["op"].default == hvd.Average
    assert sig(hvd.grouped_reducescatter).parameters["op"].default == hvd.Average
    assert sig(hvd.DistributedGradientTape).parameters["op"].default == hvd.Average
    assert sig(hvd.broadcast_object).parameters["root_rank"].default == 0
    for name in ("allreduce", "allgather", "broadcast", "alltoall", "reducescatter"):
        assert sig(getattr(hvd, name)).parameters["process_set"].default \
            is hvd.global_process_set


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
    out = hvd.allreduce(const(every[R], dtype), op=getattr(hvd, op))
    assert isinstance(out, tf.Tensor) and out.dtype == dtype
    assert_equal(out, reduce_np(op, every))


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_allreduce_prescale_postscale(op, dtype):
    every = [val(r, (5,), KIND[op]) for r in range(N)]
    out = hvd.allreduce(const(every[R], dtype), op=getattr(hvd, op), prescale_factor=2.0,
                        postscale_factor=1.5)
    assert out.dtype == dtype
    assert_equal(out, reduce_np(op, every) * 3.0)


def test_allreduce_defaults_to_average_and_takes_variables_and_names():
    every = [val(r, (4,), "avg") for r in range(N)]
    x = tf.Variable(const(every[R], tf.float64))
    assert_equal(hvd.allreduce(x), reduce_np("Average", every))
    assert_equal(hvd.allreduce(x.read_value(), name="tf.ops.named", op=hvd.Sum),
                 reduce_np("Sum", every))
    scalar = hvd.allreduce(tf.constant(float(R + 1)), op=hvd.Sum)
    assert scalar.shape == () and scalar.numpy() == N * (N + 1) / 2


def test_names_and_name_scopes_do_not_change_values():
    x = tf.constant([float(R + 1)] * 2)
    total = [N * (N + 1) / 2.0] * 2
    with tf.name_scope("outer"):
        assert_equal(hvd.allreduce(x, op=hvd.Sum, name="tf.ops.scoped"), total)
        assert_equal(hvd.allgather(x, name="tf.ops.scoped_ag", ignore_name_scope=True),
                     np.concatenate([[r + 1.0] * 2 for r in range(N)]))

    @tf.function
    def f(t):
        with tf.name_scope("inner"):
            return (hvd.allreduce(t, op=hvd.Sum, name="fn.scoped"),
                    hvd.broadcast(t, 0, name="fn.bcast", ignore_name_scope=True))

    s, b = f(x)
    assert_equal(s, total)
    assert_equal(b, [1.0, 1.0])


def test_average_parameter_is_deprecated_and_exclusive_with_op():
    x = tf.constant([float(R + 1)] * 2)
    with pytest.warns(DeprecationWarning, match="average"):
        out = hvd.allreduce(x, average=False)
    assert_equal(out, [N * (N + 1) / 2.0] * 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert_equal(hvd.allreduce(x, average=True), [(N + 1) / 2.0] * 2)
    with pytest.raises(ValueError, match="supersedes average"):
        hvd.allreduce(x, average=True, op=hvd.Sum)


@pytest.mark.parametrize("compression", ["fp16", "bf16"])
def test_allreduce_compression_keeps_the_dtype(compression):
    comp = getattr(hvd.Compression, compression)
    every = [val(r, (3,)) for r in range(N)]
    out = hvd.allreduce(const(every[R], tf.float32), op=hvd.Sum, compression=comp)
    assert out.dtype == tf.float32
    assert_equal(out, reduce_np("Sum", every))
    out = hvd.allreduce(const(every[R], tf.float64), op=hvd.Sum, compression=comp)
    assert out.dtype == tf.float64
    assert_equal(out, reduce_np("Sum", every))
    i = tf.constant([1, 2], tf.int32)  # not a float: left as it is
    assert_equal(hvd.allreduce(i, op=hvd.Sum, compression=comp), [N, 2 * N])


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
def test_grouped_allreduce(dtype):
    a = [val(r, (3,)) for r in range(N)]
    b = [val(r, (2, 2)) for r in range(N)]
    out = hvd.grouped_allreduce([const(a[R], dtype), const(b[R], dtype)], op=hvd.Sum)
    assert isinstance(out, list) and len(out) == 2
    assert out[0].dtype == dtype and out[1].dtype == dtype
    assert_equal(out[0], reduce_np("Sum", a))
    assert_equal(out[1], reduce_np("Sum", b))


def test_grouped_allreduce_average_scales_and_empty():
    a = [val(r, (3,), "avg") for r in range(N)]
    b = [val(r, (2,), "avg") for r in range(N)]
    out = hvd.grouped_allreduce([const(a[R], tf.float32), const(b[R], tf.float32)],
                                prescale_factor=2.0, postscale_factor=1.5)
    assert_equal(out[0], reduce_np("Average", a) * 3)
    assert_equal(out[1], reduce_np("Average", b) * 3)
    assert hvd.grouped_allreduce([]) == []


# --- IndexedSlices ----------------------------------------------------------------------

def _slices(r, dtype=tf.float64):
    values = const(val(r, (r + 1, 2)), dtype)
    indices = tf.constant([(r + i) % 4 for i in range(r + 1)], tf.int64)
    return tf.IndexedSlices(values, indices, dense_shape=tf.constant([4, 2], tf.int64))


def test_allreduce_of_indexed_slices_allgathers_values_and_indices():
    mine = _slices(R)
    all_values = np.concatenate([as_np(_slices(r).values) for r in range(N)])
    all_indices = np.concatenate([_slices(r).indices.numpy() for r in range(N)])
    out = hvd.allreduce(mine)  # Average
    assert isinstance(out, tf.IndexedSlices)
    assert np.allclose(as_np(out.values), all_values / N, rtol=0, atol=1e-12)
    assert out.indices.numpy().tolist() == all_indices.tolist()
    assert out.dense_shape.numpy().tolist() == [4, 2]
    out = hvd.allreduce(mine, op=hvd.Sum)
    assert isinstance(out, tf.IndexedSlices)
    assert_equal(out.values, all_values)
    assert out.indices.numpy().tolist() == all_indices.tolist()
    dense = sum(tf.convert_to_tensor(_slices(r)) for r in range(N))
    assert_equal(tf.convert_to_tensor(out), as_np(dense))


def test_indexed_slices_take_only_sum_and_average():
    with pytest.raises(NotImplementedError):
        hvd.allreduce(_slices(R), op=hvd.Max)
    with pytest.raises(NotImplementedError):
        hvd.allreduce(_slices(R), op=hvd.Sum, prescale_factor=2.0)


def test_grouped_allreduce_mixes_indexed_slices_and_tensors():
    dense = [val(r, (3,)) for r in range(N)]
    out = hvd.grouped_allreduce([_slices(R), const(dense[R], tf.float64)], op=hvd.Sum)
    assert isinstance(out[0], tf.IndexedSlices) and not isinstance(out[1], tf.IndexedSlices)
    assert_equal(out[0].values, np.concatenate([as_np(_slices(r).values) for r in range(N)]))
    assert_equal(out[1], reduce_np("Sum", dense))


# --- allgather --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_allgather_with_differing_first_dims(dtype):
    every = [val(r, (r + 1, 2)) for r in range(N)]
    out = hvd.allgather(const(every[R], dtype))
    assert out.dtype == dtype
    assert_equal(out, np.concatenate([expect(e, dtype) for e in every]))


def test_allgather_1d_3d_and_an_empty_contribution():
    one = [val(r, (r + 2,)) for r in range(N)]
    assert_equal(hvd.allgather(const(one[R], tf.int64)), np.concatenate(one))
    three = [val(r, (r + 1, 2, 3)) for r in range(N)]
    assert_equal(hvd.allgather(const(three[R], tf.float64)), np.concatenate(three))
    rows = [0 if r == 0 else r for r in range(N)]  # rank 0 sends nothing
    parts = [val(r, (rows[r], 2)) for r in range(N)]
    out = hvd.allgather(const(parts[R], tf.float32))
    assert_equal(out, np.concatenate(parts).reshape(-1, 2))


@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_grouped_allgather(dtype):
    a = [val(r, (r + 1, 2)) for r in range(N)]
    b = [val(r, (2,)) for r in range(N)]
    out = hvd.grouped_allgather([const(a[R], dtype), const(b[R], dtype)])
    assert isinstance(out, list) and len(out) == 2
    assert_equal(out[0], np.concatenate([expect(e, dtype) for e in a]))
    assert_equal(out[1], np.concatenate([expect(e, dtype) for e in b]))


# --- broadcast --------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_broadcast(dtype):
    root = N - 1
    x = const(val(R, (2, 3)), dtype)
    out = hvd.broadcast(x, root)
    assert out.dtype == dtype
    assert_equal(out, expect(val(root, (2, 3)), dtype))
    assert_equal(x, expect(val(R, (2, 3)), dtype))  # the input is untouched
    assert_equal(hvd.broadcast(x, 0, name="tf.ops.bcast0"),
                 expect(val(0, (2, 3)), dtype))


@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_broadcast_in_place_on_variables(dtype):
    root = N - 1
    v1 = tf.Variable(const(val(R, (3,)), dtype))
    v2 = tf.Variable(const(val(R + 1, (2, 2)), dtype))
    res = hvd.broadcast_([v1, v2], root)
    assert_equal(v1, expect(val(root, (3,)), dtype))
    assert_equal(v2, expect(val(root + 1, (2, 2)), dtype))
    # Horovod: "Returns: the tensor values of the updated variables".
    assert len(res) == 2
    assert_equal(res[0], expect(val(root, (3,)), dtype))
    assert_equal(res[1], expect(val(root + 1, (2, 2)), dtype))


def test_broadcast_in_place_and_broadcast_variables_with_mixed_dtypes():
    dtypes = WITH_BOOL
    made = [tf.Variable(const(val(R + i, (2,)), d)) for i, d in enumerate(dtypes)]
    hvd.broadcast_(made, 0)
    for i, (v, d) in enumerate(zip(made, dtypes)):
        assert_equal(v, expect(val(i, (2,)), d))
    made = [tf.Variable(const(val(R + i, (i + 1,)), d)) for i, d in enumerate(dtypes)]
    hvd.broadcast_variables(made, root_rank=N - 1)
    for i, (v, d) in enumerate(zip(made, dtypes)):
        assert v.dtype == d and v.shape == (i + 1,)
        assert_equal(v, expect(val(N - 1 + i, (i + 1,)), d))


# --- alltoall ---------------------------------------------------------------------------

def splits_of(r):
    return [(r + j) % 2 + 1 for j in range(N)]


def a2a_input(r, dtype):
    """Rank r sends splits_of(r)[j] rows of the value 3 r + j to rank j."""
    return np.concatenate([np.full((s, 2), 3 * r + j) for j, s in enumerate(splits_of(r))])


@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_alltoall_with_splits(dtype):
    x = const(a2a_input(R, dtype), dtype)
    out, received = hvd.alltoall(x, splits=splits_of(R))
    assert out.dtype == dtype and received.dtype == tf.int32
    assert received.numpy().tolist() == [splits_of(s)[R] for s in range(N)]
    want = np.concatenate([np.full((splits_of(s)[R], 2), 3 * s + R) for s in range(N)])
    assert_equal(out, expect(want, dtype))
    out2, received2 = hvd.alltoall(x, tf.constant(splits_of(R), tf.int32))
    assert_equal(out2, expect(want, dtype))
    assert received2.numpy().tolist() == received.numpy().tolist()


@pytest.mark.parametrize("dtype", WITH_BOOL, ids=ids(WITH_BOOL))
def test_alltoall_without_splits_returns_the_output_alone(dtype):
    # horovod/tensorflow/mpi_ops.py: return (output, rsplits) if splits is not None else output
    x = const(np.concatenate([np.full((2, 3), 3 * R + j) for j in range(N)]), dtype)
    out = hvd.alltoall(x)
    assert isinstance(out, tf.Tensor) and out.dtype == dtype
    want = np.concatenate([np.full((2, 3), 3 * s + R) for s in range(N)])
    assert_equal(out, expect(want, dtype))


def test_alltoall_where_one_rank_sends_nothing():
    splits = [0] * N if R == 1 else [R + 1] * N
    x = (tf.zeros((0, 2), tf.float32) if R == 1 else
         const(np.concatenate([np.full((R + 1, 2), 3 * R + j) for j in range(N)]), tf.float32))
    out, received = hvd.alltoall(x, splits)
    want_rows = [0 if s == 1 else s + 1 for s in range(N)]
    assert received.numpy().tolist() == want_rows
    want = np.concatenate([np.full((want_rows[s], 2), 3 * s + R) for s in range(N)])
    assert_equal(out, want.reshape(-1, 2))


# --- reducescatter ----------------------------------------------------------------------

def _rs_expect(op, every, rows, r=R):
    full = reduce_np(op, every)
    start = sum(reducescatter_rows(rows, k, N) for k in range(r))
    return full[start:start + reducescatter_rows(rows, r, N)]


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
@pytest.mark.parametrize("op", ["Sum", "Average"])
def test_reducescatter(op, dtype):
    rows = 2 * N + 1
    every = [val(r, (rows, 2), KIND[op]) for r in range(N)]
    out = hvd.reducescatter(const(every[R], dtype), op=getattr(hvd, op))
    assert out.dtype == dtype
    assert out.shape == (reducescatter_rows(rows, R, N), 2)
    assert_equal(out, _rs_expect(op, every, rows))


def test_reducescatter_defaults_to_average_and_scales():
    rows = N
    every = [val(r, (rows, 3), "avg") for r in range(N)]
    assert_equal(hvd.reducescatter(const(every[R], tf.float64)),
                 _rs_expect("Average", every, rows))
    every = [val(r, (rows + 1,)) for r in range(N)]
    out = hvd.reducescatter(const(every[R], tf.int32), op=hvd.Sum, prescale_factor=2.0,
                            postscale_factor=1.5)
    assert_equal(out, _rs_expect("Sum", every, rows + 1) * 3)


@pytest.mark.parametrize("dtype", NUMERIC, ids=ids(NUMERIC))
def test_grouped_reducescatter(dtype):
    a = [val(r, (N, 2)) for r in range(N)]
    b = [val(r, (N + 1,)) for r in range(N)]
    out = hvd.grouped_reducescatter([const(a[R], dtype), const(b[R], dtype)], op=hvd.Sum)
    assert isinstance(out, list) and len(out) == 2
    assert_equal(out[0], _rs_expect("Sum", a, N))
    assert_equal(out[1], _rs_expect("Sum", b, N + 1))
    avg = [val(r, (N,), "avg") for r in range(N)]
    out = hvd.grouped_reducescatter([const(avg[R], dtype)])  # Average by default
    assert_equal(out[0], _rs_expect("Average", avg, N))


# --- objects, join, barrier ---------------------------------------------------------------

def test_broadcast_object():
    obj = {"rank": R, "array": np.arange(R + 2), "text": "r%d" % R}
    got = hvd.broadcast_object(obj, root_rank=N - 1)
    assert got["rank"] == N - 1 and got["text"] == "r%d" % (N - 1)
    assert got["array"].tolist() == list(range(N + 1))
    assert hvd.broadcast_object(("x", R)) == ("x", 0)  # root 0 by default
    assert hvd.broadcast_object(None if R else [1, 2], 0, name="tf.obj") == [1, 2]


def test_allgather_object():
    got = hvd.allgather_object({"r": R, "pad": "x" * R})
    assert got == [{"r": r, "pad": "x" * r} for r in range(N)]
    assert hvd.allgather_object(R * 10, name="tf.objs") == [r * 10 for r in range(N)]


def test_objects_pickle_with_cloudpickle_where_it_is_installed():
    # As Horovod's TensorFlow binding: lambdas and classes defined in a function arrive whole.
    object_checks.with_cloudpickle(hvd.broadcast_object, hvd.allgather_object, R, N)


def test_objects_pickle_with_pickle_without_cloudpickle(monkeypatch):
    object_checks.without_cloudpickle(hvd.broadcast_object, hvd.allgather_object, R, N,
                                      monkeypatch)


def test_a_failed_object_collective_raises_tensorflows_classes():
    # kolo.common.objects moves the bytes; its failures stay kolo.tensorflow's errors.
    with pytest.raises(tf.errors.FailedPreconditionError, match="root") as err:
        hvd.broadcast_object(R, root_rank=R, name="tf.obj.roots")  # every rank the root
    assert isinstance(err.value, KoloInternalError)
    with pytest.raises(tf.errors.InvalidArgumentError, match="out of range") as err:
        hvd.broadcast_object(R, root_rank=N, name="tf.obj.range")
    assert isinstance(err.value, ValueError)
    assert hvd.allgather_object(R) == list(range(N))  # the ranks are still in step


def test_objects_of_different_types_on_different_ranks_without_names():
    # Named by type, as in Horovod, the ranks' requests would never pair (a hang).
    assert hvd.broadcast_object({"epoch": 3} if R == 0 else None) == {"epoch": 3}
    assert hvd.allgather_object("r0" if R == 0 else R) == ["r0"] + list(range(1, N))


def test_join_returns_the_last_rank_to_join_as_a_tensor():
    for last in range(N):
        if R == last:
            # Joined ranks contribute zeros, so this allreduce completes only once every
            # other rank is inside join(): rank `last` joins last by construction.
            alone = hvd.allreduce(tf.ones(1), op=hvd.Sum, name="tf.join.last%d" % last)
            assert_equal(alone, [1.0])
        got = hvd.join()
        # Horovod's join is an op: eagerly too its result is a tf.int32 scalar tensor.
        assert isinstance(got, tf.Tensor) and got.dtype == tf.int32 and got.shape == []
        assert got.numpy() == last


def test_joined_ranks_contribute_zeros_to_allreduce():
    # Horovod's test_horovod_join_allreduce: the rank that joined first adds nothing.
    first = N - 1
    x = const(val(R, (3,)), tf.float32)
    if R == first:
        last = int(hvd.join())
    else:
        out = hvd.allreduce(x, op=hvd.Sum, name="tf.join.sum")
        assert_equal(out, reduce_np("Sum", [val(r, (3,)) for r in range(N)
                                            if r != first]))
        last = int(hvd.join())
    assert hvd.allgather_object(last) == [last] * N and last != first


def test_barrier():
    hvd.barrier()
    hvd.barrier(process_set=hvd.global_process_set)
    assert_equal(hvd.allreduce(tf.ones(1), op=hvd.Sum), [float(N)])


def test_process_sets_are_kolos_shared_registry():
    assert hvd.ProcessSet is common_process_sets.ProcessSet
    assert hvd.global_process_set is common_process_sets.global_process_set
    assert hvd.global_process_set.ranks == list(range(N))


def test_unnamed_collectives_in_rank_dependent_branches_pair():
    # As in Horovod: the same collective, unnamed, on each side of a branch.
    if R == 0:
        b = hvd.broadcast(tf.range(4, dtype=tf.float32), root_rank=0)
    else:
        b = hvd.broadcast(tf.zeros(4), root_rank=0)
    assert b.numpy().tolist() == [0.0, 1.0, 2.0, 3.0]
