"""Horovod's public reductions (``allreduce`` with compression and ``tf.IndexedSlices``,
``grouped_allreduce``, ``reducescatter``) and the gradient averaging that
``DistributedGradientTape`` and the Keras ``DistributedOptimizer`` share, local variables
(model parallelism: gradients that stay on their rank) included."""

import tensorflow as tf

from kolo.common.gradient_groups import LocalVariables, group_order, replace_at
from kolo.common.ops import groups_setting, predivided, reducescatter_op
from kolo.tensorflow import mpi_ops as _ops
from kolo.tensorflow.compression import Compression
from kolo.tensorflow.mpi_ops import Adasum, Average, Sum, global_process_set


def _check_slices_op(op, prescale_factor, postscale_factor):
    """Horovod's refusals of what a tf.IndexedSlices cannot be reduced with (its errors)."""
    if op == Adasum:
        raise NotImplementedError("The Adasum reduction does not currently support sparse "
                                  "tensors. As a workaround please pass sparse_as_dense=True "
                                  "to DistributedOptimizer")
    if op not in (Sum, Average):
        raise NotImplementedError("Only Sum and Average ops are supported with tf.IndexedSlices")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("Pre/postscale_factor are not supported with tf.IndexedSlices")


def _allreduce_slices(slices, name, op, prescale_factor, postscale_factor, process_set):
    """Horovod's reduction of a tf.IndexedSlices: every rank's values and indices gathered
    (one grouped allgather), the values divided by the set's size for Average."""
    _check_slices_op(op, prescale_factor, postscale_factor)
    values, indices = _ops.grouped_allgather([slices.values, slices.indices], name,
                                             process_set=process_set)
    if op == Average:
        values = values / tf.cast(_ops._set_size(process_set), values.dtype)
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=global_process_set, ignore_name_scope=False):
    """The reduction of ``tensor`` over the set's ranks (default: the average). A
    tf.IndexedSlices is reduced by gathering every rank's slices (Sum and Average only).
    Differentiable: the gradient is the same allreduce of the incoming gradient."""
    op = _ops._reduce_op(op, average)
    if isinstance(tensor, tf.IndexedSlices):
        return _allreduce_slices(tensor, name, op, prescale_factor, postscale_factor,
                                 process_set)
    return _reduce_dense([tensor], name, op, compression, prescale_factor, postscale_factor,
                         process_set)[0]


def _reduce_dense(tensors, name, op, compression, prescale_factor, postscale_factor,
                  process_set, groups=None):
    compressed = [compression.compress(_ops._check(t, "allreduce input")) for t in tensors]
    reduced = _ops._grouped_allreduce([c for c, _ in compressed], name, op, prescale_factor,
                                      postscale_factor, process_set, groups)
    return [compression.decompress(r, ctx) for r, (_, ctx) in zip(reduced, compressed)]


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set,
                      ignore_name_scope=False, name=None):
    """A list with the reduction of every tensor, the dense ones negotiated and fused as
    one unit; tf.IndexedSlices entries are reduced as by allreduce()."""
    if not tensors:
        return tensors
    op = _ops._reduce_op(op, average)
    dense = [i for i, t in enumerate(tensors) if not isinstance(t, tf.IndexedSlices)]
    if len(dense) < len(tensors):  # refused before any collective starts, as Horovod does
        _check_slices_op(op, prescale_factor, postscale_factor)
    out = replace_at(tensors, dense, lambda some: _reduce_dense(
        some, name, op, compression, prescale_factor, postscale_factor, process_set))
    return [_allreduce_slices(t, None, op, prescale_factor, postscale_factor, process_set)
            if isinstance(t, tf.IndexedSlices) else t for t in out]


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=global_process_set, ignore_name_scope=False, prescale_factor=1.0,
                  postscale_factor=1.0):
    """This rank's block of rows of the reduction over the set (Average or Sum; the first
    ``rows % size`` ranks get one row more)."""
    return grouped_reducescatter([tensor], device_dense, compression, op, process_set,
                                 prescale_factor, postscale_factor, name=name)[0]


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, ignore_name_scope=False, name=None):
    """A list with the reducescatter of every tensor, negotiated as one unit."""
    op = reducescatter_op(op, "kolo.tensorflow")
    compressed = [compression.compress(_ops._check(t, "reducescatter input")) for t in tensors]
    out = _ops._grouped_reducescatter([c for c, _ in compressed], name, op, process_set,
                                      prescale_factor, postscale_factor)
    return [compression.decompress(o, ctx) for o, (_, ctx) in zip(out, compressed)]


def _reduce_gradients(grads, variables=None, op=Average, compression=Compression.none,
                      sparse_as_dense=False, gradient_predivide_factor=1.0, groups=None,
                      process_set=global_process_set, name=None):
    """Every gradient averaged (``op``) over the set's ranks, in one negotiation per group;
    None stays None, tf.IndexedSlices are gathered (or made dense with
    ``sparse_as_dense``). ``gradient_predivide_factor`` f splits the average: divided by f
    before the sum and multiplied by f/size after it. A rank outside ``process_set`` gets
    its own gradients back."""
    prescale, postscale = predivided(op, gradient_predivide_factor)
    grads = list(grads)
    _ops._set_id(process_set)  # an unregistered set fails on every rank, members or not
    if process_set is not None and process_set.included() is False:
        return grads  # as Horovod: a rank outside the set keeps its own
    if sparse_as_dense:
        grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                 for g in grads]
    dense = [i for i, g in enumerate(grads) if g is not None and
             not isinstance(g, tf.IndexedSlices)]
    dense_vars = None if variables is None else [variables[i] for i in dense]

    def reduce_dense(tensors):
        order, sizes = group_order(len(tensors), groups, dense_vars)
        return replace_at(tensors, order, lambda ordered: _reduce_dense(
            ordered, name, op, compression, prescale, postscale, process_set, sizes))
    out = replace_at(grads, dense, reduce_dense)
    for i, g in enumerate(grads):
        if isinstance(g, tf.IndexedSlices):
            out[i] = _allreduce_slices(g, None if name is None else "%s_%d" % (name, i), op,
                                       prescale, postscale, process_set)
    return out


# The name of the gradients' collectives with Horovod's use_generic_names (Horovod names
# gradient i "grad_<i>"): the dense ones travel as one group "grad" (members "grad.<i>"),
# a tf.IndexedSlices gradient i as "grad_<i>".
GENERIC_NAME = "grad"


def _divided(grad, n):
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / tf.cast(n, grad.values.dtype), grad.indices,
                                grad.dense_shape)
    return grad / tf.cast(n, grad.dtype)


def _reduce_shared_gradients(grads, variables, local, scale_local_gradients, settings):
    """Horovod's reduction with local variables: the gradients of the variables in
    ``local`` stay this rank's, divided by the set's size when ``scale_local_gradients``
    (so that they are scaled as the averaged ones are; Horovod pull 3695); the others are
    reduced by _reduce_gradients(``settings``)."""
    if not local or variables is None:
        return _reduce_gradients(grads, variables, **settings)
    shared = [i for i, v in enumerate(variables) if v not in local]
    reduced = _reduce_gradients([grads[i] for i in shared], [variables[i] for i in shared],
                                **settings)
    out = list(grads)
    for i, g in zip(shared, reduced):
        out[i] = g
    if scale_local_gradients:
        n = _ops._set_size(settings.get("process_set", global_process_set))
        for i, v in enumerate(variables):
            if v in local and out[i] is not None:
                out[i] = _divided(out[i], n)
    return out


def _local_layer_variables(local_layers):
    """The trainable variables of Horovod's ``local_layers`` (a Keras layer or a list)."""
    import keras
    if local_layers is None:
        return []
    if isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError("All local layers must be of tf.keras.layers.Layer type "
                         "(keras.layers.Layer).")
    return [v for layer in local_layers for v in layer.trainable_weights]


class SharedGradients:
    """Mixed into DistributedGradientTape and both DistributedOptimizers: the settings of
    their gradients' reduction (Horovod's arguments, made once), and the variables whose
    gradients stay this rank's (divided by the set's size with scale_local_gradients)."""

    def _kolo_setup(self, scale_local_gradients, num_groups=0, groups=None, **settings):
        self._kolo_settings = dict(settings, groups=groups_setting(num_groups, groups))
        self._kolo_local = LocalVariables()
        self.process_set = settings["process_set"]
        self.scale_local_gradients = scale_local_gradients

    def _kolo_reduce(self, grads, variables, name=None):
        return _reduce_shared_gradients(grads, variables, self._kolo_local,
                                        self.scale_local_gradients,
                                        dict(self._kolo_settings, name=name))


class _DistributedGradientTape(SharedGradients, tf.GradientTape):
    """A tf.GradientTape whose gradient() averages the gradients over the ranks, but those
    of the sources registered as local."""

    def register_local_source(self, source):
        """Horovod's: the gradient of ``source`` (a variable) is not reduced; gradient()
        returns this rank's (divided by the set's size with scale_local_gradients)."""
        self._kolo_local.add(source)

    def gradient(self, target, sources, output_gradients=None, use_generic_names=False,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        """tf.GradientTape's gradients, averaged over the set's ranks. With Horovod's
        ``use_generic_names`` the collectives are named after the gradients' positions
        alone (GENERIC_NAME), so they pair on ranks whose graphs name their ops
        differently (in a TF1 graph an unnamed collective is named after its op)."""
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        flat_grads = tf.nest.flatten(grads, expand_composites=False)
        flat_sources = tf.nest.flatten(sources, expand_composites=False)
        variables = flat_sources if len(flat_sources) == len(flat_grads) else None
        reduced = self._kolo_reduce(flat_grads, variables,
                                    GENERIC_NAME if use_generic_names else None)
        return tf.nest.pack_sequence_as(grads, reduced, expand_composites=False)

    def get_local_and_global_gradients(self, target, sources, output_gradients=None,
                                       use_generic_names=False):
        """Horovod's: gradient(), split into two lists of (source, gradient) pairs, those of
        the local sources and the others, each in the order of ``sources``."""
        grads = self.gradient(target, sources, output_gradients, use_generic_names)
        local, shared = [], []
        for source, grad in zip(sources, grads):
            (local if source in self._kolo_local else shared).append((source, grad))
        return local, shared


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False, op=Average,
                            gradient_predivide_factor=1.0, num_groups=0, groups=None,
                            process_set=global_process_set, scale_local_gradients=True):
    """Wraps ``gradtape`` (a tf.GradientTape, before or after recording) so that
    ``gradient()`` returns the gradients averaged over the set's ranks (``op``), after
    compression, in one negotiation per group; sources registered with
    ``register_local_source`` keep their own gradients."""
    if not isinstance(gradtape, tf.GradientTape):
        raise TypeError("DistributedGradientTape wraps a tf.GradientTape, got %s"
                        % type(gradtape).__name__)
    _ops._reduce_op(op, None)
    cls = type(gradtape.__class__.__name__, (_DistributedGradientTape, gradtape.__class__), {})
    tape = cls.__new__(cls)
    tape.__dict__.update(gradtape.__dict__)  # the same recording, as Horovod's wrapper
    tape._kolo_setup(scale_local_gradients, num_groups, groups, op=op, compression=compression,
                     sparse_as_dense=sparse_as_dense,
                     gradient_predivide_factor=gradient_predivide_factor,
                     process_set=process_set)
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=global_process_set,
                                   local_layers=None, scale_local_gradients=True):
    """DistributedGradientTape with the trainable variables of ``local_layers`` (Keras
    layers whose weights stay local to each rank, e.g. the model-parallel part of a model)
    registered as local sources."""
    tape = DistributedGradientTape(gradtape, device_dense, device_sparse, compression,
                                   sparse_as_dense, op, gradient_predivide_factor, num_groups,
                                   groups, process_set, scale_local_gradients)
    for v in _local_layer_variables(local_layers):
        tape.register_local_source(v)
    return tape
