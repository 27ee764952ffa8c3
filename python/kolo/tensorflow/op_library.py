"""kolo's collectives as TensorFlow ops (bindings/tensorflow/kolo_tf_ops.cc): async kernels
that hand TensorFlow's own buffers to kolo's runtime and finish when it does.

TensorFlow's C++ ABI changes with every minor version, so the library is built per
version, and one kolo serves them all:

1. the build (or the wheel) ships one for the TensorFlow it was built with, in
   ``kolo/tensorflow/ops/tf<major.minor>/``;
2. for another TensorFlow the library is compiled on first import from the sources
   shipped beside it (``ops/src``), where a C++ compiler is present, into
   ``~/.cache/kolo/tf-ops/<digest of the sources>/tf<version>[-gpu]/`` (once per host: the
   ranks of a host wait on a file lock for the one that compiles), with GPU kernels when
   kolo's core has its GPU path (:func:`_gpu_kernels`);
3. otherwise, or with KOLO_TF_OPS=0, the collectives run through ``tf.numpy_function``
   (kolo.tensorflow.mpi_ops), which needs neither, and rank 0 says so in one line.

:func:`ops` gives the loaded library's op module, or None for that fallback; :func:`run`
runs one of its ops as kolo.tensorflow's collectives do, and inside XLA
(``tf.function(jit_compile=True)``) the grouped allreduce as the library's XLA custom call
(:data:`XLA`).
"""
import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys

import tensorflow as tf

from kolo.common import basics
from kolo.common import engine
from kolo.tensorflow.errors import CollectiveArgumentError, CollectiveFailedError

_HERE = os.path.dirname(os.path.abspath(__file__))
_SOURCES = os.path.join(_HERE, "ops", "src")
_LIBRARY = "libkolo_tf_ops.so"
_COMPILE_SECONDS = 600

_loaded = {}  # "ops": the op module or None, "reason": why None


def ops():
    """The op module (``kolo_allreduce``, ``kolo_grouped_allgather``, ...) for the running
    TensorFlow, or None when kolo.tensorflow uses tf.numpy_function; loaded at first use."""
    if "ops" not in _loaded:
        _loaded["ops"], _loaded["reason"] = _load()
        if _loaded["ops"] is None and (not basics.is_initialized() or basics.rank() == 0):
            print("kolo.tensorflow: collectives run through tf.numpy_function: %s"
                  % _loaded["reason"], file=sys.stderr, flush=True)
    return _loaded["ops"]


def fallback_reason():
    """Why the op library is not used ('' when it is)."""
    ops()
    return _loaded["reason"] or ""


class _XlaOps:
    """What kolo's ops are inside an XLA-compiled function: the grouped allreduce, the
    library's custom call ``kolo_tf_grouped_allreduce`` (its settings and the tensors'
    dtypes and static shapes as text, which kolo_tf_ops.cc reads); the collectives whose
    result's shape depends on the other ranks cannot be compiled by XLA."""

    def kolo_grouped_allreduce(self, tensors, reduce_op, prescale_factor, postscale_factor,
                               process_set, call_site, tensor_name, caller_waits=False):
        from tensorflow.compiler.tf2xla.ops import gen_xla_ops
        lines = [tensor_name, call_site, "%d %r %r %d" % (reduce_op, float(prescale_factor),
                                                         float(postscale_factor), process_set),
                 str(len(tensors))]
        for t in tensors:
            if not t.shape.is_fully_defined():
                raise ValueError("kolo.tensorflow.allreduce inside an XLA-compiled function "
                                 "needs static shapes; %s has shape %s" % (t.name, t.shape))
            lines.append(" ".join(str(v) for v in [_CODES[t.dtype], t.shape.rank]
                                  + t.shape.as_list()))
        return gen_xla_ops.xla_custom_call_v2(
            tensors, "kolo_tf_grouped_allreduce", "\n".join(lines), True,
            [t.dtype for t in tensors], [t.shape for t in tensors])

    def __getattr__(self, op):
        what = op.replace("kolo_grouped_", "").replace("kolo_", "")
        raise NotImplementedError(
            "kolo.tensorflow.%s cannot run inside an XLA-compiled function: of kolo's "
            "collectives only allreduce and grouped_allreduce run there (the results of "
            "allgather, alltoall and reducescatter have shapes that XLA cannot know when it "
            "compiles). Call %s outside it, or use tf.function(jit_compile=False) (Keras: "
            "model.compile(..., jit_compile=False))" % (what, what))


XLA = _XlaOps()
_CODES = engine.dtype_codes(tf.as_dtype)


def run(op, ops, name, tensors):
    """``op(ops, naming, tensors)``: kolo's TensorFlow op, named. In a TF1 graph an unnamed
    collective is named after its graph op (a Session runs ops in no fixed order, so they
    pair by name); elsewhere it is left to the core, with the Python line that made it.
    Eagerly, a failure raises kolo's error classes (kolo.tensorflow.errors); in a graph
    TensorFlow's own, FailedPreconditionError and InvalidArgumentError, as Horovod's ops."""
    if not name and not tf.compat.v1.executing_eagerly_outside_functions():
        name = _outermost_graph().unique_name("KoloCollective")
    naming = {"tensor_name": name or "", "call_site": "" if name else _call_site()}
    if not tf.executing_eagerly():
        return list(op(ops, naming, list(tensors)))
    naming["caller_waits"] = True  # eagerly the op blocks this thread: it runs the round
    try:
        return list(op(ops, naming, list(tensors)))
    except tf.errors.FailedPreconditionError as e:
        raise CollectiveFailedError(_op_message(e)) from None
    except tf.errors.InvalidArgumentError as e:
        raise CollectiveArgumentError(_op_message(e)) from None


def _outermost_graph():
    """The TF1 graph itself, also while a branch of tf.cond or the body of tf.while_loop is
    built as a function graph of its own: names made unique there are unique in the whole
    graph, so the collectives of two conds fetched by one Session.run never share one."""
    graph = tf.compat.v1.get_default_graph()
    while getattr(graph, "outer_graph", None) is not None:
        graph = graph.outer_graph
    return graph


def _call_site():
    """The Python line that made an unnamed collective, for kolo's errors; none for a line
    of code that AutoGraph rewrote (inside tf.function), whose file has a random name that
    differs between ranks and would make them look out of step."""
    site = engine.call_site()
    return "" if "__autograph_generated_file" in site else site


def _op_message(error):
    """kolo's message inside an eager op's error, without what TensorFlow and the op add
    around it ("{{function_node ...}}", " (op KoloAllreduce)", " [Op:KoloAllreduce]")."""
    message = error.message or ""
    if message.startswith("{{function_node"):
        message = message.split("}}", 1)[-1].lstrip()
    return message.rsplit(" [Op:", 1)[0].rsplit(" (op Kolo", 1)[0]


def _minor_version():
    return ".".join(tf.__version__.split(".")[:2])


def _load():
    if not engine.tf_ops_enabled():
        return None, "KOLO_TF_OPS=0"
    path = os.path.join(_HERE, "ops", "tf" + _minor_version(), _LIBRARY)
    if not os.path.exists(path):
        path, reason = _compiled()
        if path is None:
            return None, reason
    try:
        module = tf.load_op_library(path)
        status = ctypes.CDLL(path).kolo_tf_set_abi(ctypes.c_void_p(engine.tf_abi()))
    except (tf.errors.OpError, OSError, AttributeError) as e:
        return None, "%s does not load with TensorFlow %s: %s" % (path, tf.__version__, e)
    if status != 0:
        return None, "%s was built for another kolo (its C interface differs)" % path
    return module, None


def _sources_digest():
    """What names a compiled library in the cache: its sources' digest, so that a kolo
    whose op library or C interface changed never loads one built from older sources."""
    digest = hashlib.sha256()
    for name in sorted(os.listdir(_SOURCES)):
        with open(os.path.join(_SOURCES, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read())
    return digest.hexdigest()[:16]


def _gpu_kernels():
    """Whether the library gets GPU kernels (kolo_tf_device.h): where kolo's core has its
    GPU path, as the build does. They need only TensorFlow's headers, which its CPU wheel
    ships too; without a GPU, TensorFlow never places an op on them."""
    return basics.cuda_built()


def _compiled():
    """The library compiled for this TensorFlow in the user's cache: (path, None), or
    (None, why not)."""
    compiler = shutil.which(os.environ.get("CXX", "c++"))
    if compiler is None:
        return None, ("no op library for TensorFlow %s ships with kolo, and no C++ compiler "
                      "(c++, or $CXX) is here to build one" % tf.__version__)
    if not os.path.exists(os.path.join(_SOURCES, "kolo_tf_ops.cc")):
        return None, "the op library's sources are not installed (%s)" % _SOURCES
    gpu = _gpu_kernels()
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "kolo", "tf-ops", _sources_digest(),
                         "tf" + tf.__version__ + ("-gpu" if gpu else ""))
    path = os.path.join(cache, _LIBRARY)
    os.makedirs(cache, exist_ok=True)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the first rank of a host compiles, the rest wait
        if os.path.exists(path):
            return path, None
        partial = "%s.%d" % (path, os.getpid())
        command = ([compiler, "-shared", "-fPIC", "-O2", "-Wno-deprecated-declarations",
                    os.path.join(_SOURCES, "kolo_tf_ops.cc"), "-I" + _SOURCES]
                   + (["-DKOLO_TF_GPU=1"] if gpu else [])
                   + tf.sysconfig.get_compile_flags() + tf.sysconfig.get_link_flags()
                   + ["-l:libtensorflow_cc.so.2", "-o", partial])
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  timeout=_COMPILE_SECONDS)
        except subprocess.TimeoutExpired:
            return None, "compiling the op library took over %d s" % _COMPILE_SECONDS
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            return None, "the op library did not compile for TensorFlow %s: %s" % (
                tf.__version__, last)
        os.replace(partial, path)
    return path, None
