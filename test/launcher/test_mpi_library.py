"""Which MPI library the kolo package loads before kolo._core, and so which build of
kolo._core (kolo/_mpi_library.py): the rule of docs/launcher.md ("Which MPI"), on made-up
installations of each ABI, and for real in a process that no mpirun started."""
import os
import subprocess
import sys

import pytest

from which_mpi import OPEN_MPI_5

PYTHON_DIR = os.environ.get("TEST_PYTHON_DIR", "")
pytestmark = pytest.mark.skipif(not os.path.isdir(PYTHON_DIR),
                                reason="the Python binding is not built in this build")

OMPI, MPICH, ABI = "libmpi.so.40", "libmpi.so.12", "libmpi_abi.so.1"


@pytest.fixture
def mpi_library():
    # The module alone, without kolo/__init__.py (which would load a library now).
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "kolo_mpi_library", os.path.join(PYTHON_DIR, "kolo", "_mpi_library.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def installation(root, libraries=(OMPI,), launcher="mpirun"):
    """ROOT/bin/<launcher>, and ROOT/lib/<each of libraries>."""
    (root / "bin").mkdir(parents=True)
    program = root / "bin" / launcher
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    if libraries:
        (root / "lib").mkdir()
        for name in libraries:
            (root / "lib" / name).write_text("")
    return root


def test_kolo_mpi_home_names_a_folder_or_its_mpirun(mpi_library, tmp_path):
    home = installation(tmp_path / "ompi5")
    want = (str(home / "lib" / OMPI), "ompi", "from KOLO_MPI_HOME")
    assert mpi_library.choose({"KOLO_MPI_HOME": str(home), "PATH": ""}) == want
    assert mpi_library.choose({"KOLO_MPI_HOME": str(home / "bin" / "mpirun")}) == want
    # It wins even inside an mpirun's job.
    assert mpi_library.choose({"KOLO_MPI_HOME": str(home), "OMPI_COMM_WORLD_SIZE": "2"}) == want
    with pytest.raises(ImportError, match="KOLO_MPI_HOME=/nowhere: no MPI library "
                                          r"\(libmpi.so.40, libmpi.so.12, libmpi_abi.so.1\)"):
        mpi_library.choose({"KOLO_MPI_HOME": "/nowhere"})


def test_an_mpich_family_installation_runs_on_its_own_abi_unless_told(mpi_library, tmp_path):
    # MPICH 5 and Intel MPI 2021.19 have libmpi.so.12 and the standard ABI's library.
    home = installation(tmp_path / "mpich", (MPICH, ABI), launcher="mpiexec")
    lib = home / "lib"
    assert mpi_library.choose({"KOLO_MPI_HOME": str(home)}) == (
        str(lib / MPICH), "mpich", "from KOLO_MPI_HOME")
    told = {"KOLO_MPI_HOME": str(home / "bin" / "mpiexec"), "KOLO_MPI_ABI": "mpiabi"}
    assert mpi_library.choose(told)[:2] == (str(lib / ABI), "mpiabi")
    with pytest.raises(ImportError, match="KOLO_MPI_ABI=ompi: KOLO_MPI_HOME=.* has no "
                                          "libmpi.so.40 \\(it has libmpi.so.12, "
                                          "libmpi_abi.so.1\\)"):
        mpi_library.choose(dict(told, KOLO_MPI_ABI="ompi"))
    with pytest.raises(ImportError, match="KOLO_MPI_ABI=lam: kolo knows the MPI ABIs ompi, "
                                          "mpich, mpiabi"):
        mpi_library.choose(dict(told, KOLO_MPI_ABI="lam"))
    # Only the standard ABI's library: that one.
    only = installation(tmp_path / "abi-only", (ABI,))
    assert mpi_library.choose({"KOLO_MPI_HOME": str(only)})[1] == "mpiabi"


def test_a_rank_of_an_mpirun_keeps_the_library_its_mpirun_set(mpi_library, tmp_path):
    first = installation(tmp_path / "first")
    path, abi, why = mpi_library.choose({"OMPI_COMM_WORLD_SIZE": "2",
                                         "PATH": str(first / "bin")})
    assert path is None and abi == "ompi" and "started by Open MPI's mpirun" in why


def test_the_first_mpirun_or_mpiexec_on_path_then_this_environments_mpi(mpi_library, tmp_path,
                                                                       monkeypatch):
    first = installation(tmp_path / "first")
    second = installation(tmp_path / "second")
    env = {"PATH": "%s:%s" % (first / "bin", second / "bin")}
    assert mpi_library.choose(env)[:2] == (str(first / "lib" / OMPI), "ompi")
    hydra = installation(tmp_path / "hydra", (MPICH,), launcher="mpiexec")
    assert mpi_library.choose({"PATH": str(hydra / "bin")})[:2] == (
        str(hydra / "lib" / MPICH), "mpich")
    # A system's mpirun (its library where the loader looks anyway): the loader's default,
    # not this environment's MPI.
    system = installation(tmp_path / "usr", libraries=())
    venv = installation(tmp_path / "venv", (MPICH, ABI))
    monkeypatch.setattr(sys, "prefix", str(venv))
    assert mpi_library.choose({"PATH": str(system / "bin")})[:2] == (None, None)
    # No mpirun on PATH: PyPI's MPI in this environment (mpich here).
    assert mpi_library.choose({"PATH": str(tmp_path / "empty")}) == (
        str(venv / "lib" / MPICH), "mpich", "PyPI's MPI in this Python environment")


def test_a_build_kolo_lacks_is_named(mpi_library, monkeypatch):
    monkeypatch.setattr(mpi_library, "_builds", lambda: {"ompi": "_core"})
    with pytest.raises(ImportError, match="this job's MPI is the MPICH ABI, and this kolo was "
                                          "built for Open MPI only"):
        mpi_library._import_core("mpich")


@pytest.mark.skipif(not OPEN_MPI_5, reason="runs on the Open MPI 5 that KOLO_MPI_HOME names")
def test_one_process_without_mpirun_runs_on_kolo_mpi_homes_library():
    code = ("import numpy as np, kolo.numpy as k\n"
            "k.init()\n"
            "total = k.allreduce(np.ones(3), op=k.Sum)\n"
            "maps = {l.split()[-1] for l in open('/proc/self/maps') if 'libmpi.so' in l}\n"
            "print(k.size(), total.tolist(), sorted(maps))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_", "PMIX_", "PRTE_"))}
    env["PYTHONPATH"] = PYTHON_DIR
    r = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                       timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    library = os.path.join(os.environ["KOLO_MPI_HOME"], "lib", "libmpi.so.40")
    assert r.stdout.strip() == "1 [1.0, 1.0, 1.0] ['%s']" % library, r.stdout
