"""Shared by the elastic tests: every test has a time limit (test/pytest_time_limit.py),
so that a multi-rank test that waits for a rank which will never come ends with a
message naming the test, not at CTest's timeout."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pytest_time_limit import pytest_configure, time_limit  # noqa: E402,F401
