"""The small collectives of elastic training on the global set, through the NumPy adapter:
the ranks' agreement on commits (kolo.common.elastic_resume) and rank 0's answers
from kolorun's rendezvous, broadcast to every rank (``rank0_answer``)."""
import numpy as np

from kolo.common import basics
from kolo.common import elastic_env
from kolo.common import engine
from kolo.common import host


def allgather_int64(value, name):
    [out] = host.allgather_kernel(name, 0)([np.array([value], np.int64)])
    return out.tolist()


def allgather_int64_rows(values, name):
    """Every rank's ``values`` (the same number on each), as a list of tuples by rank."""
    [out] = host.allgather_kernel(name, 0)([np.array([values], np.int64)])
    return [tuple(row) for row in out.tolist()]


def broadcast_int64(value, root, name):
    [out] = host.broadcast_kernel(root, name, 0)([np.array([value], np.int64)])
    return int(out[0])


def barrier():
    engine.wait(engine.barrier_async(0))


FAILED = -1


def rank0_answer(ask, name):
    """``ask()`` on rank 0 (a small int >= 0), broadcast to every rank; if rank 0's
    question failed, every rank raises its error (the others with a message naming it)."""
    answer, error = 0, None
    if basics.rank() == 0:
        try:
            answer = ask()
        except elastic_env.RendezvousError as e:
            answer, error = FAILED, e
    answer = broadcast_int64(answer, 0, name)
    if answer == FAILED:
        raise error or elastic_env.RendezvousError(
            "kolo: elastic: rank 0 could not reach kolorun's rendezvous (its error is in "
            "rank 0's output)")
    return answer
