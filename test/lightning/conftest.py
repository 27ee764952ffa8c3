"""Shared by kolo.lightning's tests. Under kolorun every rank runs every test of a file in the
same order, so every rank runs the same collectives in the same order; a test must not skip
or fail on one rank before a collective that the others enter.

Every test has a time limit (test/pytest_time_limit.py)."""
import os
import shutil
import sys
import tempfile

import pytest

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pytest_time_limit import pytest_configure, time_limit  # noqa: E402,F401  (the time limit)

torch.set_num_threads(1)  # up to 4 ranks share 2 cores


@pytest.fixture
def shared_dir():
    """A directory that every rank sees under the same path (rank 0's), removed afterwards."""
    import kolo.torch as kt
    kt.init()
    path = kt.allgather_object(tempfile.mkdtemp(prefix="kolo_lightning_test_")
                               if kt.rank() == 0 else None, name="shared_dir")[0]
    yield path
    kt.barrier()
    if kt.rank() == 0:
        shutil.rmtree(path, ignore_errors=True)
