"""A per-test time limit for the pytest suites that run under kolorun (imported by their
conftest.py files). A test that runs longer than its limit (60 s, or
@pytest.mark.limit_s(N)) prints which test and every thread's stack, then ends its process:
kolorun then stops the whole job, instead of the ranks waiting for each other until CTest's
timeout."""
import faulthandler
import os
import sys
import threading

import pytest


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
