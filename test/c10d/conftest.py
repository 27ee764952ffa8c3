"""Shared by the torch.distributed backend's tests (kolo.torch.c10d). Under kolorun every
rank runs every test of a file in the same order, so every rank enters the same collectives
in the same order; a test must not skip or fail on one rank before a collective that the
others enter.

The default process group is made once per pytest run, with backend "kolo" and nothing
else: init_method env:// from kolorun's environment.

A test that runs longer than its limit (60 s, or @pytest.mark.limit_s(N)) prints which test
and every thread's stack, then ends its process: kolorun then stops the whole job, instead of
the ranks waiting for each other until CTest's timeout."""
import faulthandler
import os
import sys
import threading

import pytest
import torch
import torch.distributed as dist

import kolo.torch.c10d  # noqa: F401  (registers backend "kolo")

torch.set_num_threads(1)  # up to 3 ranks share 2 cores


def pytest_configure(config):
    config.addinivalue_line("markers", "limit_s(seconds): this test's time limit")


def pytest_sessionstart(session):
    dist.init_process_group(backend="kolo")


def pytest_sessionfinish(session, exitstatus):
    if dist.is_initialized():
        dist.destroy_process_group()


@pytest.fixture(autouse=True)
def time_limit(request):
    marker = request.node.get_closest_marker("limit_s")
    seconds = marker.args[0] if marker else 60

    def expire():
        # pytest holds stderr (and fd 2) in its capture: give them back first.
        request.config.pluginmanager.getplugin("capturemanager").suspend_global_capture(True)
        sys.stderr.write("\nrank %s: %s still running after %d s; every thread's stack:\n"
                         % (os.environ.get("RANK", "-"), request.node.nodeid, seconds))
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        os._exit(124)

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    yield
    timer.cancel()


@pytest.fixture
def rank():
    return dist.get_rank()


@pytest.fixture
def size():
    return dist.get_world_size()
