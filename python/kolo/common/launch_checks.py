"""Checks, before kolo starts, against the ways a job of several processes runs wrong
without a word: each ends in one line, on every process, naming the cause.

**Separate copies** (``refuse_separate_copies``, called by ``init()``). A process that no
MPI launcher started (no kolorun, mpirun, or srun with PMI) starts kolo as a job of its
own: right for one process, silently wrong for one of several. Two launches make several
without MPI:

- another launcher's processes (torchrun, a loop over hosts): ``WORLD_SIZE`` > 1 says so;
- a SageMaker training job whose estimator has no MPI distribution: SageMaker runs the
  script once on every host, unconnected (``SM_HOSTS``, or resourceconfig.json on every
  host, lists the hosts).

Their processes would train as many separate copies of the model; ``init()`` refuses.

**Rank claims** (``claim_ranks``, called by the torch.distributed backend before kolo
starts). Processes that take their rank and world size from the environment (torchrun's
``RANK``/``WORLD_SIZE``, Lightning's ``NODE_RANK``/``LOCAL_RANK``) can be given the same
rank twice, or different world sizes, and every process would then wait for ranks that
never come. Through the job's torch.distributed store (``compare_set``, ``add``,
``wait``), every process of the job:

 1. claims its rank: the first process to write ``rank/R`` holds it; a second one reads the
    first one's description instead and has found a duplicate;
 2. compares its world size with the first one written to ``size``;
 3. on a problem, writes the verdict (the first verdict written is the one every process
    reports); else counts itself in ``arrived``, and the process that completes the count
    writes the verdict "ok";
 4. waits for the verdict (bounded by the init timeout; a rank that never came is named);
 5. on a bad verdict, waits a moment for every other rank's claimant to have read it (its
    ``read/R`` key), so that the process holding the store does not take it away before
    them, and raises it.
"""
import datetime
import json
import os
import socket
import time

# Set by a launcher that made this process a rank of an MPI job (mpirun / kolorun, Slurm
# with PMI or PMIx, Hydra): kolo starts on MPI_COMM_WORLD.
_MPI_LAUNCH_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "KOLORUN_RENDEZVOUS")
# Where SageMaker describes the training job's hosts, on every host of the job.
RESOURCE_CONFIG = "/opt/ml/input/config/resourceconfig.json"
# The variables that rank and world size are read from, as named in the messages.
_RANK_VARS = ("RANK", "GROUP_RANK", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")
_KEY = "kolo/claim/"
# How long a process with a bad verdict waits for the others to have read it.
_READ_SECONDS = 5.0


def launched_by_mpi():
    return any(v in os.environ for v in _MPI_LAUNCH_VARS)


# --- separate copies ---------------------------------------------------------------------

def refuse_separate_copies():
    """Raises RuntimeError when this process, started by no MPI launcher, is one of several
    that kolo would run as separate one-process jobs."""
    if launched_by_mpi():
        return
    world_size = _int(os.environ.get("WORLD_SIZE"))
    if world_size is not None and world_size > 1:
        rank = os.environ.get("RANK")
        raise RuntimeError(
            "kolo: WORLD_SIZE=%d%s says this process is one of %d, but no MPI launcher "
            "started it (neither kolorun nor mpirun), so kolo would run it alone and the %d "
            "processes would train %d separate copies of the model; start them with kolorun "
            "(kolorun -np %d python script.py), or, with PyTorch, join them with "
            "dist.init_process_group(backend=\"kolo\") instead of kolo's init()"
            % (world_size, " (RANK=%s)" % rank if rank is not None else "", world_size,
               world_size, world_size, world_size))
    hosts = sagemaker_hosts()
    if len(hosts) > 1:
        gpus = _int(os.environ.get("SM_NUM_GPUS")) or 0
        per_host = ("%d}} (one process per GPU; SM_NUM_GPUS=%d)" % (gpus, gpus) if gpus > 0
                    else "1}} (on GPU instances: one per GPU)")
        shown = ", ".join(hosts[:4]) + (", ..." if len(hosts) > 4 else "")
        raise RuntimeError(
            "kolo: SageMaker started this script on each of %d hosts (%s) without MPI, so "
            "this job would train %d separate copies of the model; set the estimator's "
            "distribution={\"mpi\": {\"enabled\": True, \"processes_per_host\": %s, or "
            "make kolorun the entry point" % (len(hosts), shown, len(hosts), per_host))


def sagemaker_hosts():
    """The hosts of this SageMaker training job ([] elsewhere): SM_HOSTS (a JSON list, set
    by SageMaker's training toolkit), else resourceconfig.json's "hosts", which every host
    of a job has, whatever its container runs."""
    listed = _host_list(os.environ.get("SM_HOSTS"))
    if listed is not None:
        return listed
    try:
        with open(RESOURCE_CONFIG) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return []
    listed = _host_list(config.get("hosts") if isinstance(config, dict) else None)
    return listed if listed is not None else []


def _host_list(value):
    """A list of host names from a JSON text or a parsed value; None when it is none."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if isinstance(value, list) and all(isinstance(h, str) for h in value):
        return value
    return None


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


# --- rank claims -------------------------------------------------------------------------

def claim_ranks(store, rank, size, seconds, deadline, fail):
    """Claims ``rank`` of ``size`` in ``store`` for this process and checks that every
    other process of the job claimed a rank of its own, with the same world size, by
    ``deadline`` (time.monotonic(), ``seconds`` after init began). Raises RuntimeError
    naming both processes of a duplicate rank or of a disagreeing size, on every process;
    ``fail(text)`` makes the error for a rank that never came or a store that went away."""
    _Claims(store, rank, size, seconds, deadline, fail).run()


def _describe_process():
    """This process as others name it: 'pid 12 on host a (RANK=0, WORLD_SIZE=2)'."""
    shown = ["%s=%s" % (v, os.environ[v]) for v in _RANK_VARS if v in os.environ]
    return "pid %d on host %s (%s)" % (os.getpid(), socket.gethostname(),
                                        ", ".join(shown) or "no rank variables set")


class _Claims:
    def __init__(self, store, rank, size, seconds, deadline, fail):
        self.store, self.rank, self.size = store, rank, size
        self.seconds, self.deadline, self.fail = seconds, deadline, fail
        self.me = _describe_process()
        # Tells this process's claim from another's that reads the same (one host name and
        # pid 1 in two containers).
        self.token = os.urandom(8).hex()

    def put_if_absent(self, key, value):
        """The key's value after writing ``value`` if it had none: ours, or the first one."""
        return self.ask(self.store.compare_set, _KEY + key, "", value).decode(errors="replace")

    def ask(self, call, *args):
        try:
            return call(*args)
        except Exception as e:  # a lost store: DistNetworkError, RuntimeError
            raise self.store_failed(e) from None

    def store_failed(self, error):
        return self.fail("torch.distributed's store failed while the processes claimed "
                         "their ranks: %s" % (str(error).splitlines() or [""])[0])

    def run(self):
        problem, claimed = None, False
        if not 0 <= self.rank < self.size:
            problem = ("kolo: %s was given rank %d, outside the world size %d: ranks run "
                       "from 0 to %d" % (self.me, self.rank, self.size, self.size - 1))
        else:
            mine = "%s %s" % (self.token, self.me)
            holder = self.put_if_absent("rank/%d" % self.rank, mine)
            claimed = holder == mine
            problem = self.size_problem() if claimed else self.duplicate(holder.split(" ", 1)[1])
        if problem is None and self.ask(self.store.add, _KEY + "arrived", 1) == self.size:
            self.put_if_absent("verdict", "ok")
        verdict = self.put_if_absent("verdict", problem) if problem else self.wait_verdict()
        if verdict == "ok":
            if problem:  # came after the job was complete: only this process is wrong
                raise RuntimeError(problem)
            # The same wait as for a bad verdict: a process that fails right after (rank 0
            # without an ompi-server) must not take the store with it while the others
            # still read the verdict, or their error would be the lost store, not its cause.
            self.leave_after_others_read(claimed)
            return
        self.leave_after_others_read(claimed)
        raise RuntimeError(verdict)

    def duplicate(self, holder):
        return ("kolo: rank %d of this torch.distributed job is claimed by two processes: %s "
                "and %s; every process needs a rank of its own, 0 to %d: check how the rank "
                "variables are set on each host (torchrun --node_rank, NODE_RANK, RANK)"
                % (self.rank, holder, self.me, self.size - 1))

    def size_problem(self):
        first = self.put_if_absent("size", "%d %s" % (self.size, self.me))
        size, holder = first.split(" ", 1)
        if int(size) == self.size:
            return None
        return ("kolo: the processes of this torch.distributed job disagree on its size: "
                "%s has world size %s, %s has %d; start every process with the same world "
                "size (WORLD_SIZE, torchrun --nnodes and --nproc_per_node, Lightning's "
                "num_nodes and devices)" % (holder, size, self.me, self.size))

    def left(self):
        return datetime.timedelta(seconds=max(self.deadline - time.monotonic(), 0.001))

    def wait_verdict(self):
        try:
            self.store.wait([_KEY + "verdict"], self.left())
        except Exception as e:  # the store's timeout (DistStoreError), or a lost store
            if self.deadline - time.monotonic() > 0.1:  # not the timeout
                raise self.store_failed(e) from None
            missing = [r for r in range(self.size)
                       if not self.ask(self.store.check, [_KEY + "rank/%d" % r])]
            shown = ", ".join(map(str, missing[:8])) + (", ..." if len(missing) > 8 else "")
            raise self.fail("rank(s) %s never called init_process_group(backend=\"kolo\") "
                            "within the init timeout (%g s): did they start, and do they "
                            "use backend \"kolo\"?%s" % (shown, self.seconds,
                                                          self.rank_0_hint(missing))) from None
        return self.ask(self.store.get, _KEY + "verdict").decode(errors="replace")

    def rank_0_hint(self, missing):
        """Rank 0 missing from an env:// start holds the store that answers here: it started,
        and waits inside torch.distributed, before kolo, for as many processes as its world
        size says (torchrun's workers use their agent's store instead)."""
        if missing[:1] != [0] or os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
            return ""
        return (" (if rank 0 holds torch.distributed's store, it started and waits there for "
                "more processes than came: is its world size larger than %d?)" % self.size)

    def leave_after_others_read(self, claimed):
        """Returns once every other claimant has read the bad verdict (a few seconds at
        most: one that died never will), so that the process holding the store, which may
        be this one, does not end before them. The claimants are found before this one
        says it has read, so that their last request to the store is their wait, which
        ends with the last one's word."""
        try:
            others = ["%sread/%d" % (_KEY, r) for r in range(self.size)
                      if r != self.rank and self.store.check([_KEY + "rank/%d" % r])]
            if claimed:
                self.store.set(_KEY + "read/%d" % self.rank, "")
            seconds = min(_READ_SECONDS, max(self.deadline - time.monotonic(), 0.001))
            if others:
                self.store.wait(others, datetime.timedelta(seconds=seconds))
        except Exception:  # noqa: BLE001  (a store gone, or a claimant that died: the
            pass           # verdict is raised either way)
