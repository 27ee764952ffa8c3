"""jax.distributed.initialize() without arguments under kolorun (issue 17).

JAX's own detection finds Open MPI (OMPI_MCA_orte_hnp_uri) and reads the
process count, the process id and the local device from OMPI_COMM_WORLD_*;
kolorun adds JAX_COORDINATOR_ADDRESS (rank 0's host and a free port), which
JAX takes instead of mpirun's address and a port derived from the job id.

The JAX jobs run on the project's Python environment (KOLO_TF_PYTHON, given by
CTest; .venv otherwise) and are skipped when it has no JAX.
"""
import os
import re
import signal
import socket
import subprocess

import pytest

from which_mpi import HYDRA, OPEN_MPI_5, forwarded_names, remote_agent_args

# JAX finds Open MPI's job only through ORTE's OMPI_MCA_orte_hnp_uri (jax/_src/clusters/
# ompi_cluster.py), which Open MPI 5's PRRTE does not set, nor Hydra.
NO_JAX_DETECTION = pytest.mark.skipif(
    OPEN_MPI_5 or HYDRA, reason="JAX detects Open MPI's job by ORTE's OMPI_MCA_orte_hnp_uri, "
    "which Open MPI 5 (PRRTE) and Hydra (MPICH, Intel MPI) do not set: "
    "jax.distributed.initialize() needs num_processes and process_id there")

KOLORUN = os.environ["KOLORUN"]
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_SSH = os.path.join(HERE, "fake_ssh.sh")
JAX_PYTHON = os.environ.get("KOLO_TF_PYTHON") or os.path.join(HERE, "..", "..", ".venv", "bin",
                                                                "python")
TWO_HOSTS = ["-H", "127.0.0.1:2,127.0.0.2:2", "--mpi-args", remote_agent_args(FAKE_SSH)]


@pytest.fixture(scope="module")
def jax_python():
    if not os.access(JAX_PYTHON, os.X_OK):
        pytest.skip("no interpreter at %s (KOLO_TF_PYTHON; scripts/setup.sh makes .venv)" % JAX_PYTHON)
    found = subprocess.run([JAX_PYTHON, "-c", "import importlib.util as u, sys; "
                            "sys.exit(u.find_spec('jax') is None)"], capture_output=True)
    if found.returncode != 0:
        pytest.skip("%s has no jax (scripts/setup.sh installs it into .venv)" % JAX_PYTHON)
    return JAX_PYTHON


def kolorun(*args, timeout=50, env=None):
    """Runs kolorun; on a hang stops it with SIGTERM (which ends every rank) and fails."""
    full_env = dict(os.environ, JAX_PLATFORMS="cpu", **(env or {}))
    p = subprocess.Popen([KOLORUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, env=full_env)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
        pytest.fail("the job hung: still running after %d s; its output:\n%s\n%s"
                    % (timeout, out, err[-4000:]))
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


# A plain initialize(), then one collective over every process's CPU device
# (JAX's gloo collectives, which bind to the host's name).
JAX_JOB = """
import os, socket
import jax
jax.distributed.initialize()
import jax.numpy as jnp
from jax._src import distributed
from jax.experimental import multihost_utils
gathered = multihost_utils.process_allgather(jnp.array([jax.process_index()]))
print("JAX", os.environ["RANK"], jax.process_index(), jax.process_count(),
      distributed.global_state.coordinator_address, os.environ["JAX_COORDINATOR_ADDRESS"],
      socket.gethostname(), ",".join(str(int(i)) for i in gathered.ravel()), flush=True)
"""


def run_jax_job(python, tmp_path, np, extra_args=()):
    path = tmp_path / "jax_job.py"
    path.write_text(JAX_JOB)
    r = kolorun("-np", str(np), *extra_args, python, str(path))
    assert r.returncode == 0, r.stdout + r.stderr[-4000:]
    seen = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\[(\d+)\]<stdout>:JAX (.*)$", line)
        if m:
            seen[int(m.group(1))] = m.group(2).split()
    assert sorted(seen) == list(range(np)), r.stdout
    return seen


def check_jax_ranks(seen, np):
    coordinators = set()
    for tag, (rank, index, count, used, exported, _, gathered) in seen.items():
        assert int(rank) == tag and int(index) == tag, (tag, rank, index)
        assert int(count) == np
        assert used == exported, "JAX used %s, kolorun gave %s" % (used, exported)
        assert gathered == ",".join(str(i) for i in range(np)), gathered
        coordinators.add(used)
    assert len(coordinators) == 1, coordinators


@NO_JAX_DETECTION
def test_jax_distributed_initialize_without_arguments_on_one_host(jax_python, tmp_path):
    seen = run_jax_job(jax_python, tmp_path, 2)
    check_jax_ranks(seen, 2)
    assert seen[0][3].startswith("127.0.0.1:")


@NO_JAX_DETECTION
def test_jax_distributed_initialize_across_two_loopback_hosts(jax_python, tmp_path):
    seen = run_jax_job(jax_python, tmp_path, 4, TWO_HOSTS)
    check_jax_ranks(seen, 4)
    hosts = {tag: fields[5] for tag, fields in seen.items()}
    assert hosts[2] == hosts[3] == "kolo-127.0.0.2", hosts
    assert hosts[0] == hosts[1] != "kolo-127.0.0.2", hosts


def exported(stdout):
    """The NAME=value settings that kolorun --dry-run prints before the command."""
    return dict(re.findall(r"\b([A-Z_]+)='?([^ ']*)'? ", re.split(r" \S*(?:mpirun|mpiexec\.hydra) (?=-)", stdout)[0] + " "))


def test_jax_coordinator_is_rank_0s_host_on_a_port_of_its_own():
    r = kolorun("-np", "2", "--dry-run", "prog")
    assert r.returncode == 0, r.stderr
    env = exported(r.stdout)
    host, port = env["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)
    assert host == "127.0.0.1" == env["MASTER_ADDR"]
    assert int(port) > 0 and port != env["MASTER_PORT"]
    assert "JAX_COORDINATOR_ADDRESS" in forwarded_names(r.stdout)  # reaches remote hosts too
    r = kolorun("-np", "4", "-H", "node1:2,node2:2", "--dry-run", "prog")
    assert exported(r.stdout)["JAX_COORDINATOR_ADDRESS"].startswith("node1:")
    # "localhost" first, another host beside it: that host must reach this machine by its name.
    r = kolorun("-np", "2", "-H", "localhost:1,node2:1", "--dry-run", "prog")
    env = exported(r.stdout)
    assert env["MASTER_ADDR"] == socket.gethostname(), r.stdout
    assert env["JAX_COORDINATOR_ADDRESS"].startswith(socket.gethostname() + ":"), r.stdout
    # The user's own choice wins.
    r = kolorun("-np", "2", "-x", "JAX_COORDINATOR_ADDRESS=10.0.0.1:1234", "--dry-run", "prog")
    assert exported(r.stdout)["JAX_COORDINATOR_ADDRESS"] == "10.0.0.1:1234", r.stdout


def test_pin_gpus_tells_jax_that_each_rank_has_device_0(tmp_path):
    body = "import os\nprint('IDS', os.environ.get('JAX_LOCAL_DEVICE_IDS', '-'))\n"
    path = tmp_path / "ids.py"
    path.write_text(body)
    r = kolorun("-np", "2", "--pin-gpus", "/usr/bin/python3", str(path))
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:IDS 0" in r.stdout and "[1]<stdout>:IDS 0" in r.stdout
    # Without pinning, JAX's own default stands (device LOCAL_RANK).
    r = kolorun("-np", "2", "/usr/bin/python3", str(path))
    assert "[0]<stdout>:IDS -" in r.stdout and "[1]<stdout>:IDS -" in r.stdout
