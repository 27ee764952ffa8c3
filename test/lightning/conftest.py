"""Shared by kolo.lightning's tests. Under kolorun every rank runs every test of a file in the
same order, so every rank runs the same collectives in the same order; a test must not skip
or fail on one rank before a collective that the others enter.

A test that runs longer than its limit (60 s, or @pytest.mark.limit_s(N)) prints which test
and every thread's stack, then ends its process: kolorun then stops the whole job, instead of
the ranks waiting for each other until CTest's timeout."""
import faulthandler
import os
import shutil
import sys
import tempfile
import threading

import pytest
import torch

torch.set_num_threads(1)  # up to 4 ranks share 2 cores


def pytest_configure(config):
    config.addinivalue_line("markers", "limit_s(seconds): this test's time limit")


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
