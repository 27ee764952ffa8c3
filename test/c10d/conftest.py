"""Shared by the torch.distributed backend's tests (kolo.torch.c10d). Under kolorun every
rank runs every test of a file in the same order, so every rank enters the same collectives
in the same order; a test must not skip or fail on one rank before a collective that the
others enter.

The default process group is made once per pytest run, with backend "kolo" and nothing
else: init_method env:// from kolorun's environment.

Every test has a time limit (test/pytest_time_limit.py)."""
import os
import sys

import pytest

import torch
import torch.distributed as dist

import kolo.torch.c10d  # noqa: F401  (registers backend "kolo")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pytest_time_limit import pytest_configure, time_limit  # noqa: E402,F401  (the time limit)

torch.set_num_threads(1)  # up to 3 ranks share 2 cores


def pytest_sessionstart(session):
    dist.init_process_group(backend="kolo")


def pytest_sessionfinish(session, exitstatus):
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture
def rank():
    return dist.get_rank()


@pytest.fixture
def size():
    return dist.get_world_size()
