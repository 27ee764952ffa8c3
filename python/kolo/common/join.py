"""Starting kolo in processes that kolorun (mpirun) started, or that torchrun,
``torch.multiprocessing.spawn`` or any other launcher started with a rank, a size and a
store (an object with torch.distributed's ``set``, ``get`` and ``wait``): what
``dist.init_process_group(backend="kolo")`` calls. Part of the lifecycle, with
kolo.common.basics: one of the two modules besides the engine that call kolo._core.

Under kolorun every process is already one rank of an MPI job, and kolo starts on it.
Otherwise every process is an MPI singleton, and kolo joins them into one job with MPI's
dynamic processes (ops/join.h, through bindings/c10d_mpi.cc), driven from here through the
store:

 1. rank 0 starts Open MPI's ``ompi-server`` (Open MPI 4.1 connects singletons only through
    a server that all of them know) and puts its URI in the store;
 2. every rank initializes MPI with that URI; rank 0 opens a port and puts its name in the
    store;
 3. rank k connects when rank k-1 has joined (turn keys in the store: Open MPI does not
    pair connections that arrive at one port at once); every rank joined so far accepts
    it, and the new rank is merged in last, so MPI's ranks are torch.distributed's;
 4. rank 0 closes the port and stops the server; kolo starts on the joined communicator.

Every wait is bounded by the init timeout and ends with an error that names the rank
waited for. The cost, measured on 2 cores, is in docs/api-torch-distributed.md ("Starting
under torchrun"): about a second at 2 ranks, several at 8.
"""
import atexit
import datetime
import os
import selectors
import shutil
import subprocess
import sys
import threading
import time

from kolo import _core
from kolo.common import basics as _basics
from kolo.common import launch_checks as _checks
from kolo.common import process_sets as _ps

_KEY = "kolo/start/"
# What to run instead when joining is impossible, for the errors.
_KOLORUN = "start the job with kolorun instead: kolorun -np %d python script.py"


def start(store, rank, size, timeout):
    """Starts kolo's runtime over torch.distributed's ``size`` ranks (this one ``rank``),
    once every process has claimed a rank of its own in the store (launch_checks)."""
    if _core.is_initialized():
        return
    seconds = timeout.total_seconds() if timeout is not None else 1800.0
    deadline = time.monotonic() + seconds
    if size > 1:
        _checks.claim_ranks(store, rank, size, seconds, deadline,
                            lambda what: _fail(rank, size, what))
    if _checks.launched_by_mpi() or size == 1:
        _basics._start()  # torch.distributed's job is MPI's, or this one process
        return
    if _core.MPI_ABI != "ompi":
        # Singletons join only through Open MPI's ompi-server; Hydra has no such server
        # that a process no mpiexec started can reach.
        raise RuntimeError("kolo could not join the ranks of this torch.distributed job "
                           "(rank %d of %d): ranks that another launcher started join "
                           "through Open MPI's ompi-server, and this process runs on an MPI "
                           "of the MPICH family (kolo._core's MPI_ABI %r); %s"
                           % (rank, size, _core.MPI_ABI, _KOLORUN % size))
    _Join(store, rank, size, seconds, deadline).run()
    # kolo.init(comm=...) with the joined communicator, which is no mpi4py object.
    _core.init([], _core.join_comm_handle())
    _basics._reset_run()
    _ps._finish_init([], [], _core.size())


def _fail(rank, size, what):
    return RuntimeError("kolo could not join the ranks of this torch.distributed job "
                        "(rank %d of %d): %s" % (rank, size, what))


class _Join:
    def __init__(self, store, rank, size, seconds, deadline):
        self.store, self.rank, self.size = store, rank, size
        self.seconds, self.deadline = seconds, deadline

    def left(self):
        return datetime.timedelta(seconds=max(self.deadline - time.monotonic(), 0.001))

    def fail(self, what):
        return _fail(self.rank, self.size, what)

    def wait_key(self, key, who):
        try:
            self.store.wait([_KEY + key], self.left())
        except Exception as e:  # the store's timeout (DistStoreError) or a lost store
            raise self.fail("%s never came within the init timeout (%g s): %s"
                            % (who, self.seconds, str(e).splitlines()[0])) from None
        return self.store.get(_KEY + key).decode()

    def run(self):
        server = _Server.start(self) if self.rank == 0 else None
        try:
            if server:
                self.store.set(_KEY + "uri", server.uri)
            uri = self.wait_key("uri", "rank 0's ompi-server address")
            _core.join_init_mpi(uri)
            if self.rank == 0:
                port = _core.join_open_port()
                self.store.set(_KEY + "port", port)
            else:
                port = self.wait_key("port", "rank 0's MPI port")
                self.wait_key("turn%d" % self.rank, "rank %d's turn (rank %d did not join)"
                              % (self.rank, self.rank - 1))
            self.connect_and_accept(port)
        finally:
            if server:
                server.stop()
        if _core.join_rank() != self.rank or _core.join_size() != self.size:
            raise self.fail("the joined communicator has this process as rank %d of %d"
                            % (_core.join_rank(), _core.join_size()))
        atexit.register(_finalize)

    def connect_and_accept(self, port):
        """Connects (ranks > 0) and accepts the later ranks, in a thread: MPI's calls cannot
        be interrupted, so the wait for them is bounded here."""
        failed = []

        def steps():
            try:
                if self.rank > 0:
                    _core.join_connect(port)
                if self.rank + 1 < self.size:
                    self.store.set(_KEY + "turn%d" % (self.rank + 1), "")
                while _core.join_size() < self.size:
                    _core.join_accept(port)
                if self.rank == 0:
                    _core.join_close_port(port)
            except Exception as e:  # handed to the caller's thread
                failed.append(e)

        thread = threading.Thread(target=steps, name="kolo-join", daemon=True)
        thread.start()
        thread.join(self.left().total_seconds())
        if thread.is_alive():
            _abandoned.append(thread)  # blocked in MPI: no MPI_Finalize at exit
            joined = _core.join_size()
            waiting = "to connect" if self.rank > 0 and joined == 1 else "to accept rank %d" % joined
            raise self.fail("still waiting %s after %d of %d ranks joined, at the init "
                            "timeout (%g s): did rank %d start, and does it call "
                            "init_process_group(backend=\"kolo\")?"
                            % (waiting, joined, self.size, self.seconds, joined))
        if failed:
            raise self.fail(str(failed[0])) from failed[0]


class _Server:
    """Rank 0's ompi-server, from the join's start to its end."""

    def __init__(self, process, uri):
        self.process, self.uri = process, uri

    @classmethod
    def start(cls, join):
        path = shutil.which("ompi-server")
        if path is None:
            raise join.fail("Open MPI's ompi-server is not on PATH (Debian: openmpi-bin); "
                            + _KOLORUN % join.size)
        # "-r +": the URI on stderr, unbuffered (on stdout it comes only at exit).
        process = subprocess.Popen([path, "--no-daemonize", "-r", "+"], stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        line = cls._first_line(process, join)
        if not line:
            process.kill()
            err = process.communicate()[1]
            raise join.fail("%s gave no address (exit status %s): %s; %s"
                            % (path, process.returncode, err.decode(errors="replace").strip(),
                               _KOLORUN % join.size))
        return cls(process, line)

    @staticmethod
    def _first_line(process, join):
        sel = selectors.DefaultSelector()
        sel.register(process.stderr, selectors.EVENT_READ)
        data = b""
        while b"\n" not in data and sel.select(join.left().total_seconds()):
            chunk = os.read(process.stderr.fileno(), 4096)
            if not chunk:
                break
            data += chunk
        sel.close()
        return data.split(b"\n")[0].decode().strip() if b"\n" in data else ""

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
        try:
            self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()


# Join threads still blocked in MPI after a timeout.
_abandoned = []


# How long a process at exit waits for MPI_Finalize.
_FINALIZE_SECONDS = 10.0


def _finalize():
    """At exit, before kolo's own atexit shutdown (registered earlier, run later): kolo
    stops, then MPI, which kolo did not initialize here. MPI_Finalize of joined processes
    waits for every one of them to finalize too; a rank that ended without it (killed, or
    ended by os._exit, as PyTorch's test harness ends a skipped test's processes) would
    hold the others at exit for good, so the wait is bounded and the process exits
    without it, saying so."""
    _basics.shutdown()
    if _abandoned:
        return
    thread = threading.Thread(target=_core.join_finalize, name="kolo-finalize", daemon=True)
    thread.start()
    thread.join(_FINALIZE_SECONDS)
    if thread.is_alive():
        sys.stderr.write("kolo: MPI_Finalize did not return within %g s (another rank of "
                         "the joined job ended without it); exiting without it\n"
                         % _FINALIZE_SECONDS)
