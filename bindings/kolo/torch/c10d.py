"""kolo as a ``torch.distributed`` backend: ``import kolo.torch.c10d`` registers it under the
name ``"kolo"``, then ``dist.init_process_group(backend="kolo")`` runs DDP and the
``torch.distributed`` collectives on kolo's runtime (negotiation, fusion, the shared-memory
path, the stall inspector and the timeline).

Python-level only: a ``torch.distributed.ProcessGroup`` subclass whose methods hand
tensors to ``kolo._core`` as (pointer, dtype, shape, device), with no link against libtorch,
so one kolo build serves every PyTorch that has the extension points used here
(``_MIN_TORCH``; checked at import). docs/api-torch-distributed.md has what is supported.

How it fits together:
 - every operation is enqueued on kolo's background thread at once and returns a ``Work``;
   a pool of threads waits on kolo's handles, marks each Work done and completes its
   future (DDP's reducer and its comm hooks wait on futures, never on the Work), see
   _Completer;
 - names: kolo pairs operations across ranks by name. The k-th allreduce of a backward
   pass is ``ddp.bucket<k>.<dtype>x<numel>`` (DDP launches its buckets in bucket order, on
   every rank the same), stable from step to step so that kolo's response cache serves
   it, and what the stall inspector and the timeline show; an operation started in a
   future's callback is named after that future's operation (``<name>.then<j>``),
   whichever thread runs the callback; everything else is left to kolo's own numbering
   of unnamed operations, which records the user's line for its errors;
 - ``dist.new_group(ranks)`` becomes a kolo process set. kolo registers a set with every
   rank taking part, and PyTorch (where it has the hook) asks the default process group
   for new groups on every rank, members or not; there the set is registered.
"""
import concurrent.futures
import datetime
import os
import queue
import sys
import threading
import time

import torch
import torch.distributed as dist

from kolo import _core
from kolo.common import basics as _basics

# The oldest PyTorch this backend runs on; see _check_torch() for what it needs.
_MIN_TORCH = (2, 1)
BACKEND_NAME = "kolo"


def _torch_version():
    parts = []
    for p in torch.__version__.split("+")[0].split(".")[:2]:
        digits = "".join(c for c in p if c.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _check_torch():
    """What the backend needs from PyTorch, each missing piece named."""
    missing = []
    if _torch_version() < _MIN_TORCH:
        missing.append("PyTorch >= %d.%d" % _MIN_TORCH)
    if not dist.is_available():
        missing.append("torch.distributed (this PyTorch was built without it)")
    else:
        import inspect
        if not hasattr(dist, "_Work"):
            missing.append("torch.distributed._Work (Python Work objects)")
        try:
            params = inspect.signature(dist.Backend.register_backend).parameters
        except (TypeError, ValueError):
            params = {}
        for p in ("extended_api", "devices"):
            if p not in params:
                missing.append("Backend.register_backend(%s=...)" % p)
        if not hasattr(torch._C, "_current_graph_task_id"):
            missing.append("torch._C._current_graph_task_id (to name DDP's buckets)")
    if missing:
        raise ImportError(
            "kolo's torch.distributed backend needs %s; this is PyTorch %s. Use kolo.torch "
            "(DistributedOptimizer) with this PyTorch, or upgrade PyTorch."
            % (", ".join(missing), torch.__version__))


_check_torch()

from kolo.torch.mpi_ops import _DTYPES, _stream  # noqa: E402  (after the version check)

_c10d = dist.distributed_c10d
_TORCH_DISTRIBUTED_DIR = os.path.dirname(_c10d.__file__) + os.sep
# PyTorch asks the default process group for new groups on every rank (members or not)
# when it has a `new_group` method; older PyTorch calls the backend on members only, and
# kolo registers a set with every rank taking part.
_HAS_NEW_GROUP_HOOK = "new_group" in getattr(
    getattr(_c10d, "_new_group_with_tag", None), "__code__", compile("", "", "exec")).co_names

_R = _core.REDUCE_OPS
_OPS = {
    dist.ReduceOp.SUM: _R["sum"],
    dist.ReduceOp.AVG: _R["average"],
    dist.ReduceOp.MIN: _R["min"],
    dist.ReduceOp.MAX: _R["max"],
    dist.ReduceOp.PRODUCT: _R["product"],
}


def _op_code(reduce_op, what):
    op = getattr(reduce_op, "op", reduce_op)  # a ReduceOp object, or its RedOpType
    for known, code in _OPS.items():
        if op == known:
            return code
    raise NotImplementedError(
        "kolo's torch.distributed backend: %s with %s is not supported; kolo reduces with "
        "SUM, AVG, MIN, MAX and PRODUCT" % (what, op))


# --- tensors ---------------------------------------------------------------------------

def _check(tensor, what):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.dtype not in _DTYPES:
        raise TypeError("kolo's torch.distributed backend: %s has dtype %s, which kolo does "
                        "not move; supported: %s"
                        % (what, tensor.dtype, ", ".join(str(d) for d in _DTYPES)))
    if tensor.is_sparse:
        raise ValueError("kolo's torch.distributed backend: %s is sparse; kolo moves dense "
                         "tensors" % what)
    if not tensor.is_contiguous():
        raise ValueError("kolo's torch.distributed backend: %s is not contiguous; call "
                         ".contiguous() first" % what)


def _device(tensor):
    return tensor.device.index if tensor.is_cuda else -1


def _shape(tensor):
    return list(tensor.shape) if tensor.dim() > 0 else [1]  # kolo has no 0-d tensors


def _copy_result(out, dest):
    """Copies a finished kolo operation's output into ``dest`` (any layout)."""
    nbytes = dest.numel() * dest.element_size()
    if out.nbytes != nbytes:
        raise RuntimeError("kolo's torch.distributed backend: the result has %d bytes, the "
                           "output tensor %d (shape %s)" % (out.nbytes, nbytes,
                                                            list(dest.shape)))
    if dest.is_contiguous():
        out.copy_to(dest.data_ptr(), nbytes)
    else:
        tmp = torch.empty(dest.shape, dtype=dest.dtype, device=dest.device)
        out.copy_to(tmp.data_ptr(), nbytes)
        dest.copy_(tmp)


# --- Work and completion -----------------------------------------------------------------

# Names of operations started inside a future's callbacks come from the operation whose
# future it is (its `label`, then ".then<j>"): the same on every rank whichever thread runs
# the callback, and stable from step to step when the parent's name is.
_context = threading.local()


def _parent():
    stack = getattr(_context, "stack", None)
    return stack[-1] if stack else None


def _in_context(work, callback):
    def run(fut):
        stack = _context.__dict__.setdefault("stack", [])
        stack.append(work)
        try:
            return callback(fut)
        finally:
            stack.pop()
    return run


class _KoloFuture(torch.futures.Future):
    """The future of a KoloWork, and of every then() chained on it. Callbacks run with the
    work as the parent of the operations they start, whichever thread runs them (the
    futures thread, or the caller's when the future is already done), so those operations
    get the same names on every rank. wait() completes the work's future in the waiting
    thread when kolo has finished but the futures thread is busy (e.g. in a callback
    that waits)."""

    def __init__(self, work):
        super().__init__()
        self._work = work

    def then(self, callback):
        child = _KoloFuture(self._work)

        def run(fut):
            try:
                result = callback(fut)
            except Exception as e:  # noqa: B902  (the chained future carries it)
                child.set_exception(e)
            else:
                child.set_result(result)
        super().add_done_callback(_in_context(self._work, run))
        return child

    def add_done_callback(self, callback):
        return super().add_done_callback(_in_context(self._work, callback))

    def wait(self):
        self._work._kolo_done.wait()
        self._work._complete_future()
        return super().wait()


def _value(fut):
    return fut.value()  # raises the operation's error


def _called_from_cpp():
    """Whether this module's collective method was called by PyTorch's C++ (DDP's reducer,
    through the ProcessGroup trampoline) rather than by torch.distributed's Python
    functions, which hand our Work to Python code."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename == __file__:
        frame = frame.f_back
    return frame is None or not frame.f_code.co_filename.startswith(_TORCH_DISTRIBUTED_DIR)


class KoloWork(dist._Work):
    """One operation: ``wait()`` blocks until kolo finished it (and raises its error, the
    coordinator's text naming ranks); ``get_future()`` is completed with its output tensors
    by the completion thread, or by the first thread that waits for it."""

    def __init__(self, what, label):
        super().__init__()
        self._what = what
        self.label = label  # the parent name of operations its callbacks start
        self.children = 0
        self._future = _KoloFuture(self)
        self._kolo_done = threading.Event()
        self._lock = threading.Lock()
        self._future_claimed = False
        self._error = None
        self._result = None
        self.from_cpp = False
        self._cpp_future = None

    def _finish(self, result, error):
        """Called by the thread that waited on kolo; the future is completed later."""
        self._result, self._error = result, error
        self._kolo_done.set()

    def _complete_future(self):
        """Completes the future once, in whichever thread comes first; returns once it is
        done (PyTorch marks a future done before it runs its callbacks)."""
        with self._lock:
            claimed, self._future_claimed = self._future_claimed, True
        if claimed:
            while not self._future.done():  # another thread is completing it right now
                time.sleep(0.0001)
            return
        if self._error is None:
            self._future.set_result(self._result)
        else:
            self._future.set_exception(self._error)

    def wait(self, timeout=None):
        seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else 0
        if not self._kolo_done.wait(seconds if seconds > 0 else None):
            raise RuntimeError("kolo's torch.distributed backend: %s did not finish within "
                               "%s (kolo's stall inspector reports which ranks are missing)"
                               % (self._what, timeout))
        self._complete_future()
        if self._error is not None:
            raise self._error
        return True

    def get_future(self):
        if self.from_cpp:
            # PyTorch's C++ (DDP's reducer) reads the future's value as a C++ IValue, and an
            # error set from Python is only a value there: a future chained by then() holds
            # a real error (its callback raises it).
            if self._cpp_future is None:
                self._cpp_future = torch.futures.Future.then(self._future, _value)
            return self._cpp_future
        return self._future

    def is_completed(self):
        return self._kolo_done.is_set()

    def is_success(self):
        return self._kolo_done.is_set() and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._result


class _Completer:
    """A pool of threads, each waiting on one kolo handle, then marking its Work done and
    completing its future (running the future's callbacks). Not one thread in the order
    the handles were started: operations started from callbacks (PowerSGD's) reach kolo in
    different orders on different ranks, and a callback may block until another
    collective finishes, so no handle may wait behind another. A thread is made only when
    all are busy."""

    # Handles waited on at once; past it, new ones wait for a free thread.
    MAX_THREADS = 64

    def __init__(self):
        self._pool = None
        self._lock = threading.Lock()

    def submit(self, handle, finish, work):
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.MAX_THREADS, thread_name_prefix="kolo-c10d")
        self._pool.submit(self._run, handle, finish, work)

    @staticmethod
    def _run(handle, finish, work):
        try:
            result = finish(_core.wait(handle))
        except BaseException as e:  # noqa: B902  (every error belongs to the Work)
            work._finish(None, e if isinstance(e, Exception) else RuntimeError(str(e)))
        else:
            work._finish(result, None)
        work._complete_future()


_completer = _Completer()


# --- process sets ------------------------------------------------------------------------

# Sorted global ranks -> kolo process set id, for the sets this module registered.
_sets = {}


def _register_set(ranks):
    """The kolo set of ``ranks`` (sorted global ranks): 0 for all ranks; else registered,
    collectively (every rank calls this for every new group, members or not)."""
    if ranks == list(range(_core.size())):
        return 0
    if tuple(ranks) not in _sets:
        _sets[tuple(ranks)] = _core.wait(_core.add_process_set_async(list(ranks))).value
    return _sets[tuple(ranks)]


def _forget_sets():
    _sets.clear()


_basics._on_new_run(_forget_sets)


# --- the process group -------------------------------------------------------------------

class KoloProcessGroup(dist.ProcessGroup):
    """A torch.distributed process group on kolo's runtime (one per torch group)."""

    def __init__(self, rank, size, set_id, group_name):
        super().__init__(rank, size)
        self._set_id = set_id
        tag = "" if set_id == 0 else "g%s." % group_name
        self._bucket_prefix = "ddp." + tag
        self._label_prefix = "c10d.%s" % tag
        self._graph_task = -1
        self._in_backward = 0
        self._unnamed = 0

    def getBackendName(self):
        return BACKEND_NAME

    def __repr__(self):
        return "KoloProcessGroup(rank=%d, size=%d, kolo process set %d)" % (
            self.rank(), self.size(), self._set_id)

    # names ----------------------------------------------------------------------------

    def _name(self, op, tensor=None):
        """The kolo name of the next operation (see the module's docstring); an empty name
        leaves the numbering to kolo. Its label, for the operations that its future's
        callbacks start, is kept for _start() (per thread)."""
        name, _context.label = self._name_and_label(op, tensor)
        return name

    def _name_and_label(self, op, tensor):
        parent = _parent()
        if parent is not None:
            name = "%s.then%d" % (parent.label, parent.children)
            parent.children += 1
            return name, name
        task = torch._C._current_graph_task_id()
        if task != -1 and op == "allreduce":
            if task != self._graph_task:
                self._graph_task, self._in_backward = task, 0
            k = self._in_backward
            self._in_backward += 1
            size = "" if tensor is None else ".%sx%d" % (str(tensor.dtype)[6:], tensor.numel())
            name = "%sbucket%d%s" % (self._bucket_prefix, k, size)
            return name, name
        # kolo numbers it and records the caller's line for its errors
        self._unnamed += 1
        return "", "%s%s.%d" % (self._label_prefix, op, self._unnamed)

    def _start(self, what, handle, finish):
        work = KoloWork(what, getattr(_context, "label", what))
        work.from_cpp = _called_from_cpp()
        _completer.submit(handle, finish, work)
        return work

    # allreduce ------------------------------------------------------------------------

    def allreduce(self, tensors, opts=None):
        op = _op_code(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "allreduce")
        for i, t in enumerate(tensors):
            _check(t, "allreduce tensor %d" % i)
        if len(tensors) != 1:
            return self.allreduce_coalesced(tensors, opts, op)
        t = tensors[0]
        h = _core.allreduce_async(t.data_ptr(), t.data_ptr(), _DTYPES[t.dtype], _shape(t),
                                  _device(t), self._name("allreduce", t), op, 1.0, 1.0,
                                  self._set_id, _stream(t))
        return self._start("allreduce", h, lambda out: tensors)

    def allreduce_coalesced(self, tensors, opts=None, op=None):
        if op is None:
            op = _op_code(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                          "allreduce_coalesced")
        specs = []
        for i, t in enumerate(tensors):
            _check(t, "allreduce_coalesced tensor %d" % i)
            specs.append((t.data_ptr(), t.data_ptr(), _DTYPES[t.dtype], _shape(t), _device(t)))
        h = _core.grouped_allreduce_async(specs, self._name("grouped_allreduce"), op, 1.0,
                                          1.0, self._set_id, _stream(tensors[0]))
        return self._start("allreduce_coalesced", h, lambda out: tensors)

    # broadcast ------------------------------------------------------------------------

    def broadcast(self, tensors, opts=None):
        root = opts.rootRank if opts is not None else 0
        works = []
        for i, t in enumerate(tensors):
            _check(t, "broadcast tensor %d" % i)
            h = _core.broadcast_async(t.data_ptr(), _DTYPES[t.dtype], _shape(t), _device(t),
                                      int(root), self._name("broadcast"), self._set_id,
                                      _stream(t))
            works.append(h)
        return self._chain("broadcast", works, tensors)

    def _chain(self, what, handles, result):
        """One Work for several kolo handles (finished in order)."""
        for h in handles[:-1]:
            _completer.submit(h, lambda out: None, KoloWork(what, what))
        return self._start(what, handles[-1], lambda out: result)

    # allgather ------------------------------------------------------------------------

    def _allgather_handle(self, t):
        _check(t, "allgather input")
        return _core.allgather_async(t.data_ptr(), _DTYPES[t.dtype], [1, t.numel()],
                                     _device(t), self._name("allgather"), self._set_id,
                                     _stream(t))

    def allgather(self, output_tensors, input_tensors, opts=None):
        if len(input_tensors) != 1:
            raise NotImplementedError("kolo's torch.distributed backend: allgather takes one "
                                      "input tensor per process")
        t, outs = input_tensors[0], output_tensors[0]
        if len(outs) != self.size():
            raise ValueError("allgather: %d output tensors for a group of %d"
                             % (len(outs), self.size()))

        def finish(out):
            rows = torch.empty((self.size(), t.numel()), dtype=t.dtype, device=t.device)
            _copy_result(out, rows)
            for row, o in zip(rows, outs):
                o.copy_(row.view(o.shape))
            return output_tensors
        return self._start("allgather", self._allgather_handle(t), finish)

    def all_gather_single(self, output, input, opts=None):
        h = self._allgather_handle(input)
        return self._start("all_gather_into_tensor", h,
                           lambda out: [_copy_result(out, output), output][1])

    _allgather_base = all_gather_single

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        hs = [self._allgather_handle(i) for i in inputs]
        for h, o in zip(hs[:-1], outputs[:-1]):
            _completer.submit(h, lambda out, o=o: _copy_result(out, o),
                              KoloWork("allgather", "allgather"))
        last = outputs[-1]
        return self._start("allgather_into_tensor_coalesced", hs[-1],
                           lambda out: [_copy_result(out, last), outputs][1])

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    # reduce_scatter -------------------------------------------------------------------

    def _reduce_scatter(self, output, rows, op, what):
        """Rank i of the group gets row i of the reduction of ``rows`` (size × numel)."""
        if op in (_R["sum"], _R["average"]):
            h = _core.reducescatter_async(rows.data_ptr(), _DTYPES[rows.dtype],
                                          list(rows.shape), _device(rows), self._name(what),
                                          op, 1.0, 1.0, self._set_id, _stream(rows))
            return self._start(what, h, lambda out, _keep=rows: [_copy_result(out, output),
                                                                 [output]][1])
        # MIN, MAX, PRODUCT: kolo's reducescatter sums; reduce everything, keep our row.
        h = _core.allreduce_async(rows.data_ptr(), rows.data_ptr(), _DTYPES[rows.dtype],
                                  list(rows.shape), _device(rows), self._name(what), op, 1.0,
                                  1.0, self._set_id, _stream(rows))

        def finish(out):
            output.copy_(rows[self.rank()].view(output.shape))
            return [output]
        return self._start(what, h, finish)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = _op_code(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                      "reduce_scatter")
        if len(output_tensors) != 1:
            raise NotImplementedError("kolo's torch.distributed backend: reduce_scatter takes "
                                      "one output tensor per process")
        output, inputs = output_tensors[0], input_tensors[0]
        _check(output, "reduce_scatter output")
        if len(inputs) != self.size() or any(i.numel() != output.numel() for i in inputs):
            raise ValueError("reduce_scatter: needs %d input tensors with the output's %d "
                             "elements each" % (self.size(), output.numel()))
        rows = torch.stack([i.reshape(-1) for i in inputs])
        return self._reduce_scatter(output, rows, op, "reduce_scatter")

    def reduce_scatter_single(self, output, input, opts=None):
        op = _op_code(opts.reduceOp if opts is not None else dist.ReduceOp.SUM,
                      "reduce_scatter_tensor")
        _check(input, "reduce_scatter_tensor input")
        if input.numel() != output.numel() * self.size():
            raise ValueError("reduce_scatter_tensor: the input has %d elements, it needs the "
                             "output's %d times the group's size %d"
                             % (input.numel(), output.numel(), self.size()))
        rows = input.view(self.size(), output.numel())
        if op not in (_R["sum"], _R["average"]):
            rows = rows.clone()  # reduced in place: the input stays as it was
        return self._reduce_scatter(output, rows, op, "reduce_scatter_tensor")

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        works = [self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return works[-1]  # finished in order: the last one finishes after all

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # alltoall -------------------------------------------------------------------------

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        _check(input, "all_to_all_single input")
        t = input if input.dim() > 0 else input.reshape(1)
        splits = [int(s) for s in input_split_sizes]
        h = _core.alltoall_async(t.data_ptr(), _DTYPES[t.dtype], list(t.shape), _device(t),
                                 splits, self._name("alltoall"), self._set_id, _stream(t))
        want = [int(s) for s in output_split_sizes]

        def finish(out):
            if want and list(out.received_splits) != want:
                raise RuntimeError("all_to_all_single: output_split_sizes %s, but the ranks "
                                   "sent %s rows" % (want, list(out.received_splits)))
            _copy_result(out, output)
            return [output]
        return self._start("all_to_all_single", h, finish)

    alltoall_base = all_to_all_single

    def alltoall(self, output_tensors, input_tensors, opts=None):
        for i, t in enumerate(input_tensors):
            _check(t, "all_to_all input %d" % i)
        flat = torch.cat([t.reshape(-1) for t in input_tensors])
        splits = [t.numel() for t in input_tensors]
        h = _core.alltoall_async(flat.data_ptr(), _DTYPES[flat.dtype], [flat.numel()],
                                 _device(flat), splits, self._name("alltoall"), self._set_id,
                                 _stream(flat))

        def finish(out, _keep=flat):
            got = list(out.received_splits)
            want = [o.numel() for o in output_tensors]
            if got != want:
                raise RuntimeError("all_to_all: the output tensors hold %s elements, the "
                                   "ranks sent %s" % (want, got))
            recv = torch.empty(sum(got), dtype=flat.dtype, device=flat.device)
            _copy_result(out, recv)
            for o, part in zip(output_tensors, recv.split(got)):
                o.copy_(part.view(o.shape))
            return output_tensors
        return self._start("all_to_all", h, finish)

    # rooted collectives over the above ------------------------------------------------

    def reduce(self, tensors, opts=None):
        op = _op_code(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "reduce")
        t = tensors[0]
        _check(t, "reduce tensor")
        tmp = t.clone()
        h = _core.allreduce_async(tmp.data_ptr(), tmp.data_ptr(), _DTYPES[t.dtype], _shape(t),
                                  _device(t), self._name("reduce"), op, 1.0, 1.0,
                                  self._set_id, _stream(t))
        root = opts.rootRank if opts is not None else 0

        def finish(out):
            if self.rank() == root:
                t.copy_(tmp)
            return tensors
        return self._start("reduce", h, finish)

    def gather(self, output_tensors, input_tensors, opts=None):
        t = input_tensors[0]
        root = opts.rootRank if opts is not None else 0
        outs = output_tensors[0] if output_tensors else []

        def finish(out):
            if self.rank() == root:
                rows = torch.empty((self.size(), t.numel()), dtype=t.dtype, device=t.device)
                _copy_result(out, rows)
                for row, o in zip(rows, outs):
                    o.copy_(row.view(o.shape))
            return output_tensors
        return self._start("gather", self._allgather_handle(t), finish)

    def scatter(self, output_tensors, input_tensors, opts=None):
        out = output_tensors[0]
        _check(out, "scatter output")
        root = opts.rootRank if opts is not None else 0
        if self.rank() == root:
            rows = torch.stack([i.reshape(-1) for i in input_tensors[0]])
        else:
            rows = torch.empty((self.size(), out.numel()), dtype=out.dtype, device=out.device)
        h = _core.broadcast_async(rows.data_ptr(), _DTYPES[rows.dtype], list(rows.shape),
                                  _device(rows), int(root), self._name("scatter"),
                                  self._set_id, _stream(rows))

        def finish(_):
            out.copy_(rows[self.rank()].view(out.shape))
            return output_tensors
        return self._start("scatter", h, finish)

    # barrier, point to point ----------------------------------------------------------

    def barrier(self, opts=None):
        self._name("barrier")  # kolo names barriers itself; this sets the label
        return self._start("barrier", _core.barrier_async(self._set_id), lambda out: [])

    def _no_p2p(self, op):
        raise NotImplementedError(
            "kolo's torch.distributed backend does not implement %s (kolo negotiates "
            "collectives, not point-to-point messages); create a gloo group for it: "
            "dist.new_group(backend=\"gloo\")" % op)

    def send(self, tensors, dst, tag=0):
        self._no_p2p("send")

    def recv(self, tensors, src, tag=0):
        self._no_p2p("recv")

    def recv_anysource(self, tensors, tag=0):
        self._no_p2p("recv (any source)")

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        self.barrier().wait()

    # new groups (PyTorch asks the default group on every rank) -------------------------

    def new_group(self, ranks, timeout=None, backend=None, pg_options=None, group_name=None,
                  group_desc=None):
        ranks = sorted(int(r) for r in ranks)
        me = _core.rank()
        backend = str(dist.Backend(backend)) if backend else BACKEND_NAME
        if backend == BACKEND_NAME:
            if ranks != list(range(_core.size())) and not str(group_name).isdigit():
                # PyTorch names a group by a hash of its ranks only with
                # use_local_synchronization=True, where non-members never come here.
                raise NotImplementedError(
                    "kolo's torch.distributed backend: dist.new_group(%s, "
                    "use_local_synchronization=True) is not supported: kolo registers a "
                    "group with every rank taking part; leave the option out" % ranks)
            set_id = _register_set(ranks)
            if me not in ranks:
                return None
            pg = KoloProcessGroup(ranks.index(me), len(ranks), set_id, group_name)
            pg._set_group_name(group_name)
            pg._set_group_desc(group_desc or "undefined")
            return pg
        # Another backend beside kolo (e.g. gloo for send/recv): PyTorch's own path.
        store = _c10d._world.pg_map[self][1]
        pg, _ = _c10d._new_process_group_helper(
            len(ranks), ranks.index(me) if me in ranks else None, ranks, backend, store,
            group_name, backend_options=pg_options, timeout=timeout, group_desc=group_desc)
        if pg is dist.GroupMember.NON_GROUP_MEMBER:
            return None
        # PyTorch registers what new_group() returns; its helper already did.
        _c10d._unregister_process_group(group_name)
        tagged = _c10d._world.tags_to_pg.get("ptd:%s" % group_name, [])
        if pg in tagged:
            tagged.remove(pg)
        return pg


# --- creation ----------------------------------------------------------------------------

def _start_kolo(timeout):
    """Starts kolo's runtime (collective over the kolorun job). PyTorch's timeout becomes
    kolo's stall shutdown time unless KOLO_STALL_SHUTDOWN_TIME_SECONDS is set or the
    timeout is PyTorch's default (kolo's own default, 10 minutes, is then kept)."""
    if _core.is_initialized():
        return
    default = getattr(_c10d, "default_pg_timeout", None)
    if (timeout is not None and timeout != default
            and "KOLO_STALL_SHUTDOWN_TIME_SECONDS" not in os.environ):
        seconds = max(timeout.total_seconds(), 1.0)
        os.environ["KOLO_STALL_SHUTDOWN_TIME_SECONDS"] = "%g" % seconds
        # The warning naming the missing ranks comes half-way, unless set earlier.
        if float(os.environ.get("KOLO_STALL_CHECK_TIME_SECONDS", "60")) > seconds:
            os.environ["KOLO_STALL_CHECK_TIME_SECONDS"] = "%g" % (seconds / 2)
    _basics.init()


def _create(opts, backend_options=None):
    """PyTorch's creator for backend "kolo" (extended API): one KoloProcessGroup."""
    ranks = sorted(int(r) for r in (opts.global_ranks_in_group or []))
    is_world = not ranks
    _start_kolo(opts.timeout)
    size, rank = _core.size(), _core.rank()
    if is_world:
        if opts.group_size != size or opts.group_rank != rank:
            raise RuntimeError(
                "kolo's torch.distributed backend runs on kolo's job, in which this process "
                "is rank %d of %d, but torch.distributed was told rank %d of %d (RANK / "
                "WORLD_SIZE). Start the script with kolorun (kolorun -np N python "
                "script.py), which sets both." % (rank, size, opts.group_rank,
                                                 opts.group_size))
        ranks = list(range(size))
    group_name = str(opts.group_id)
    if ranks == list(range(size)):
        set_id = 0
    elif tuple(ranks) in _sets:
        set_id = _sets[tuple(ranks)]
    else:
        why = ("this PyTorch (%s) creates groups on their members only; use a PyTorch whose "
               "new_group() asks the default group on every rank (2.15 does)"
               % torch.__version__ if not _HAS_NEW_GROUP_HOOK else
               "it was made with use_local_synchronization=True, or the default group's "
               "backend is not kolo")
        raise NotImplementedError(
            "kolo's torch.distributed backend: dist.new_group(%s) needs every rank to take "
            "part in registering the group with kolo, but %s; or use backend=\"gloo\" for "
            "this group" % (ranks, why))
    return KoloProcessGroup(opts.group_rank, opts.group_size, set_id, group_name)


def _register():
    if BACKEND_NAME.upper() in getattr(dist.Backend, "_plugins", {}):
        return
    devices = ["cpu", "cuda"] if _core.cuda_built() else ["cpu"]
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True, devices=devices)


_register()


def autoload():
    """PyTorch's out-of-tree backend autoload (the ``torch.backends`` entry point of a
    pip-installed kolo) calls this during ``import torch``; importing this module has
    already registered the backend."""
