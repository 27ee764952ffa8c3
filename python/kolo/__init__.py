"""kolo: collective operations for data-parallel training.

Use the framework module: ``import kolo.torch as kolo``.
"""
__version__ = "0.1.0"

# The MPI library that kolo._core runs on, and the build of kolo._core for its ABI,
# loaded before any module uses _core.
from kolo import _mpi_library

_mpi_library.load()
