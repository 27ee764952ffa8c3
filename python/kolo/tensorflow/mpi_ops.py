"""The collectives of ``kolo.tensorflow``, with the names, defaults and gradients of
Horovod 0.28's ``horovod.tensorflow.mpi_ops`` (docs/api-tensorflow.md).

Nothing here is compiled against TensorFlow: tensors reach kolo's engine
(kolo.common.engine) as NumPy arrays that share their memory.
- Eagerly, an input is a DLPack view of the tensor, and a result is written into a
  64-byte-aligned NumPy buffer that TensorFlow adopts through DLPack: no copies.
- Inside ``tf.function`` every collective is one stateful ``tf.numpy_function``:
  TensorFlow hands it NumPy views of the inputs and adopts the aligned results, again
  without copies, and runs the collectives in program order (automatic control
  dependencies order stateful ops), so every rank submits them in the same order.
- In a TF1 graph (``tf.compat.v1``, run by a Session) an unnamed collective is named after
  its graph op, and waits on a thread of its own (kolo.tensorflow.tf1_graph).
- XLA (``jit_compile=True``) cannot call back into Python: such a function fails at
  trace time with a message naming the option.
Failures raise classes that are kolo's and TensorFlow's errors at once
(kolo.tensorflow.errors).
A gathered result (allgather, alltoall, reducescatter) is copied once out of the
runtime's buffer; a broadcast copies its input once into the buffer it overwrites.
"""

import numpy as np
import tensorflow as tf

from kolo.common import engine as _engine
from kolo.common import host as _host
from kolo.common import ops as _common_ops
from kolo.common.exceptions import HorovodInternalError, KoloInternalError  # noqa: F401
from kolo.common.ops import Adasum, Average, Max, Min, Product, Sum  # noqa: F401
from kolo.common.basics import (  # noqa: F401
    ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
    is_homogeneous, is_initialized, local_rank, local_size, mpi_built, mpi_enabled,
    mpi_threads_supported, nccl_built, rank, rocm_built, shutdown, size, start_timeline,
    stop_timeline)
from kolo.common.process_sets import (  # noqa: F401
    ProcessSet, _root_in_set, _set_rank, _set_size, add_process_set, global_process_set,
    remove_process_set)
from kolo.common.process_sets import _set_id as _registry_id
from kolo.common.names import member_name as _member_name
from kolo.tensorflow import op_library as _op_library
from kolo.tensorflow import tf1_graph as _tf1
from kolo.tensorflow.errors import CollectiveArgumentError as _CollectiveArgumentError
from kolo.tensorflow.errors import raising_tf_errors as _raising_tf_errors


def _set_id(process_set):
    """The core's id of ``process_set``, checked against the runtime's registry when the
    call is made (inside tf.function and TF1 graphs: when it is traced or built), so that
    a set that was removed, or given an id by hand, is a ValueError there and not an
    error of every run."""
    set_id = _registry_id(process_set)
    if set_id != 0:
        _check_registered(set_id, "%s (id %d)" % (process_set, set_id))
    return set_id


def _check_registered(set_id, described):
    try:
        _engine.process_set_ranks(set_id)
    except (ValueError, KoloInternalError):
        raise ValueError("process set %s is not registered with kolo: it was removed, or its "
                         "process_set_id was set by hand; register it with add_process_set() "
                         "or init(process_sets=...)" % described) from None


# The core's dtype codes by TensorFlow dtype (kolo.common.host has them by the NumPy dtype
# that tf.numpy_function hands over).
_TF_CODES = _engine.dtype_codes(tf.as_dtype)
_BFLOAT16 = np.dtype(tf.bfloat16.as_numpy_dtype)


def _as_numpy(tensor):
    """An eager tensor's memory as a read-only NumPy array (no copy)."""
    if tensor.dtype == tf.bfloat16:  # NumPy has no DLPack bfloat16: view the bits
        return np.from_dlpack(tf.bitcast(tensor, tf.uint16)).view(_BFLOAT16)
    return np.from_dlpack(tensor)


def _as_tensor(array):
    """An aligned NumPy array as an eager tensor that owns it (no copy)."""
    if array.dtype == _BFLOAT16:
        return tf.bitcast(tf.experimental.dlpack.from_dlpack(array.view(np.uint16).__dlpack__()),
                          tf.bfloat16)
    return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


def _on_host(tensor):
    """kolo.tensorflow moves host memory: a tensor on a GPU is copied to the CPU first."""
    if "GPU" in tensor.device:
        with tf.device("/cpu:0"):
            return tf.identity(tensor)
    return tensor


def _check(tensor, what):
    """The tensor of a collective, converted and checked; a clear error for what kolo
    cannot move. The dtype is checked here and not only by the reader: inside tf.function
    no array exists yet, and eagerly DLPack cannot hand over every dtype (TensorFlow's
    DLPack export of a tf.string tensor aborts the process)."""
    if isinstance(tensor, tf.IndexedSlices):
        raise ValueError("%s is a tf.IndexedSlices; only allreduce takes them (or convert "
                         "with tf.convert_to_tensor)" % what)
    try:
        tensor = tf.convert_to_tensor(tensor)
    except (TypeError, ValueError) as e:
        raise TypeError("%s must be a tf.Tensor or convertible to one: %s" % (what, e)) from None
    if tensor.dtype not in _TF_CODES:
        raise TypeError(
            "%s has dtype %s, which kolo does not support; supported: %s"
            % (what, tensor.dtype.name, ", ".join(sorted(d.name for d in _TF_CODES))))
    return tensor


def _in_xla_context():
    try:
        from tensorflow.python.ops import control_flow_util
        graph = tf.compat.v1.get_default_graph()
        return control_flow_util.GraphOrParentsInXlaContext(graph)
    except (ImportError, AttributeError):  # a TensorFlow without the helper
        return False


def _keep_kolo_unconverted():
    """AutoGraph rewrites the Python code that a tf.function calls, except modules on
    TensorFlow's list; kolo's code is plain Python over TensorFlow ops and is kept as
    written (a rewritten kernel would also run from a generated file whose name differs
    between ranks, which kolo's out-of-step check reports)."""
    try:
        from tensorflow.python.autograph.core import config
        config.CONVERSION_RULES = (config.DoNotConvert("kolo"),) + tuple(config.CONVERSION_RULES)
    except (ImportError, AttributeError):  # the rule list moved: _run is marked itself
        pass


_keep_kolo_unconverted()


def _unconverted(fn):
    """``fn`` as tf.numpy_function must call it: plain Python, not rewritten by AutoGraph
    (whose generated files would differ between ranks and slow every call)."""
    return tf.autograph.experimental.do_not_convert(fn)


@tf.autograph.experimental.do_not_convert
def _run(make_kernel, name, tensors, dtypes, shapes, what, op=None):
    """The collective on ``tensors``; returns a list of tensors. As kolo's TensorFlow op
    ``op(ops, naming, tensors)`` where kolo.tensorflow.op_library loaded it (inside XLA:
    ``op(op_library.XLA, ...)``), else
    ``make_kernel(name)`` (a function: list of arrays in, list of aligned arrays out) on
    the tensors' memory: directly when executing eagerly, else as graph ops with the
    outputs' dtypes and (static) shapes declared."""
    ops = _op_library.ops() if op is not None else None
    if ops is not None:
        return _op_library.run(op, _op_library.XLA if _in_xla_context() else ops, name,
                               tensors)
    if tf.executing_eagerly():
        arrays = [_as_numpy(_on_host(t)) for t in tensors]
        return [_as_tensor(a) for a in _raising_tf_errors(make_kernel(name), arrays)]
    return _graph_op(make_kernel, name, tensors, dtypes, shapes, what)


def _graph_op(make_kernel, name, tensors, dtypes, shapes, what):
    """The collective as ops of the graph being built: in a TF1 graph those of
    kolo.tensorflow.tf1_graph; inside tf.function one stateful tf.numpy_function, which
    TensorFlow's automatic control dependencies run in program order."""
    if _tf1.building(what):
        return _tf1.collective(make_kernel, name, tensors, dtypes, shapes, what)
    if _in_xla_context():
        raise NotImplementedError(
            "kolo.tensorflow.%s cannot run inside an XLA-compiled function: kolo's "
            "collectives call back into Python, which XLA cannot do. Use "
            "tf.function(jit_compile=False) (Keras: model.compile(..., jit_compile=False))"
            % what)
    kernel = make_kernel(name)

    def run(*arrays):
        # A 0-d tensor arrives as a NumPy scalar, which has no buffer of its own to hand over.
        return _raising_tf_errors(kernel, [np.asarray(a) for a in arrays])
    outs = tf.numpy_function(_unconverted(run), list(tensors), list(dtypes), stateful=True,
                             name="Kolo" + what.title())
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    for out, shape in zip(outs, shapes):
        out.set_shape(shape)
    return outs


def _could_record():
    """Whether a gradient tape is active (eager mode), so that an op must record its
    gradient; the custom_gradient machinery costs ~100 us per call, so an op skips it
    when no tape can see it."""
    try:
        from tensorflow.python.eager import record
        return record.could_possibly_record()
    except (ImportError, AttributeError):
        return True


def _with_gradient(forward, tensors):
    """``forward(*tensors) -> (outputs, grad_fn)`` as a tf.custom_gradient op, or just its
    outputs when nothing can differentiate it (eagerly, no tape active)."""
    if tf.executing_eagerly() and not _could_record():
        return forward(*tensors)[0]
    return tf.custom_gradient(forward)(*tensors)


# --- differentiable collectives ---------------------------------------------------------

def _reduce_op(op, average):
    return _common_ops.reduce_op(op, average, "kolo.tensorflow")


def _differentiable(what, make_kernel, name, tensors, shape_of, grad, op):
    """The collective on ``tensors`` (``make_kernel`` and ``op``: as _run takes them; a
    result per tensor, shaped ``shape_of(tensor)``) whose gradient is ``grad(tensors,
    incoming gradients)``."""
    def forward(*xs):
        ys = _run(make_kernel, name, xs, [x.dtype for x in xs], [shape_of(x) for x in xs],
                  what, op)
        return ys, lambda *dys: grad(xs, list(dys))
    return list(_with_gradient(forward, tensors))


def _same_shape(tensor):
    return tensor.shape


def _rows_shape(tensor):
    """The static shape of a result whose first dimension is not known in advance."""
    return tf.TensorShape([None]).concatenate(tensor.shape[1:]) if tensor.shape.rank else \
        tf.TensorShape(None)


def _grouped_allreduce(tensors, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set, groups=None):
    """The raw grouped allreduce (Horovod's ``_grouped_allreduce``; default op Sum).
    Differentiable: the gradient is the same allreduce of the incoming gradients.
    ``groups``: sizes of consecutive sub-groups, each negotiated as its own unit."""
    tensors = [_check(t, "allreduce input") for t in tensors]
    set_id = _set_id(process_set)
    if op == Adasum:  # inside tf.function: when traced, as Horovod
        _common_ops.check_adasum(set_id)

    sizes = groups or [len(tensors)]

    def kernel(name):
        return _host.allreduce_kernel(sizes, name, op, prescale_factor, postscale_factor,
                                      set_id)

    def as_ops(ops, naming, xs):  # a grouped op per group, named as the kernel names them
        outs = []
        for i, count in enumerate(sizes):
            group, xs = xs[:count], xs[count:]
            outs += ops.kolo_grouped_allreduce(
                group, reduce_op=int(op), prescale_factor=prescale_factor,
                postscale_factor=postscale_factor, process_set=set_id, **dict(
                    naming, tensor_name=_member_name(naming["tensor_name"], i, len(sizes))))
        return outs
    return _differentiable("allreduce", kernel, name, tensors, _same_shape, lambda _, dys:
                           _grouped_allreduce(dys, None, op, prescale_factor,
                                              postscale_factor, process_set), as_ops)


def _allreduce(tensor, name=None, op=Sum, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set):
    return _grouped_allreduce([tensor], name, op, prescale_factor, postscale_factor,
                              process_set)[0]


def grouped_allgather(tensors, name=None, ignore_name_scope=False,
                      process_set=global_process_set):
    """Every tensor of the list concatenated over the set's ranks along dimension 0
    (sizes may differ between ranks), negotiated as one unit. Differentiable: each
    gradient is this rank's rows of the average over ranks of the incoming gradient."""
    tensors = [_check(t, "allgather input") for t in tensors]
    set_id = _set_id(process_set)

    def grad(xs, dys):
        return [_own_rows(_allreduce(dy, op=Average, process_set=process_set), x, process_set)
                for dy, x in zip(dys, xs)]
    return _differentiable("allgather", lambda name: _host.allgather_kernel(name, set_id),
                           name, tensors, _rows_shape, grad,
                           lambda ops, naming, xs: ops.kolo_grouped_allgather(
                               xs, process_set=set_id, **naming))


def allgather(tensor, name=None, ignore_name_scope=False, process_set=global_process_set):
    """``tensor`` of every rank of the set, concatenated along dimension 0 in rank order
    (the first dimension may differ between ranks, the others may not)."""
    return grouped_allgather([tensor], name, ignore_name_scope, process_set)[0]


def _own_rows(tensor, like, process_set):
    """This rank's rows of ``tensor``, an allgather of tensors shaped as ``like``."""
    counts = allgather(tf.shape(like)[:1], process_set=process_set)
    mine = _set_rank(process_set)
    start = tf.reduce_sum(counts[:mine])
    return tensor[start:start + counts[mine]]


def _grouped_broadcast(tensors, root_rank, name=None, process_set=global_process_set):
    """Broadcasts of every tensor from global rank ``root_rank``, all in flight together.
    Differentiable: the root's gradient is the average over ranks of the incoming
    gradients, the others' zero."""
    tensors = [_check(t, "broadcast tensor") for t in tensors]
    set_id = _set_id(process_set)
    root_in_set = _root_in_set(root_rank, set_id)

    def grad(_, dys):
        reduced = _grouped_allreduce(dys, op=Average, process_set=process_set)
        if rank() != int(root_rank):
            return [r * 0 for r in reduced]
        return reduced
    return _differentiable("broadcast",
                           lambda name: _host.broadcast_kernel(root_in_set, name, set_id),
                           name, tensors, _same_shape, grad,
                           lambda ops, naming, xs: ops.kolo_grouped_broadcast(
                               xs, root_rank=root_in_set, process_set=set_id, **naming))


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False,
              process_set=global_process_set):
    """A new tensor with global rank ``root_rank``'s values on every rank of the set."""
    return _grouped_broadcast([tensor], root_rank, name, process_set)[0]


def broadcast_(variables, root_rank, name=None, process_set=global_process_set):
    """Broadcasts ``variables`` (tf.Variables) from global rank ``root_rank`` in place, all
    in flight together; returns their new values. In a graph the values depend on the
    assignments (as Horovod's), so that a Session that fetches them assigns the
    variables too."""
    variables = list(variables)
    if not all(hasattr(v, "assign") for v in variables):  # tf.Variable, keras.Variable
        raise TypeError("broadcast_() takes a list of tf.Variable (in place); use broadcast() "
                        "for tensors")
    if not variables:
        return []
    values = _grouped_broadcast([tf.convert_to_tensor(v) for v in variables], root_rank, name,
                                process_set)
    assigned = [v.assign(value) for v, value in zip(variables, values)]
    if tf.executing_eagerly():
        return values
    with tf.control_dependencies([_assign_op(a) for a in assigned]):
        return [tf.identity(value) for value in values]


def _assign_op(assigned):
    """What a variable's assign() returned in a graph, as something to depend on: a
    tf.Variable returns the assigned variable (or its op), a Keras variable nothing."""
    return getattr(assigned, "op", assigned) if assigned is not None else tf.no_op()


def _splits_tensor(splits):
    """``splits`` as a 1-D int32 tensor. Integers only: a float tensor would be truncated,
    differently on each rank (Horovod's op refuses anything but int32)."""
    splits = tf.convert_to_tensor(splits)
    if not splits.dtype.is_integer:
        raise _CollectiveArgumentError("alltoall expects splits to contain integers (a list or "
                                       "an integer tensor), got a %s tensor" % splits.dtype.name)
    return tf.cast(tf.reshape(splits, [-1]), tf.int32)


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False,
             process_set=global_process_set):
    """Sends ``splits[i]`` rows of ``tensor`` to rank i of the set (an even split when
    None). Returns the received rows, and ``(output, received_splits)`` when ``splits`` is
    given. Differentiable: the gradient goes back with the reverse alltoall."""
    tensor = _check(tensor, "alltoall input")
    splits_t = tf.constant([], tf.int32) if splits is None else _splits_tensor(splits)
    set_id = _set_id(process_set)

    def exchange(x, s):
        out, received = _run(lambda name: _host.alltoall_kernel(name, set_id), name, [x, s],
                             [x.dtype, tf.int32], [_rows_shape(x), tf.TensorShape([None])],
                             "alltoall", lambda ops, naming, xs: ops.kolo_alltoall(
                                 *xs, process_set=set_id, **naming))

        def grad(dy, _):
            back, _ = alltoall(dy, received, process_set=process_set)
            return back, None
        return (out, received), grad
    output, received = _with_gradient(exchange, [tensor, splits_t])
    return output if splits is None else (output, received)


def _grouped_reducescatter(tensors, name=None, op=Sum, process_set=global_process_set,
                           prescale_factor=1.0, postscale_factor=1.0):
    """Reducescatter of every tensor: rank i keeps the i-th block of rows (the first
    ``rows % size`` ranks one row more). Differentiable with Horovod's rule: the allgather
    of the incoming gradient, times the set's size for Sum, times the scale factors."""
    tensors = [_check(t, "reducescatter input") for t in tensors]
    set_id = _set_id(process_set)

    def grad(_, dys):
        factor = prescale_factor * postscale_factor
        if op == Sum:
            factor *= _set_size(process_set)
        scaled = [dy * tf.cast(factor, dy.dtype) if factor != 1 else dy for dy in dys]
        return grouped_allgather(scaled, process_set=process_set)
    return _differentiable(
        "reducescatter",
        lambda name: _host.reducescatter_kernel(name, op, prescale_factor, postscale_factor,
                                                set_id),
        name, tensors, _rows_shape, grad,
        lambda ops, naming, xs: ops.kolo_grouped_reducescatter(
            xs, reduce_op=int(op), prescale_factor=prescale_factor,
            postscale_factor=postscale_factor, process_set=set_id, **naming))


def _scalar_op(call, what):
    """join or barrier in a graph: an op without inputs whose value is ``call()``'s, an
    int32 scalar."""
    return _graph_op(lambda name: _host.scalar_kernel(call), None, [], [tf.int32],
                     [tf.TensorShape([])], what)[0]


def join():
    """This rank has no more data: until every rank has joined, it takes part in the
    others' allreduces with zeros. Returns the global rank that joined last, a tf.int32
    scalar (eagerly too, as Horovod's op)."""
    if tf.executing_eagerly():
        return tf.constant(_raising_tf_errors(_host.COLLECTIVES.join), tf.int32)
    return _scalar_op(_host.COLLECTIVES.join, "join")


def barrier(process_set=global_process_set):
    """Returns once every rank of the set has called it."""
    _set_id(process_set)
    if tf.executing_eagerly():
        return _raising_tf_errors(_host.COLLECTIVES.barrier, process_set)
    return _scalar_op(lambda: _host.COLLECTIVES.barrier(process_set), "barrier")


def _query_op(query, name):
    """A tf.int32 scalar whose value is read when it runs (Horovod's ``*_op``), not when
    the graph is built."""
    if tf.executing_eagerly():
        return tf.constant(query(), tf.int32)
    return tf.numpy_function(_unconverted(lambda: np.int32(query())), [], tf.int32,
                             stateful=True, name=name)


def size_op(process_set_id=0, name=None):
    """The number of ranks of the process set (default: all), as a tensor."""
    if process_set_id != 0:
        _check_registered(process_set_id, "id %d" % process_set_id)
    return _query_op(lambda: len(_engine.process_set_ranks(process_set_id)), name or "KoloSize")


def local_size_op(name=None):
    """The number of ranks on this host, as a tensor."""
    return _query_op(local_size, name or "KoloLocalSize")


def rank_op(name=None):
    """This process's global rank, as a tensor."""
    return _query_op(rank, name or "KoloRank")


def local_rank_op(name=None):
    """This process's rank on its host, as a tensor."""
    return _query_op(local_rank, name or "KoloLocalRank")


# Horovod's HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET: process_set_included_op's value for an id
# that no registered set has.
_PROCESS_SET_ERROR_UNKNOWN_SET = -3


def _included_or_error_code(process_set_id):
    if process_set_id == 0:
        return 1
    try:
        ranks = _engine.process_set_ranks(process_set_id)
    except (ValueError, KoloInternalError):
        return _PROCESS_SET_ERROR_UNKNOWN_SET
    return int(rank() in ranks)


def process_set_included_op(process_set_id=0, name=None):
    """1 when this process belongs to the process set, 0 when it does not, as a tensor;
    Horovod's error code -3 (HOROVOD_PROCESS_SET_ERROR_UNKNOWN_SET) when no set has that
    id when the op runs."""
    return _query_op(lambda: _included_or_error_code(process_set_id),
                     name or "KoloProcessSetIncluded")
