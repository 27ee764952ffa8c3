"""kolo for Keras 3 (TensorFlow backend) with Horovod 0.28's ``horovod.tensorflow.keras``
API: ``import kolo.tensorflow.keras as hvd`` (or ``import kolo.keras as hvd``).

``DistributedOptimizer`` wraps a Keras optimizer so that ``model.fit`` and custom loops
(``apply_gradients``/``apply``) average the gradients over the ranks before they are
applied; ``hvd.callbacks`` has Horovod's callbacks. docs/api-tensorflow.md lists every
name, docs/moving-from-horovod.md what Keras 3 changes.
"""
import keras
import tensorflow as tf

from kolo.tensorflow.compression import Compression  # noqa: F401
from kolo.tensorflow.functions import (  # noqa: F401
    allgather_object, broadcast_object, broadcast_variables)
from kolo.tensorflow.mpi_ops import (  # noqa: F401
    Average, HorovodInternalError, KoloInternalError, Max, Min, Product, ProcessSet, Sum,
    add_process_set, ccl_built, cross_rank, cross_size, cuda_built, ddl_built, gloo_built,
    gloo_enabled, global_process_set, init, is_homogeneous, is_initialized, join, local_rank,
    local_size, mpi_built, mpi_enabled, mpi_threads_supported, nccl_built, rank,
    remove_process_set, rocm_built, shutdown, size, start_timeline, stop_timeline)
from kolo.tensorflow import functions as _functions
from kolo.tensorflow import gradients as _gradients
from kolo.tensorflow import mpi_ops as _ops
from kolo.tensorflow.sync_batch_norm import SyncBatchNormalization  # noqa: F401
from kolo.tensorflow.keras import callbacks, elastic  # noqa: F401

__all__ = [
    "init", "shutdown", "is_initialized", "start_timeline", "stop_timeline", "size",
    "local_size", "cross_size", "rank", "local_rank", "cross_rank", "is_homogeneous",
    "mpi_threads_supported", "mpi_enabled", "mpi_built", "gloo_enabled", "gloo_built",
    "nccl_built", "ddl_built", "ccl_built", "cuda_built", "rocm_built",
    "Average", "Sum", "Min", "Max", "Product", "HorovodInternalError", "KoloInternalError",
    "allreduce", "allgather", "broadcast", "reducescatter", "join", "broadcast_object",
    "allgather_object", "broadcast_variables", "broadcast_global_variables",
    "ProcessSet", "global_process_set", "add_process_set", "remove_process_set",
    "Compression", "DistributedOptimizer", "PartialDistributedOptimizer",
    "SyncBatchNormalization", "load_model", "callbacks",
    "elastic",
]


class _DistributedOptimizer(_gradients.SharedGradients):
    """Mixed in before the user's optimizer class: ``apply`` averages the gradients over
    the ranks first (but those of variables registered as local); with
    ``backward_passes_per_step`` N > 1 it sums them locally and averages and applies every
    N-th call (the other calls change no weights but advance ``iterations``, as
    Horovod's)."""

    def register_local_var(self, var):
        """Horovod's: the gradient of ``var`` is not reduced; this rank's is applied
        (divided by the set's size with scale_local_gradients)."""
        self._kolo_local.add(var)

    def build(self, variables):
        super().build(variables)
        if self._kolo_passes_per_step > 1 and self._kolo_sums is None:
            # Plain tf.Variables, not optimizer variables: a saved model's optimizer then
            # has the variables of the plain optimizer and loads with or without kolo.
            self._kolo_sums = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False,
                                           name="kolo_gradient_sum") for v in variables]
            self._kolo_passes = tf.Variable(0, dtype=tf.int64, trainable=False,
                                            name="kolo_passes")

    def apply(self, grads, trainable_variables=None):
        grads = list(grads)
        variables = list(trainable_variables if trainable_variables is not None
                         else self._trainable_variables)
        if self._kolo_passes_per_step == 1:
            return super().apply(self._kolo_reduce(grads, variables), trainable_variables)
        return self._kolo_accumulate(grads, variables, trainable_variables)

    def _compute_gradients(self, loss, var_list, grad_loss=None, tape=None):
        """Horovod's (over Keras 2's private method, which Horovod code calls): the
        gradients of ``loss`` (a tensor that ``tape`` recorded, or a callable) with respect
        to ``var_list``, reduced as ``apply`` reduces them, as (gradient, variable) pairs."""
        var_list = list(var_list() if callable(var_list) else var_list)
        if callable(loss):
            tape = tape if tape is not None else tf.GradientTape()
            with tape:
                loss = loss()
        elif tape is None:
            raise ValueError("`tape` is required when a `Tensor` loss is passed.")
        grads = tape.gradient(loss, var_list, grad_loss)
        return list(zip(self._kolo_reduce(list(grads), var_list), var_list))

    def _kolo_accumulate(self, grads, variables, trainable_variables):
        if not self.built:
            self.build(variables)
        n = self._kolo_passes_per_step
        for total, g in zip(self._kolo_sums, grads):
            if g is not None:
                total.assign_add(tf.convert_to_tensor(g))
        self._kolo_passes.assign_add(1)

        def apply_sums():
            sums = [None if g is None else tf.identity(total)
                    for total, g in zip(self._kolo_sums, grads)]
            if self._kolo_average_passes:
                sums = [None if s is None else s / n for s in sums]
            super(_DistributedOptimizer, self).apply(self._kolo_reduce(sums, variables),
                                                     trainable_variables)
            for total in self._kolo_sums:
                total.assign(tf.zeros_like(total))
            return tf.constant(True)

        def count_only():
            # Horovod's: iterations advances on every call, applied or not, so a
            # LearningRateSchedule sees the same step numbers as under Horovod.
            self.iterations.assign_add(1)
            return tf.constant(False)
        return tf.cond(self._kolo_passes % n == 0, apply_sums, count_only)


def DistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                         compression=Compression.none, sparse_as_dense=False,
                         gradient_predivide_factor=1.0, op=Average, backward_passes_per_step=1,
                         average_aggregated_gradients=False, num_groups=0, groups=None,
                         process_set=global_process_set, scale_local_gradients=True):
    """A copy of ``optimizer`` (same class and config, no state), named ``name`` (Horovod's
    default: ``Distributed<Class>``), whose updates use the gradients averaged (``op``)
    over the set's ranks. ``backward_passes_per_step`` N sums N
    calls' gradients locally (divided by N with ``average_aggregated_gradients``) and
    averages and applies them on every N-th call. Variables registered with the result's
    ``register_local_var`` keep their own gradients (divided by the set's size with
    ``scale_local_gradients``)."""
    if keras.backend.backend() != "tensorflow":
        raise RuntimeError("kolo.tensorflow.keras needs Keras' TensorFlow backend "
                           "(KERAS_BACKEND=tensorflow); this Keras runs on %r"
                           % keras.backend.backend())
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError("DistributedOptimizer wraps a keras.optimizers.Optimizer, got %s"
                         % type(optimizer).__name__)
    if isinstance(optimizer, _DistributedOptimizer):
        raise ValueError("this optimizer is already a kolo DistributedOptimizer")
    if int(backward_passes_per_step) < 1:
        raise ValueError("backward_passes_per_step must be >= 1, got %r"
                         % backward_passes_per_step)
    if op not in (_ops.Average, _ops.Sum):  # Horovod's rule and message
        raise ValueError("op currently only supports Average and Sum")
    base = type(optimizer)
    # The class keeps the user's name and module, so a saved model names the plain
    # optimizer and loads without kolo (load_model() below wraps it again).
    cls = type(base.__name__, (_DistributedOptimizer, base),
               {"__module__": base.__module__, "__qualname__": base.__qualname__})
    config = optimizer.get_config()
    config["name"] = name or "Distributed%s" % base.__name__  # Horovod's default name
    wrapped = cls.from_config(config)
    wrapped._kolo_setup(scale_local_gradients, num_groups, groups, op=op,
                        compression=compression, sparse_as_dense=sparse_as_dense,
                        gradient_predivide_factor=gradient_predivide_factor,
                        process_set=process_set)
    wrapped._kolo_passes_per_step = int(backward_passes_per_step)
    wrapped._kolo_average_passes = bool(average_aggregated_gradients)
    wrapped._kolo_sums = None
    return wrapped


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=Average, groups=None,
                                process_set=global_process_set, local_layers=None,
                                scale_local_gradients=True):
    """DistributedOptimizer whose ``local_layers`` (Keras layers whose weights stay local to
    each rank, e.g. the model-parallel part of a model) have their trainable variables
    registered as local: their gradients are not reduced (Horovod's, from
    ``horovod.keras``)."""
    local = _gradients._local_layer_variables(local_layers)
    wrapped = DistributedOptimizer(
        optimizer, name=name, device_dense=device_dense, device_sparse=device_sparse,
        compression=compression, sparse_as_dense=sparse_as_dense,
        gradient_predivide_factor=gradient_predivide_factor, op=op, groups=groups,
        process_set=process_set, scale_local_gradients=scale_local_gradients)
    for v in local:
        wrapped.register_local_var(v)
    return wrapped


def broadcast_global_variables(root_rank, model=None):
    """Makes ``model``'s variables and its optimizer's equal to global rank ``root_rank``'s.
    Keras 3 keeps no global variable collection, so the model is an argument here. Without
    it, Horovod's: TensorFlow 1's collection, broadcast in a TF1 graph (run in the default
    session, as Horovod runs it in Keras' session); RuntimeError under eager execution."""
    if model is None:
        if tf.executing_eagerly():
            raise RuntimeError(
                "hvd.broadcast_global_variables() does not support eager execution: Keras 3 "
                "keeps no global variable collection. Call broadcast_global_variables(%d, "
                "model), or use hvd.callbacks.BroadcastGlobalVariablesCallback(%d) in "
                "model.fit" % (root_rank, root_rank))
        op = _functions.broadcast_global_variables(root_rank)  # RuntimeError in tf.function
        session = tf.compat.v1.get_default_session()
        if session is None:
            raise ValueError("broadcast_global_variables(%d) in a TF1 graph runs in the default "
                             "session: call it inside `with session.as_default():`" % root_rank)
        return session.run(op)
    variables = list(model.variables)
    if getattr(model, "optimizer", None) is not None:
        variables += list(model.optimizer.variables)
    broadcast_variables(variables, root_rank)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """The reduction of ``value`` (a tensor, array or number) over the ranks, as a tensor."""
    return _gradients.allreduce(tf.convert_to_tensor(value), average=average, name=name, op=op,
                                prescale_factor=prescale_factor,
                                postscale_factor=postscale_factor, compression=compression)


def allgather(value, name=None, process_set=global_process_set):
    """Every rank's ``value`` concatenated along the first dimension, as a tensor."""
    return _ops.allgather(tf.convert_to_tensor(value), name=name, process_set=process_set)


def broadcast(value, root_rank, name=None, process_set=global_process_set):
    """Global rank ``root_rank``'s ``value`` on every rank, as a tensor."""
    return _ops.broadcast(tf.convert_to_tensor(value), root_rank, name=name, process_set=process_set)


def reducescatter(value, name=None, op=Average, process_set=global_process_set):
    """This rank's block of rows of the reduction of ``value``, as a tensor."""
    return _gradients.reducescatter(tf.convert_to_tensor(value), name=name, op=op,
                                    process_set=process_set)


def load_model(filepath, custom_optimizers=None, custom_objects=None,
               compression=Compression.none):
    """``keras.models.load_model(filepath)`` whose optimizer is wrapped again in a
    DistributedOptimizer (with ``compression``), its state (iterations, slots) kept.
    ``custom_optimizers``: optimizer classes the file uses that Keras does not know."""
    objects = dict(custom_objects or {})
    for cls in custom_optimizers or []:
        objects[cls.__name__] = cls
    model = keras.models.load_model(filepath, custom_objects=objects)
    loaded = getattr(model, "optimizer", None)
    if loaded is None or isinstance(loaded, _DistributedOptimizer):
        return model
    wrapped = DistributedOptimizer(loaded, compression=compression)
    if loaded.built:
        wrapped.build(model.trainable_variables)
        for mine, theirs in zip(wrapped.variables, loaded.variables):
            mine.assign(theirs)
    model.optimizer = wrapped
    return model
