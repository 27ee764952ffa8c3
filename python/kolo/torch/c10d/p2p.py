"""Point-to-point messages of kolo's torch.distributed backend (see the package's
__init__.py): send, recv (from one rank or from any), isend/irecv (and so
batch_isend_irecv, PyTorch's loop over them) and monitored_barrier.

They go straight to MPI (the engine's p2p_comm: ops/p2p.h), outside kolo's negotiation,
on two communicators of each group's own (the user's messages, monitored_barrier's); how
they wait, time out and fail: docs/api-torch-distributed.md, "Point-to-point"."""
import threading
import time

import torch
import torch.distributed as dist

from kolo.common import engine as _engine
from kolo.torch.c10d.work import _PREFIX, _Work, _seconds


def _describe(tensor):
    return "a %s tensor of shape %s" % (str(tensor.dtype).replace("torch.", ""),
                                        list(tensor.shape))


def _staged(tensor, what, recv):
    """(buffer, finish): a contiguous CPU tensor whose bytes MPI moves, and what to do once
    a receive into it finished (None when the buffer is the tensor itself). Any dtype: a
    message is the tensor's bytes. CUDA tensors go through host memory."""
    if (isinstance(tensor, torch.Tensor) and tensor.is_cpu and tensor.layout == torch.strided
            and tensor.is_contiguous()):
        return tensor, None  # the common case, checked first: a message costs microseconds
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("%s must be a torch.Tensor, got %s" % (what, type(tensor).__name__))
    if tensor.layout != torch.strided:
        raise ValueError(_PREFIX + "%s is %s; kolo sends dense tensors" % (what, tensor.layout))
    if tensor.device.type == "cpu" and tensor.is_contiguous():
        return tensor, None
    if not recv:
        return tensor.detach().cpu().contiguous(), None  # a copy: the caller may reuse it
    buffer = torch.empty(tensor.shape, dtype=tensor.dtype)

    def finish():
        with torch.no_grad():
            tensor.copy_(buffer)
    return buffer, finish


# Requests whose Work was dropped before MPI finished with them, with the tensors they read
# or write: kept alive until they finish (looked at whenever a new message starts).
_orphans = []
_orphans_lock = threading.Lock()


def _sweep_orphans():
    if not _orphans:  # the common case, without the lock
        return
    with _orphans_lock:
        _orphans[:] = [(r, keep) for r, keep in _orphans if not r.test()]


class P2PWork(_Work):
    """One send or receive. ``wait()`` is bounded by its ``timeout`` argument, else by the
    process group's timeout; a receive from any rank tells its sender (``_source_rank()``,
    a rank of the group)."""

    _settled = False
    _future = None
    # One lock for every P2PWork (settling one is short): a Work costs no lock of its own,
    # as a small message costs about a microsecond in MPI.
    _lock = threading.Lock()

    def __init__(self, request, tag, keep, finish, timeout):
        _Work.__init__(self)
        self._request = request
        self._tag = tag
        self._keep = keep  # (buffer, the caller's tensor): MPI's until it finished
        self._finish_recv = finish
        self._timeout = timeout  # seconds
        self._result = []

    @property
    def _what(self):
        """What the message is, for errors ("recv from rank 1 (tag 0) into a float32 tensor
        of shape [3]"): made only when one is raised, not for every message."""
        request, tensor = self._request, self._keep[1]
        if request.is_recv:
            peer = "any rank" if request.peer < 0 else "rank %d" % request.peer
            return "recv from %s (tag %d) into %s" % (peer, self._tag, _describe(tensor))
        return "send to rank %d (tag %d) of %s" % (request.peer, self._tag, _describe(tensor))

    def _settle(self):
        """Once the request finished: its error, or the received bytes copied out."""
        with self._lock:
            if self._settled:
                return
            self._settled = True
            error = self._request.error
            if error is not None:
                self._error = RuntimeError(_PREFIX + "%s: %s" % (self._what, error))
            elif self._finish_recv is not None:
                self._finish_recv()
            self._keep = None

    def wait(self, timeout=None):
        limit = _seconds(timeout) if timeout else self._timeout
        if not self._settled and not self._request.wait(limit):
            if self._request.is_recv and self._request.cancel():
                self._error = RuntimeError(
                    _PREFIX + "Timed out after %g s: %s got no message (the process group's "
                    "timeout; wait(timeout=...) sets another)" % (limit, self._what))
                with self._lock:
                    self._settled, self._keep = True, None
            elif not self._request.is_recv:
                raise RuntimeError(
                    _PREFIX + "Timed out after %g s: %s was not received in that time (its "
                    "peer did not post a matching recv); MPI still holds the message, which "
                    "a later matching recv gets" % (limit, self._what))
        self._settle()
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self):
        if self._request.test():
            self._settle()
            return True
        return False

    def _source_rank(self):
        self.wait()
        return self._request.source if self._request.is_recv else self._request.peer

    source_rank = _source_rank

    def get_future(self):
        """Completed (with the tensor) by a thread that waits, as for kolo's collectives."""
        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                threading.Thread(target=self._complete_future, daemon=True,
                                 name="kolo-c10d-p2p").start()
            return self._future

    def _complete_future(self):
        try:
            self.wait()
        except Exception as e:  # noqa: B902  (the future carries it)
            self._future.set_exception(e)
        else:
            self._future.set_result(self._result)

    def __del__(self):
        keep = getattr(self, "_keep", None)
        if keep is not None and not self._request.test():
            with _orphans_lock:
                _orphans.append((self._request, keep))


class P2PChannels:
    """A process group's two communicators (the user's messages, monitored_barrier's), made
    when the group is: collective over its members. Where they cannot be made (MPI without
    MPI_THREAD_MULTIPLE, kolo on a communicator other than MPI_COMM_WORLD), every
    point-to-point call raises NotImplementedError with the reason."""

    def __init__(self, global_ranks, timeout):
        self.timeout = timeout or dist.distributed_c10d.default_pg_timeout
        self._timeout_seconds = _seconds(self.timeout)
        self._monitor_calls = 0
        self._error = None
        self._user = self._monitor = None
        try:
            self._user = _engine.p2p_comm(global_ranks)
            self._monitor = _engine.p2p_comm(global_ranks)
        except RuntimeError as e:
            self._error = str(e)

    def comm(self, what, monitor=False):
        if self._error is not None:
            raise NotImplementedError(_PREFIX + "%s is not available here: %s"
                                      % (what, self._error))
        comm = self._monitor if monitor else self._user
        if comm is None:
            raise RuntimeError(_PREFIX + "%s: the process group was destroyed" % what)
        return comm

    def free(self):
        for comm in (self._user, self._monitor):
            if comm is not None:
                comm.free()
        self._user = self._monitor = None
        if self._error is None:
            self._error = "the process group was destroyed"

    # send and recv ----------------------------------------------------------------------

    def start(self, tensors, peer, tag, recv):
        """isend (recv=False) or irecv (peer -1: from any rank) of ``tensors[0]``."""
        op = "recv" if recv else "send"
        if len(tensors) != 1:
            raise ValueError(_PREFIX + "%s takes one tensor, got %d" % (op, len(tensors)))
        comm = self.comm(op)
        tensor = tensors[0]
        buffer, finish = _staged(tensor, "the %s tensor" % op, recv)
        tag, peer = int(tag), int(peer)
        _sweep_orphans()
        nbytes = buffer.numel() * buffer.element_size()
        start = comm.irecv if recv else comm.isend
        request = start(buffer.data_ptr(), nbytes, peer, tag)
        return P2PWork(request, tag, (buffer, tensor), finish, self._timeout_seconds)

    # monitored_barrier ----------------------------------------------------------------------

    def monitored_barrier(self, rank, size, timeout, wait_all_ranks):
        """As gloo's (docs/api-torch-distributed.md, "monitored_barrier"): every rank but 0
        tells rank 0 it arrived and waits for its answer; a call's number on this group is
        its message tag."""
        comm = self.comm("monitored_barrier", monitor=True)
        seconds = max(_seconds(timeout if timeout is not None else self.timeout), 0.0)
        self._monitor_calls += 1
        tag = self._monitor_calls % (comm.tag_ub + 1)
        if rank != 0:
            return self._monitored_member(comm, rank, tag, seconds)
        start = time.monotonic()
        tokens = [torch.zeros(1, dtype=torch.uint8) for _ in range(size)]
        arrivals = {r: comm.irecv(tokens[r].data_ptr(), 1, r, tag) for r in range(1, size)}
        try:
            missing = _missing_ranks(arrivals, start + seconds, wait_all_ranks)
        finally:
            for request in arrivals.values():
                request.cancel()  # the ones that did not arrive
        ms = int(round(seconds * 1000))
        if missing and missing[0] == 0:
            raise RuntimeError(
                "[Rank 0]: Rank 0 timed out in monitoredBarrier after %d ms: its time ran out "
                "before rank(s) %s arrived" % (ms, ", ".join(str(r) for r in missing[1:])))
        if missing and wait_all_ranks:
            raise RuntimeError("[Rank 0]: Ranks %s failed to pass monitoredBarrier in %d ms"
                               % (", ".join(str(r) for r in missing), ms))
        if missing:
            raise RuntimeError("[Rank 0]: Rank %d failed to pass monitoredBarrier in %d ms"
                               % (missing[0], ms))
        answers = [comm.isend(tokens[r].data_ptr(), 1, r, tag) for r in range(1, size)]
        for request in answers:
            request.wait(max(start + seconds - time.monotonic(), 1.0))  # small: sent at once
        return None

    @staticmethod
    def _monitored_member(comm, rank, tag, seconds):
        start = time.monotonic()
        arrived, answer = torch.zeros(1, dtype=torch.uint8), torch.zeros(1, dtype=torch.uint8)
        sent = comm.isend(arrived.data_ptr(), 1, 0, tag)
        got = comm.irecv(answer.data_ptr(), 1, 0, tag)
        ok = got.wait(seconds) and got.error is None
        if not ok:
            got.cancel()
        sent.wait(max(start + seconds - time.monotonic(), 1.0))  # small: sent at once
        if not ok:
            raise RuntimeError(
                "Rank %d successfully reached monitoredBarrier, but received errors while "
                "waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank "
                "(kolo: rank 0 did not answer within %g s)" % (rank, seconds))
        return None


def _missing_ranks(arrivals, deadline, wait_all_ranks):
    """The ranks whose arrival did not come by ``deadline``, in rank order; fail-fast
    (without ``wait_all_ranks``) stops at the first. A leading 0 says that rank 0's time
    ran out before it could wait for the ranks that follow (gloo's "Rank 0 timed out")."""
    missing = []
    for r in sorted(arrivals):
        request = arrivals[r]
        left = deadline - time.monotonic()
        if request.test() and request.error is None:
            continue
        if left <= 0 and not wait_all_ranks and not missing:
            return [0] + [q for q in sorted(arrivals) if q >= r and not arrivals[q].test()]
        if not request.wait(max(left, 0.0)) or request.error is not None:
            missing.append(r)
            if not wait_all_ranks:
                return missing
    return missing
