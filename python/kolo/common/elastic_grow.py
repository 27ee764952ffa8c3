"""Growing in place (Open MPI 5), rank 0's side: the new processes it starts on the free
slots that kolorun offers at a commit (``check_or_grow``), with rank 0's environment, and
how long they may take to start. kolo.common.elastic joins them at the first commit after
they started (``_join_new_processes``); docs/elastic.md, "Replace and grow in place"."""
import os
import sys
import time

from kolo.common import basics
from kolo.common import elastic_env
from kolo.common.exceptions import KoloInternalError

# Rank 0's processes being started (one host per slot), until they joined or failed, and
# since when (time.monotonic()).
starting = []
_started_at = [0.0]
# How long new processes may take from their start to MPI_Init (their script's imports
# before hvd.init()): one that died before it leaves the spawn waiting for ever (PRRTE 3.0).
# KOLO_START_TIMEOUT (or HOROVOD_START_TIMEOUT, kolorun's --start-timeout) when the job's
# environment sets it, else 300 s.
DEFAULT_NEW_PROCESS_PATIENCE_S = 300.0


def _new_process_patience():
    for name in ("KOLO_START_TIMEOUT", "HOROVOD_START_TIMEOUT"):
        try:
            return float(os.environ[name])
        except (KeyError, ValueError):
            continue
    return DEFAULT_NEW_PROCESS_PATIENCE_S

# What a process started to grow the job does not take from rank 0's environment: what
# Open MPI and PMIx set for each process, and the ranks of torchrun's names.
_OWN_VARIABLES = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
                  "ROLE_RANK", "OMPI_MCA_num_procs")


def _environment_for_new_processes(env, size):
    """Rank 0's environment for the processes it starts: they are spawned by MPI, which
    gives them none of the job's own (kolorun's settings, the user's -x, the fault
    tolerance), with KOLO_ELASTIC_REPLACEMENT=1 and the job's size once they joined."""
    out = {}
    for name, value in os.environ.items():
        if "\n" in value or name in _OWN_VARIABLES:
            continue
        if name.startswith(("OMPI_", "PMIX_", "PRTE_")) and not name.startswith(
                ("OMPI_MCA_", "OMPI_ALLOW_")):
            continue
        out[name] = value
    out.update(KOLO_ELASTIC_REPLACEMENT="1", KOLO_ELASTIC_GENERATION=str(env.generation),
               WORLD_SIZE=str(size), ROLE_WORLD_SIZE=str(size))
    return out


def say(line):
    sys.stderr.write("kolo: elastic: %s\n" % line)
    sys.stderr.flush()


def check_or_grow(env):
    """Rank 0 at a commit: kolorun's answer to CHECK, where an offer of free slots (GROW)
    starts new processes there and answers NO_UPDATE until they are ready; then GROW, on
    which every rank joins them."""
    status = basics.replacements()
    if status == "ready":
        return elastic_env.GROW
    patience = _new_process_patience()
    if status == "starting" and time.monotonic() - _started_at[0] > patience:
        basics.abandon_replacements()
        status = ("they did not initialize MPI within %g s of their start (KOLO_START_TIMEOUT): "
                  "dead, or stuck before hvd.init()" % patience)
    if status not in ("none", "starting"):
        give_up(env, status)
    update, (hosts, added) = elastic_env.check_or_grow(env)
    if update != elastic_env.GROW:
        return update
    if not env.grow_in_place:  # KOLO_ELASTIC_GROW_IN_PLACE=0: the restart path
        return elastic_env.ADDED
    if status == "starting":
        return elastic_env.NO_UPDATE
    command = [sys.executable] + sys.orig_argv[1:]
    try:
        basics.start_replacements(command[0], command[1:], hosts,
                                  _environment_for_new_processes(env, basics.size() + len(hosts)),
                                  added)
    except KoloInternalError as e:  # cannot grow in place here: the restart path
        say("cannot start new processes in place (%s); restarting to grow" % e)
        return elastic_env.ADDED
    starting[:] = hosts
    _started_at[0] = time.monotonic()
    say("starting %d new process(es) on %s; they join at the first commit after their "
         "start, while the job trains on" % (len(hosts), elastic_env.format_slots(hosts)))
    return elastic_env.NO_UPDATE


def give_up(env, why):
    """Rank 0: the processes being started did not start or join (``why``): says so in one
    line, and kolorun offers their slots no more."""
    say("the new process(es) on %s did not start or join (%s); the job goes on without "
        "them" % (elastic_env.format_slots(starting), why))
    elastic_env.not_joined(env, starting)
    del starting[:]


def release():
    """Rank 0, when the training ended before the processes being started joined (no
    commit will join them now): they are told to end, once they have initialized MPI (a
    new process whose parent has gone fails in MPI_Init), within what is left of their
    patience (KOLO_START_TIMEOUT)."""
    where = elastic_env.format_slots(starting)
    left = max(0.0, _new_process_patience() - (time.monotonic() - _started_at[0]))
    say("the training ended before the new process(es) on %s joined; they are told to "
        "end once they have initialized MPI (up to %.0f s)" % (where, left))
    why = basics.release_replacements(left)
    if why:
        say("the new process(es) on %s could not be told to end (%s); mpirun reports how "
            "they end" % (where, why))
    del starting[:]


def take_starting():
    """The hosts of the processes that just joined (one per slot); none start any more."""
    hosts = list(starting)
    del starting[:]
    return hosts

