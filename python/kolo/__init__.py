"""kolo: collective operations for data-parallel training.

Use the framework module: ``import kolo.torch as kolo``.
"""
__version__ = "0.1.0"

# The Open MPI library that kolo._core runs on, loaded before any module imports _core.
from kolo import _mpi_library

_mpi_library.load()
