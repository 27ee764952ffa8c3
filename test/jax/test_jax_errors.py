"""Errors of kolo.jax: a collective whose ranks disagree (tree structure, shapes, dtypes)
fails on every rank, with no hang, and leaves the ranks in step; a tree-structure mismatch
names the first differing leaf path; a leaf that is neither an array nor a number is a
TypeError naming its path, before anything is sent; an unsupported dtype is a TypeError.
"""

import numpy as np
import pytest
import jax
import jax.numpy as jnp

import kolo.jax as kj

from jax_common import KoloInternalError, N, R, in_step

# Inside jit, jax wraps the callback's exception (jax.errors.JaxRuntimeError).
JIT_ERRORS = (KoloInternalError, jax.errors.JaxRuntimeError)


def _outcome(fn):
    """Runs fn on this rank, then (whatever happened) exchanges every rank's outcome and
    checks the ranks are in step, so that a failing assertion on one rank cannot leave the
    others waiting in a collective. Returns (this rank's exception or None, every rank's
    (exception class name, message))."""
    try:
        jax.block_until_ready(fn())
        err = None
    except Exception as e:  # noqa: BLE001
        err = e
    every = kj.allgather_object(None if err is None else (type(err).__name__, str(err)))
    in_step()
    return err, every


def _raised_the_same_everywhere(err, every, classes):
    assert all(e is not None for e in every), every
    assert len({e[0] for e in every}) == 1, every
    assert isinstance(err, classes), (type(err), err)


def _structure(last):
    """Ranks 0..N-2 send {'a', 'b': {'c'}}; the last rank {'a', 'b': {'d'}} when last."""
    inner = {"d": jnp.ones(3)} if last else {"c": jnp.ones(3)}
    return {"a": jnp.ones(2), "b": inner}


STRUCTURE_CALLS = {
    "allreduce": lambda t: kj.allreduce(t, op=kj.Sum),
    "allgather": lambda t: kj.allgather(t),
    "broadcast": lambda t: kj.broadcast(t, root_rank=0),
    "broadcast_parameters": lambda t: kj.broadcast_parameters(t, root_rank=0),
}
STRUCTURE_ERRORS = (KoloInternalError, ValueError, TypeError)


def _names_a_differing_path(msg):
    return "['b']['c']" in msg or "['b']['d']" in msg


@pytest.mark.parametrize("call", sorted(STRUCTURE_CALLS))
def test_mismatched_key_names_same_shapes_raise_on_every_rank(call):
    # Same leaf count, shapes and dtypes: only the paths differ.
    err, every = _outcome(lambda: STRUCTURE_CALLS[call](_structure(R == N - 1)))
    _raised_the_same_everywhere(err, every, STRUCTURE_ERRORS)
    assert _names_a_differing_path(str(err)), str(err)


def test_mismatched_leaf_count_raises_on_every_rank():
    tree = {"a": jnp.ones(2), "b": [jnp.ones(3)] * (2 if R == N - 1 else 1)}
    err, every = _outcome(lambda: kj.allreduce(tree, op=kj.Sum))
    _raised_the_same_everywhere(err, every, STRUCTURE_ERRORS)
    assert "['b'][1]" in str(err), str(err)


def test_mismatched_tree_structure_inside_jit_raises_on_every_rank():
    f = jax.jit(lambda t: kj.allreduce(t, op=kj.Sum))
    err, every = _outcome(lambda: f(_structure(R == N - 1)))
    _raised_the_same_everywhere(err, every, JIT_ERRORS + STRUCTURE_ERRORS)
    assert _names_a_differing_path(str(err)), str(err)


def test_mismatched_leaf_count_inside_jit_raises_on_every_rank():
    # The in-place path checks the trees in XLA's FFI handler: one leaf more on the last
    # rank fails every rank, naming it, instead of a group member the others never send.
    f = jax.jit(lambda t: kj.allreduce(t, op=kj.Sum))
    tree = {"a": jnp.ones(2), "b": [jnp.ones(3)] * (2 if R == N - 1 else 1)}
    err, every = _outcome(lambda: f(tree))
    _raised_the_same_everywhere(err, every, JIT_ERRORS + STRUCTURE_ERRORS)
    assert "mismatched trees" in str(err) and "['b'][1]" in str(err), str(err)
    assert "(no leaf)" in str(err), str(err)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_a_string_leaf_is_a_type_error_naming_its_path(jit):
    tree = {"a": jnp.ones(2), "b": {"c": [jnp.ones(1), "hello"]}}
    fn = lambda t: kj.allreduce(t, op=kj.Sum)  # noqa: E731
    if jit:  # a string is not a valid jit argument: close over it
        err, every = _outcome(lambda: jax.jit(lambda a: fn({"a": a, "b": tree["b"]}))(
            tree["a"]))
    else:
        err, every = _outcome(lambda: fn(tree))
    _raised_the_same_everywhere(err, every, TypeError)
    assert "['b']['c'][1]" in str(err), str(err)


@pytest.mark.parametrize("call", ["allgather", "broadcast", "reducescatter",
                                  "broadcast_parameters"])
def test_other_collectives_refuse_a_non_array_leaf(call):
    tree = {"x": jnp.ones((N, 2)), "y": object()}
    err, every = _outcome(lambda: getattr(kj, call)(tree))
    _raised_the_same_everywhere(err, every, TypeError)
    assert "['y']" in str(err), str(err)


MISMATCHES = {
    "allreduce_shape": lambda: kj.allreduce(jnp.ones([R + 1]), op=kj.Sum, name="err.ar"),
    "allreduce_dtype": lambda: kj.allreduce(jnp.ones([2], jnp.float32 if R == 0 else
                                                     jnp.float64), name="err.dt"),
    "allreduce_tree_leaf_shape": lambda: kj.allreduce({"a": jnp.ones(2),
                                                       "b": jnp.ones([R + 1])}, op=kj.Sum),
    "allgather_trailing": lambda: kj.allgather(jnp.ones([1, R + 1]), name="err.ag"),
    "allgather_stack": lambda: kj.allgather(jnp.ones([R + 1]), stack=True),
    "broadcast_shape": lambda: kj.broadcast(jnp.ones([R + 2]), root_rank=0, name="err.bc"),
    "reducescatter_shape": lambda: kj.reducescatter(jnp.ones([N * (R + 1)]), op=kj.Sum,
                                                    name="err.rs"),
}


@pytest.mark.parametrize("which", sorted(MISMATCHES))
def test_mismatch_raises_kolo_internal_error_on_every_rank(which):
    err, every = _outcome(MISMATCHES[which])
    _raised_the_same_everywhere(err, every, KoloInternalError)
    assert "mismatch" in str(err).lower(), str(err)


def test_tree_leaf_shape_mismatch_names_the_leaf():
    err, every = _outcome(lambda: kj.allreduce({"a": jnp.ones(2), "b": {"c": jnp.ones([R + 1])}},
                                               op=kj.Sum))
    _raised_the_same_everywhere(err, every, KoloInternalError)
    assert "['b']['c']" in str(err), str(err)


def test_mismatch_inside_jit_raises_on_every_rank():
    f = jax.jit(lambda x: kj.allreduce(x, op=kj.Sum, name="err.jit"))
    err, every = _outcome(lambda: f(jnp.ones([R + 1])))
    _raised_the_same_everywhere(err, every, JIT_ERRORS)
    assert "mismatch" in str(err).lower(), str(err)
    # the same jitted function still works once the shapes agree
    assert np.array_equal(np.asarray(f(jnp.ones(3))), np.full(3, float(N)))


def test_mismatched_ops_inside_jit_raise_on_every_rank():
    # The same tree, so the tree check passes: the collective itself fails (in XLA's FFI
    # handler where kolo has one) and every rank gets the coordinator's error.
    f = jax.jit(lambda x: kj.allreduce(x, op=kj.Sum if R == 0 else kj.Max, name="err.op"))
    err, every = _outcome(lambda: f(jnp.ones(3)))
    _raised_the_same_everywhere(err, every, JIT_ERRORS)
    assert "mismatch" in str(err).lower() and "err.op" in str(err), str(err)
    after = kj.allreduce(jnp.ones(2), op=kj.Sum)  # the ranks are still in step
    assert np.array_equal(np.asarray(after), np.full(2, float(N)))


def test_allgather_of_different_first_dims_inside_jit_is_all_or_nothing():
    # The contract lets first dims differ; inside jit the result's shape must be known when
    # tracing. Either it works (the right rows) or every rank gets an error: never some
    # ranks with a result and others with an error.
    x = jnp.full((R + 1, 2), float(R))
    want = np.concatenate([np.full((r + 1, 2), float(r)) for r in range(N)])
    box = []
    err, every = _outcome(lambda: box.append(jax.jit(kj.allgather)(x)) or box[-1])
    if all(e is None for e in every):
        assert np.array_equal(np.asarray(box[-1]), want)
    else:
        assert all(e is not None for e in every), every


UNSUPPORTED = {
    "complex64": lambda: jnp.asarray([1 + 2j, 3j] * N, jnp.complex64),
}


@pytest.mark.parametrize("call", ["allreduce", "allgather", "broadcast", "alltoall",
                                  "reducescatter"])
def test_unsupported_dtype_is_a_type_error(call):
    t = UNSUPPORTED["complex64"]()
    err, every = _outcome(lambda: getattr(kj, call)(t))
    _raised_the_same_everywhere(err, every, TypeError)
    assert "complex64" in str(err), str(err)


@pytest.mark.parametrize("call", ["allreduce", "allgather", "broadcast", "reducescatter"])
def test_an_unsupported_dtype_on_one_rank_fails_every_rank(call):
    # The tree check sees the other dtype and names the leaf on every rank; nobody waits
    # for the rank whose leaf kolo cannot move.
    tree = {"a": jnp.ones((N, 2)), "b": jnp.ones((N, 2), jnp.complex64 if R == N - 1
                                                     else jnp.float32)}
    err, every = _outcome(lambda: getattr(kj, call)(tree))
    assert all(e is not None for e in every), every
    assert "['b']" in str(err) and "complex64" in str(err), str(err)


@pytest.mark.parametrize("call", ["allreduce", "reducescatter"])
def test_bool_cannot_be_reduced(call):
    err, every = _outcome(lambda: getattr(kj, call)(jnp.ones(2 * N, bool)))
    _raised_the_same_everywhere(err, every, (TypeError, ValueError))


def test_reducescatter_refuses_min_max_product():
    for op in (kj.Min, kj.Max, kj.Product):
        with pytest.raises(ValueError):
            kj.reducescatter(jnp.ones(N), op=op)
    in_step()
