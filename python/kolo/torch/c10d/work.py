"""The Work objects and their completion for kolo's torch.distributed backend (see the
package's __init__.py): a pool of threads waits on kolo's handles, marks each Work done and
completes its future, except where the caller waits first (the blocking fast path below)."""
import concurrent.futures
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

from kolo.common import engine as _engine

_PREFIX = "kolo's torch.distributed backend: "
_TORCH_DISTRIBUTED_DIR = os.path.dirname(dist.distributed_c10d.__file__) + os.sep
# This package's modules: frames to skip when looking for the backend's caller.
_HERE = os.path.dirname(__file__) + os.sep


def _seconds(timeout):
    """A timeout given as a timedelta or in seconds, in seconds."""
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


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
    work as the parent of the operations they start, whichever thread runs them, so those
    operations get the same names on every rank. wait() completes the work's future in the
    waiting thread when kolo has finished but the completion thread is busy (e.g. in a
    callback that waits)."""

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


def _called_from_cpp():
    """Whether this package's collective method was called by PyTorch's C++ (DDP's reducer,
    through the ProcessGroup trampoline) rather than by torch.distributed's Python
    functions, which hand our Work to Python code."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_HERE):
        frame = frame.f_back
    return frame is None or not frame.f_code.co_filename.startswith(_TORCH_DISTRIBUTED_DIR)


def caller_waits(opts):
    """Whether the caller waits for the Work as soon as it has it: torch.distributed's
    functions say ``opts.asyncOp = async_op`` (PyTorch >= 2.7; the options' default, and
    what DDP's reducer passes, is True). Such a call takes kolo's blocking fast path."""
    return getattr(opts, "asyncOp", True) is False


class _Work(dist._Work):
    """What the backend's Works share: ``_error`` once one failed, ``_result`` once done."""
    _error = None
    _result = None

    def is_success(self):
        return self.is_completed() and self._error is None

    def exception(self):
        return self._error

    def result(self):
        self.wait()
        return self._result


class KoloWork(_Work):
    """One operation: ``wait()`` blocks until kolo finished it (and raises its error, the
    coordinator's text naming ranks); ``get_future()`` is completed with its output tensors
    by the thread that waited on kolo's handle, or by the first thread that waits for it.

    ``handle`` and ``finish`` (the function of the operation's Output that makes the
    Work's result): whoever claims the Work first waits on the handle. ``handle`` may be
    the Output itself, of an operation that the caller's thread waited for in the call that
    started it (the blocking fast path). A completion thread
    claims it when it starts (:meth:`start`), unless the caller waits at once
    (:func:`caller_waits`): then the caller's ``wait()`` claims it, or, when the Work is
    dropped or its future asked for first, a completion thread."""

    def __init__(self, what, label, handle, finish, timeout=None):
        super().__init__()
        self._what = what
        self._timeout = timeout  # bounds wait() without a timeout of its own (barriers)
        # Set when wait() gave up on a timeout: the operation stays pending in kolo, and a
        # barrier left so is the rank's next barrier on its set (group.py), even if the
        # other ranks' barriers complete it before this rank asks for the next one.
        self.left_on_timeout = False
        self.label = label  # the parent name of operations its callbacks start
        self.children = 0
        self._handle = handle
        self._make_result = finish
        self._future = None  # made when get_future() asks for it
        self._kolo_done = threading.Event()
        self._lock = threading.Lock()
        self._claimed = False
        self._future_claimed = False
        self.from_cpp = False
        self._cpp_future = None

    def start(self, caller_waits=False):
        """Hands the Work to a completion thread, unless its caller waits for it at once (or
        a thread has claimed it already)."""
        if not caller_waits and self._claim():
            _pool.submit(self._wait_handle, True)
        return self

    def _claim(self):
        """True for the one thread that is to wait on kolo's handle."""
        with self._lock:
            claimed, self._claimed = self._claimed, True
        return not claimed

    def _wait_handle(self, in_pool):
        """Waits on kolo's handle and marks the Work done with the result made of kolo's
        Output, or the error; a completion thread then completes the future. In the
        caller's thread (the blocking fast path, which runs kolo's round: KOLO_CALLER_RUNS)
        a signal that interrupts the wait hands the Work to a completion thread, so that a
        later wait() finds it done."""
        handle = self._handle  # the Output itself when the core waited already
        try:
            out = _engine.wait(handle) if type(handle) is int else handle
            self._result = self._make_result(out)
        except Exception as e:  # noqa: B902  (the operation's error belongs to the Work)
            self._error = e
        except BaseException as e:
            if not in_pool:
                _pool.submit(self._wait_handle, True)
                raise
            self._error = RuntimeError(str(e))
        self._kolo_done.set()
        if in_pool:
            self._complete_future()

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
            self._wait_handle(False)
        seconds = _seconds(limit) if limit else 0
        if not self._kolo_done.wait(seconds if seconds > 0 else None):
            self.left_on_timeout = True
            raise RuntimeError(
                _PREFIX + "Timed out after %g s waiting for %s (%s); it stays pending in kolo, "
                "whose stall inspector names the ranks that are missing"
                % (seconds, self._what, "wait(timeout=...)" if timeout else
                   "the process group's timeout"))
        self._complete_future()
        if self._error is not None:
            raise self._error
        return True

    def get_future(self):
        self.start()  # the future's callbacks run when kolo is done, waited for or not
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
                self._cpp_future = torch.futures.Future.then(self._future,
                                                             lambda fut: fut.value())
            return self._cpp_future
        return self._future

    def is_completed(self):
        return self._kolo_done.is_set()

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


# The completion threads, each waiting on one kolo handle. Not one thread in the order the
# handles were started: operations started from callbacks (PowerSGD's) reach kolo in
# different orders on different ranks, and a callback may block until another collective
# finishes, so no handle may wait behind another. The executor makes a thread only when
# all are busy; past 64 handles waited on at once, new ones wait for a free thread.
_pool = concurrent.futures.ThreadPoolExecutor(64, thread_name_prefix="kolo-c10d")
