"""Horovod's ``horovod.tensorflow.util``: small helpers that Horovod code imports from
``hvd`` and ``hvd.util`` (same names, same behaviour)."""
import tensorflow as tf


def _executing_eagerly():
    """Whether TensorFlow executes eagerly here (False inside tf.function and TF1 graphs)."""
    return tf.executing_eagerly()


def _make_subgraph(f):
    """``f`` as a tf.function."""
    return tf.function(f)


def _cache(f):
    """``f`` memoized on its (hashable) arguments and on whether it runs eagerly, so that a
    function built for eager execution is not reused inside a graph and back."""
    cache = {}

    def wrapper(*args):
        key = (args, _executing_eagerly())
        if key not in cache:
            cache[key] = f(*args)
        return cache[key]
    return wrapper


def vars_to_refs(vars):
    """Variables (nested in lists) as hashable references (tuples of ``var.ref()``)."""
    if isinstance(vars, list):
        return tuple(vars_to_refs(v) for v in vars)
    return vars.ref()


def refs_to_vars(refs):
    """The inverse of vars_to_refs."""
    if isinstance(refs, tuple):
        return [refs_to_vars(r) for r in refs]
    return refs.deref()
