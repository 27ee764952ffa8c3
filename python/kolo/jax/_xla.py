"""kolo.jax's allreduce inside ``jax.jit`` as an XLA FFI call (``kolo._core``'s handler).

An ``io_callback`` hands Python fresh host copies of its operands and copies its results
back into XLA's buffers: for a ResNet-50-sized gradient tree that is most of a step's
collective time. The FFI handler instead gets XLA's buffers, and each result is aliased
to its leaf, so the allreduce runs in place on the gradients.

Ordering: the primitive carries the same ordered effect as ``io_callback(ordered=True)``,
so JAX threads one token through every kolo collective of a computation (FFI calls and
callbacks alike) and across computations: every rank runs them in program order, which
kolo's negotiation needs for unnamed collectives.

This uses JAX internals (``jax._src``: the effect, the lowering helpers). When they are
missing (another JAX version) or kolo was built without XLA's FFI headers, ``available``
is False and kolo.jax falls back to ``io_callback``.
"""
import dataclasses
import functools

import numpy as np

from kolo.common import engine as _engine
from kolo.jax._trees import _sentinel, _signature, _signature_text

available = False
try:
    import jax
    from jax.extend.core import Primitive
    from jax._src import core as _jcore
    from jax._src import dispatch as _dispatch
    from jax._src import ffi as _jffi
    from jax._src.callback import _OrderedIOEffect
    from jax._src.interpreters import mlir as _mlir

    _handlers = _engine.xla_ffi_handlers()
    if "kolo_allreduce" in _handlers:
        jax.ffi.register_ffi_target("kolo_allreduce", _handlers["kolo_allreduce"],
                                    platform="cpu")
        available = True
except (ImportError, AttributeError):  # another JAX: the io_callback path serves
    pass


def _abstract_eval(*avals, **params):
    return avals, {_OrderedIOEffect}


def _lowering(ctx, *leaves, name, call_site, op, prescale, postscale, process_set, tree_digest,
              tree):
    token = ctx.tokens_in.get(_OrderedIOEffect)
    with_token = dataclasses.replace(ctx, avals_in=[_jcore.abstract_token, *ctx.avals_in],
                                     avals_out=[_jcore.abstract_token, *ctx.avals_out])
    aliases = {i + 1: i + 1 for i in range(len(leaves))}  # in place: result i is leaf i
    call = _jffi.build_ffi_lowering_function(
        "kolo_allreduce", has_side_effect=True, operand_output_aliases=aliases)(
            with_token, token, *leaves, name=name, call_site=call_site, op=np.int32(op),
            prescale=np.float64(prescale), postscale=np.float64(postscale),
            process_set=np.int32(process_set), tree_digest=np.int32(tree_digest), tree=tree)
    token, *results = call.results
    ctx.set_tokens_out(ctx.tokens_in.update_tokens(_mlir.TokenSet({_OrderedIOEffect: token})))
    return results


if available:
    allreduce_p = Primitive("kolo_allreduce")
    allreduce_p.multiple_results = True
    allreduce_p.def_impl(functools.partial(_dispatch.apply_primitive, allreduce_p))
    allreduce_p.def_effectful_abstract_eval(_abstract_eval)
    _mlir.register_lowering(allreduce_p, _lowering, platform="cpu")


def allreduce(leaves, paths, name, op, prescale, postscale, set_id):
    """The allreduce of traced leaves on the CPU, in place on XLA's buffers. First the
    handler checks that the ranks' trees agree: the signature's digest (``_sentinel``)
    goes out as the shape of a zero-size allreduce, and on a mismatch its text
    (``_signature_text``) names the first leaf that differs."""
    signature = _signature(leaves, paths, False)
    call_site = "" if name else _engine.call_site()
    return allreduce_p.bind(*leaves, name=name or "", call_site=call_site,
                            op=int(op), prescale=float(prescale), postscale=float(postscale),
                            process_set=int(set_id), tree_digest=_sentinel(signature).shape[1],
                            tree=_signature_text(signature))
