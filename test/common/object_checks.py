"""What every binding's broadcast_object and allgather_object must do with objects that
only cloudpickle can write (lambdas, classes defined inside a function), with cloudpickle
installed and without it. Each binding's test calls these with its own two functions and
its rank and size; nothing here imports a framework.

With cloudpickle (as Horovod's torch and TensorFlow bindings), such objects arrive whole.
Without it, plain objects still travel, and one that cannot be pickled fails on every
rank: the root with its own error, the others with ``pickle.PicklingError`` naming the
rank that could not pickle its object. No rank waits, and the ranks stay in step.
"""
import pickle
import sys

import pytest

# What pickle raises for an object it can write only by reference: PicklingError for a
# lambda, AttributeError ("Can't pickle local object") for a local class before Python 3.14.
NOT_PICKLABLE = (pickle.PicklingError, AttributeError, TypeError)


def with_cloudpickle(broadcast_object, allgather_object, rank, size):
    pytest.importorskip("cloudpickle")

    class Local:  # defined inside a function: pickle cannot find it by name
        def __init__(self, x):
            self.x = x

    last = size - 1
    got = broadcast_object((lambda v: v + rank, Local(rank)), root_rank=last)
    assert got[0](1) == last + 1 and got[1].x == last
    assert type(got[1]).__name__ == "Local"
    every = allgather_object(lambda: rank * 10)
    assert [f() for f in every] == [r * 10 for r in range(size)]


def without_cloudpickle(broadcast_object, allgather_object, rank, size, monkeypatch):
    monkeypatch.setitem(sys.modules, "cloudpickle", None)  # an import of it now fails
    last = size - 1
    assert broadcast_object({"r": rank}, root_rank=last) == {"r": last}
    assert allgather_object(("r", rank)) == [("r", r) for r in range(size)]
    # The root cannot pickle a lambda: it raises its own error, the others the root's.
    if rank == last:
        with pytest.raises(NOT_PICKLABLE):
            broadcast_object(lambda: rank, root_rank=last)
    else:
        with pytest.raises(pickle.PicklingError,
                           match="broadcast_object: rank %d could not pickle its object" % last):
            broadcast_object(None, root_rank=last)
    # Only rank 0 passes a lambda to the allgather.
    if rank == 0:
        with pytest.raises(NOT_PICKLABLE):
            allgather_object(lambda: rank)
    else:
        with pytest.raises(pickle.PicklingError,
                           match="allgather_object: rank 0 could not pickle its object"):
            allgather_object(rank)
    assert allgather_object(rank) == list(range(size))  # still in step
