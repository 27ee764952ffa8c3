"""The Work objects and their completion for kolo's torch.distributed backend (see the
package's __init__.py): a pool of threads waits on kolo's handles, marks each Work done and
completes its future, except where the caller waits first (the blocking fast path below).
Tensors reach the engine (kolo.common.engine) through the reader of kolo.torch._tensors."""
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
# This package's modules: frames to skip when looking for the backend's caller.
_HERE = os.path.dirname(__file__) + os.sep


def _is_backend_file(path):
    return path.startswith(_HERE)


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


def caller_waits(opts):
    """Whether the caller waits for the Work as soon as it has it: torch.distributed's
    functions say ``opts.asyncOp = async_op`` (PyTorch >= 2.7; the options' default, and
    what DDP's reducer passes, is True). Such a call is kolo.torch's blocking call: the core
    does not wake its background thread, and the caller's thread runs the round
    (``caller_waits``) and waits on kolo's handle itself (KoloWork.wait), with no hand-off
    to a completion thread."""
    return getattr(opts, "asyncOp", True) is False


class KoloWork(dist._Work):
    """One operation: ``wait()`` blocks until kolo finished it (and raises its error, the
    coordinator's text naming ranks); ``get_future()`` is completed with its output tensors
    by the thread that waited on kolo's handle, or by the first thread that waits for it.

    ``handle`` and ``finish`` (the function of the operation's Output that makes the
    Work's result): whoever claims the Work first waits on the handle. A completion thread
    claims it when it starts (:meth:`start`), unless the caller waits at once
    (:func:`caller_waits`): then the caller's ``wait()`` claims it, or, when the Work is
    dropped or its future asked for first, a completion thread."""

    def __init__(self, what, label, handle, finish, timeout=None):
        super().__init__()
        self._what = what
        self._timeout = timeout  # bounds wait() without a timeout of its own (barriers)
        self.label = label  # the parent name of operations its callbacks start
        self.children = 0
        self._handle = handle
        self._make_result = finish
        self._future = None  # made when get_future() asks for it
        self._kolo_done = threading.Event()
        self._lock = threading.Lock()
        self._claimed = False
        self._future_claimed = False
        self._error = None
        self._result = None
        self.from_cpp = False
        self._cpp_future = None

    def start(self, caller_waits=False):
        """Hands the Work to a completion thread, unless its caller waits for it at once."""
        if not caller_waits:
            self._hand_over()
        return self

    def _claim(self):
        """True for the one thread that is to wait on kolo's handle."""
        with self._lock:
            claimed, self._claimed = self._claimed, True
        return not claimed

    def _hand_over(self):
        if self._claim():
            _completer.submit(self)

    def _settle(self, out, error):
        """Marks the Work done with the result made of kolo's Output, or the error; the
        future is completed afterwards, by whichever thread comes first."""
        if error is None:
            try:
                self._result = self._make_result(out)
            except Exception as e:  # noqa: B902  (a result that cannot be made is the error)
                error = e
        self._error = error
        self._kolo_done.set()

    def _wait_here(self):
        """The blocking fast path: this thread waits on kolo's handle (and runs kolo's round,
        KOLO_CALLER_RUNS). A signal that interrupts it hands the Work to a completion
        thread, so that a later wait() finds it done."""
        try:
            out = _engine.wait(self._handle)
        except Exception as e:  # noqa: B902  (the operation's error belongs to the Work)
            self._settle(None, e)
            return
        except BaseException:
            _completer.submit(self)
            raise
        self._settle(out, None)

    def _complete_future(self):
        """Completes the future once, in whichever thread comes first; returns once it is
        done (PyTorch marks a future done before it runs its callbacks). A future nobody
        asked for yet is completed when it is asked for."""
        with self._lock:
            if self._future is None:
                return
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
        if not limit and self._claim():
            self._wait_here()
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
        self._hand_over()  # the future's callbacks run when kolo is done, waited for or not
        with self._lock:
            if self._future is None:
                self._future = _KoloFuture(self)
        if self._kolo_done.is_set():
            self._complete_future()
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

    def __del__(self):
        # Dropped before anyone waited on kolo's handle (the earlier Works of a coalesced
        # call, a blocking call that raised before its wait): the handle is still waited
        # for, and the result written where it belongs.
        if getattr(self, "_claimed", True):
            return
        try:
            KoloWork(self._what, self.label, self._handle, self._make_result).start()
        except Exception:  # noqa: B902  (the interpreter is ending: nothing waits any more)
            pass


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

    def submit(self, work):
        """Waits on ``work``'s handle in a pool thread (the caller has claimed it)."""
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    self.MAX_THREADS, thread_name_prefix="kolo-c10d")
        self._pool.submit(self._run, work)

    @staticmethod
    def _run(work):
        try:
            out = _engine.wait(work._handle)
        except BaseException as e:  # noqa: B902  (every error belongs to the Work)
            work._settle(None, e if isinstance(e, Exception) else RuntimeError(str(e)))
        else:
            work._settle(out, None)
        work._complete_future()


_completer = _Completer()

