"""Horovod's init(comm=[ranks]) in one binding (run under kolorun -np 3):

    python init_ranks_check.py torch|numpy|tensorflow|jax

World ranks 0 and 1 start kolo with init(comm=[1, 0]): a job of two ranks, ranked in the
list's order (world rank 1 is kolo's rank 0). World rank 2, which that list does not hold,
gets ValueError naming its rank at once (Horovod's would wait forever inside MPI for the
listed ranks), then starts a job of its own with init(comm=[2]). Every rank prints
"init ranks: OK"; a failed assertion ends the rank, and kolorun, non-zero.
"""
import os
import sys

import numpy as np

BINDING = sys.argv[1]
WORLD_RANK = int(os.environ["OMPI_COMM_WORLD_RANK"])


def load():
    """The binding, and its allreduce (sum) and allgather of a NumPy vector."""
    if BINDING == "torch":
        import torch
        import kolo.torch as hvd
        return (hvd, lambda x: hvd.allreduce(torch.from_numpy(x), op=hvd.Sum).numpy(),
                lambda x: hvd.allgather(torch.from_numpy(x)).numpy())
    if BINDING == "numpy":
        import kolo.numpy as hvd
        return hvd, lambda x: hvd.allreduce(x, op=hvd.Sum), hvd.allgather
    if BINDING == "tensorflow":
        import tensorflow as tf
        import kolo.tensorflow as hvd
        return (hvd, lambda x: hvd.allreduce(tf.constant(x), op=hvd.Sum).numpy(),
                lambda x: hvd.allgather(tf.constant(x)).numpy())
    if BINDING == "jax":
        import jax.numpy as jnp
        import kolo.jax as hvd
        return (hvd, lambda x: np.asarray(hvd.allreduce(jnp.asarray(x), op=hvd.Sum)),
                lambda x: np.asarray(hvd.allgather(jnp.asarray(x))))
    raise SystemExit("unknown binding %r" % BINDING)


hvd, allreduce, allgather = load()
mine = np.array([float(WORLD_RANK)], np.float32)
if WORLD_RANK < 2:
    hvd.init(comm=[1, 0])
    assert (hvd.size(), hvd.rank()) == (2, 1 - WORLD_RANK), (hvd.size(), hvd.rank())
    assert allreduce(mine).tolist() == [1.0], allreduce(mine)
    assert allgather(mine).tolist() == [1.0, 0.0], allgather(mine)  # kolo's rank order
else:
    try:
        hvd.init(comm=[1, 0])
    except ValueError as e:
        assert "init(comm=[1, 0]): this process is rank 2 of MPI_COMM_WORLD" in str(e), e
    else:
        raise AssertionError("init(comm=[1, 0]) started kolo on world rank 2")
    assert not hvd.is_initialized()
    hvd.init(comm=[2])
    assert (hvd.size(), hvd.rank()) == (1, 0), (hvd.size(), hvd.rank())
    assert allreduce(mine).tolist() == [2.0], allreduce(mine)
hvd.shutdown()
print("init ranks: OK %s world rank %d" % (BINDING, WORLD_RANK), flush=True)
