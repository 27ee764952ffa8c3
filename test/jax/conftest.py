"""Runs before any test module imports JAX: the CPU platform only, one Eigen thread per
process (3 ranks on 2 cores stay fast), and 64-bit types enabled so that float64 and int64
are real dtypes rather than silently truncated to 32 bits. Every rank runs every test in
file order, so every rank runs the same collectives in the same order. Every test has a
time limit (test/pytest_time_limit.py): a rank left waiting ends the job naming the test."""
import os
import sys

# test/common: the helpers that several test folders share (rank_values.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
from pytest_time_limit import pytest_configure, time_limit  # noqa: E402,F401

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                           " --xla_cpu_multi_thread_eigen=false").strip()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
