"""The Work objects and their completion for kolo's torch.distributed backend (see c10d.py):
a pool of threads waits on kolo's handles, marks each Work done and completes its future;
tensors reach the engine (kolo.common.engine) through the reader of kolo.torch._tensors."""
import concurrent.futures
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from kolo.common import engine as _engine
from kolo.torch import _tensors

_TORCH_DISTRIBUTED_DIR = os.path.dirname(dist.distributed_c10d.__file__) + os.sep
# This package's backend modules (c10d.py, _c10d_*.py): frames to skip in _called_from_cpp.
_HERE = os.path.dirname(__file__) + os.sep


def _is_backend_file(path):
    name = path[len(_HERE):] if path.startswith(_HERE) else ""
    return name == "c10d.py" or name.startswith("_c10d_")


# --- tensors ---------------------------------------------------------------------------

_PREFIX = "kolo's torch.distributed backend: "


def _check(tensor, what):
    """The reader's checks (kolo.torch._tensors), for a tensor used before the collective
    that reads it."""
    _tensors.READER.check(tensor, _PREFIX + what)


def _flat(tensor):
    """A tensor as the backend hands it to kolo: kolo has no 0-d tensors here, one
    element (a view)."""
    return tensor if tensor.dim() > 0 else tensor.view(1)


def _copy_result(out, dest):
    """Copies a finished kolo operation's output into ``dest`` (any layout)."""
    _tensors.copy_into(out, dest, "kolo's torch.distributed backend")


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
    while frame is not None and _is_backend_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame is None or not frame.f_code.co_filename.startswith(_TORCH_DISTRIBUTED_DIR)


class KoloWork(dist._Work):
    """One operation: ``wait()`` blocks until kolo finished it (and raises its error, the
    coordinator's text naming ranks); ``get_future()`` is completed with its output tensors
    by the completion thread, or by the first thread that waits for it."""

    def __init__(self, what, label, timeout=None):
        super().__init__()
        self._what = what
        self._timeout = timeout  # bounds wait() without a timeout of its own (barriers)
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
        limit = timeout if timeout else self._timeout
        seconds = limit.total_seconds() if isinstance(limit, datetime.timedelta) else 0
        if not self._kolo_done.wait(seconds if seconds > 0 else None):
            raise RuntimeError(
                "kolo's torch.distributed backend: Timed out after %g s waiting for %s (%s); it "
                "stays pending in kolo, whose stall inspector names the ranks that are missing"
                % (seconds, self._what, "wait(timeout=...)" if timeout else
                   "the process group's timeout"))
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
            result = finish(_engine.wait(handle))
        except BaseException as e:  # noqa: B902  (every error belongs to the Work)
            work._finish(None, e if isinstance(e, Exception) else RuntimeError(str(e)))
        else:
            work._finish(result, None)
        work._complete_future()


_completer = _Completer()

