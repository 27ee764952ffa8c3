"""kolorun in the allocations of the clouds that start a job's machines for it, simulated
on two loopback hosts (127.0.0.2 is another host through the ssh stand-in, fake_ssh.sh):

- a Kubeflow MPIJob's launcher pod: K_MPI_JOB_ROLE=launcher, the MPI's hostfile variable
  and the operator's ConfigMap at /etc/mpi (hostfile, discover_hosts.sh);
- a SageMaker training job: /opt/ml/input/config/resourceconfig.json, the SM_* variables
  and host names algo-1, algo-2 (which resolve to the two loopback hosts).

/etc/mpi and /opt/ml appear in a private mount namespace (an overlay over /etc and /opt
whose upper layer holds the files; as root), so this machine's own /etc and /opt are
never touched. Run by CTest as launcher.clouds (the system's Open MPI 4.1) and
launcher.clouds.ompi5 (Open MPI 5, whose mpirun ignores the operator's orte_* variables).
"""
import os
import re
import shutil
import socket
import subprocess
import time

import pytest

from which_mpi import HYDRA, remote_agent_args

KOLORUN = os.environ["KOLORUN"]
PRINT_RANKS = os.environ["PRINT_RANKS"]
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_SSH = os.path.join(HERE, "fake_ssh.sh")
FAKE_HOSTS = remote_agent_args(FAKE_SSH)

TWO_HOSTS_OPEN_MPI = "127.0.0.1 slots=1\n127.0.0.2 slots=1\n"
TWO_HOSTS_HYDRA = "127.0.0.1:1\n127.0.0.2:1\n"
# What the MPI Operator sets in the launcher pod of an MPIJob with mpiImplementation OpenMPI
# (slotsPerWorker 1), besides the ssh keys.
LAUNCHER_POD = {
    "K_MPI_JOB_ROLE": "launcher",
    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
    "OMPI_MCA_orte_set_default_slots": "1",
}
# What a SageMaker CPU instance's training container has (the platform's TRAINING_JOB_ARN,
# the training toolkit's SM_*), one rank per host; SM_HOSTS is left out, so that kolorun
# reads the hosts from resourceconfig.json.
SAGEMAKER = {
    "TRAINING_JOB_ARN": "arn:aws:sagemaker:us-east-1:000000000000:training-job/kolo-test",
    "SM_CURRENT_HOST": "algo-1",
    "SM_NUM_GPUS": "0",
    "SM_NUM_CPUS": "1",
}
RESOURCE_CONFIG = ('{"current_host": "algo-1", "current_instance_type": "ml.c5.xlarge", '
                   '"current_group_name": "homogeneousCluster", "hosts": ["algo-1", "algo-2"], '
                   '"network_interface_name": "lo"}\n')


def child_env(extra):
    env = dict(os.environ)
    env.update(extra)
    return env


def namespace_command(tmp_path, files, argv):
    """argv run where `files` ({"/etc/mpi/hostfile": (text, mode), ...}, each under /etc
    or /opt) exist: in a private mount namespace, with an overlay over /etc and /opt whose
    upper layers hold them."""
    lines = ["set -e"]
    for top in ("etc", "opt"):
        upper, work = tmp_path / ("upper-" + top), tmp_path / ("work-" + top)
        upper.mkdir(exist_ok=True)
        work.mkdir(exist_ok=True)
        lines.append("mount -t overlay overlay -o lowerdir=/%s,upperdir=%s,workdir=%s /%s"
                     % (top, upper, work, top))
    for path, (text, mode) in files.items():
        top, rest = path.lstrip("/").split("/", 1)
        target = tmp_path / ("upper-" + top) / rest
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        target.chmod(mode)
    lines.append('exec "$@"')
    return ["unshare", "--mount", "sh", "-c", "\n".join(lines), "sh", *argv]


@pytest.fixture(scope="module")
def mount_namespaces(tmp_path_factory):
    """Skips the tests that need a private /etc/mpi or /opt/ml where namespaces or
    overlays cannot be made (not root)."""
    probe = tmp_path_factory.mktemp("probe")
    r = subprocess.run(namespace_command(probe, {"/etc/mpi/probe": ("x", 0o444)},
                                         ["cat", "/etc/mpi/probe"]),
                       capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or r.stdout != "x":
        pytest.skip("cannot make a private /etc/mpi here (unshare --mount and an overlay, as "
                    "root): %s" % r.stderr.strip())


def kolorun_in(tmp_path, files, args, env, timeout=60):
    return subprocess.run(namespace_command(tmp_path, files, [KOLORUN, *args]),
                          capture_output=True, text=True, timeout=timeout, env=child_env(env))


def ranks_by_host(stdout, size):
    """{rank: cross rank (its host's index)} from print_ranks' lines; every line whole."""
    seen = {}
    for line in stdout.splitlines():
        m = re.match(r"\[(\d+)\]<stdout>:rank (\d+) size %d local 0/1 cross (\d+)/%d sum %d$"
                     % (size, size, size * (size + 1) // 2), line)
        assert m, line
        assert m.group(1) == m.group(2), line
        seen[int(m.group(1))] = int(m.group(3))
    return seen


@pytest.mark.parametrize("hostfile", [TWO_HOSTS_OPEN_MPI, TWO_HOSTS_HYDRA],
                         ids=["host_slots", "host_colon_n"])
def test_a_job_in_an_mpijob_launcher_runs_on_every_host_without_H_or_np(
        tmp_path, mount_namespaces, hostfile):
    # Both of the operator's hostfile forms, whatever the MPI: the form follows the
    # MPIJob's mpiImplementation, not the MPI in the image.
    files = {"/etc/mpi/hostfile": (hostfile, 0o444)}
    start = time.monotonic()
    r = kolorun_in(tmp_path, files, ["--verbose", "--mpi-args", FAKE_HOSTS, PRINT_RANKS],
                   LAUNCHER_POD)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kolorun: hosts from MPI Operator (/etc/mpi/hostfile): 127.0.0.1:1,127.0.0.2:1\n" \
        in r.stderr, r.stderr
    # The hosts go to mpirun explicitly, so Open MPI 5 (which ignores the orte_* variable)
    # runs on both as 4.1 does.
    assert "KOLORUN_HOSTS=127.0.0.1:1,127.0.0.2:1 " in r.stdout, r.stdout
    assert HYDRA or " -np 2 -H 127.0.0.1:1,127.0.0.2:1 " in r.stdout, r.stdout
    job = "\n".join(l for l in r.stdout.splitlines() if l.startswith("["))
    assert ranks_by_host(job, 2) == {0: 0, 1: 1}
    assert time.monotonic() - start < 60


@pytest.mark.skipif(HYDRA, reason="the remote agent is given in Open MPI's variable "
                    "(OMPI_MCA_plm_rsh_agent), as kolorun's ssh probe must run")
def test_kolorun_in_a_launcher_pod_waits_for_the_workers_sshd(tmp_path):
    # The worker's sshd comes up after kolorun started: kolorun says it waits (60 s in a
    # launcher pod), the test then opens the port (a listener standing in for sshd; the
    # remote shell itself is the ssh stand-in), and the job runs on both hosts.
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(TWO_HOSTS_OPEN_MPI)
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        port = s.getsockname()[1]
    env = child_env(dict(LAUNCHER_POD, OMPI_MCA_orte_default_hostfile=str(hostfile),
                         OMPI_MCA_plm_rsh_agent=FAKE_SSH))
    p = subprocess.Popen([KOLORUN, "-p", str(port), PRINT_RANKS], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
    sshd = socket.socket()
    try:
        first = p.stderr.readline()
        assert first == ("kolorun: waiting up to 60 s (--ssh-wait) for ssh on host '127.0.0.2' "
                         "(port %d): Connection refused\n" % port), first
        sshd.bind(("127.0.0.2", port))
        sshd.listen(8)
        out, err = p.communicate(timeout=60)
    finally:
        sshd.close()
        if p.poll() is None:
            p.kill()
            p.communicate()
    assert p.returncode == 0, out + first + err
    assert ranks_by_host(out, 2) == {0: 0, 1: 1}


def test_the_ssh_wait_names_the_host_that_never_answers(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    start = time.monotonic()
    r = subprocess.run([KOLORUN, "-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1", "-p", str(port),
                        "--ssh-wait", "2", "true"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        "kolorun: waiting up to 2 s (--ssh-wait) for ssh on host '127.0.0.2' (port %d): "
        "Connection refused\n"
        "kolorun: host '127.0.0.2': nothing answered on ssh port %d for 2 s (--ssh-wait; the "
        "last try: Connection refused); is the host up, and sshd running there?\n"
        % (port, port)), r.stderr
    assert 2 <= time.monotonic() - start < 10
    # In a launcher pod the default wait is 60 s; KOLO_SSH_WAIT shortens it.
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(TWO_HOSTS_OPEN_MPI)
    pod = child_env(dict(LAUNCHER_POD, OMPI_MCA_orte_default_hostfile=str(hostfile),
                         KOLO_SSH_WAIT="1"))
    r = subprocess.run([KOLORUN, "-p", str(port), "true"], capture_output=True, text=True,
                       timeout=30, env=pod)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (
        "kolorun: host '127.0.0.2': nothing answered on ssh port %d for 1 s (--ssh-wait; the "
        "last try: Connection refused); is the host up, and sshd running there?" % port), r.stderr


def test_a_job_that_leaves_a_worker_without_a_rank_is_refused(tmp_path, mount_namespaces):
    files = {"/etc/mpi/hostfile": ("127.0.0.1 slots=2\n127.0.0.2 slots=2\n", 0o444)}
    r = kolorun_in(tmp_path, files, ["-np", "2", "--mpi-args", FAKE_HOSTS, PRINT_RANKS],
                   LAUNCHER_POD)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        "kolorun: -np 2 leaves host 127.0.0.2 of MPI Operator (/etc/mpi/hostfile) without a "
        "rank (ranks fill the 4 slots host by host); omit -np to use every slot, give -np 3 or "
        "more, or start the job on fewer hosts\n"), r.stderr


def test_a_worker_pod_is_no_place_for_kolorun():
    r = subprocess.run([KOLORUN, "true"], capture_output=True, text=True, timeout=30,
                       env=child_env({"K_MPI_JOB_ROLE": "worker"}))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        "kolorun: K_MPI_JOB_ROLE=worker: this is a worker pod of an MPIJob, whose command is "
        "sshd; run kolorun as the launcher's command (it reaches every worker through ssh), or "
        "give the hosts with -H / --hostfile\n"), r.stderr


def test_an_elastic_job_in_a_launcher_pod_discovers_with_discover_hosts_sh(
        tmp_path, mount_namespaces):
    # The operator's script lists the running workers without slots: each gets the
    # hostfile's slotsPerWorker.
    files = {"/etc/mpi/hostfile": ("127.0.0.1 slots=2\n127.0.0.2 slots=2\n", 0o444),
             "/etc/mpi/discover_hosts.sh": ("#!/bin/sh\necho 127.0.0.1\necho 127.0.0.2\n",
                                            0o555)}
    r = kolorun_in(tmp_path, files, ["-np", "2", "--min-np", "2", "--dry-run", "prog"],
                   LAUNCHER_POD)
    assert r.returncode == 0, r.stderr
    assert ("kolorun: elastic: hosts from /etc/mpi/discover_hosts.sh (MPI Operator "
            "(/etc/mpi/hostfile)), 2 slot(s) each\n") in r.stderr, r.stderr
    assert "KOLORUN_HOSTS=127.0.0.1:2,127.0.0.2:2 " in r.stdout, r.stdout


def test_a_sagemaker_job_of_two_hosts_runs_on_both(tmp_path, mount_namespaces):
    # algo-1 and algo-2 resolve to the two loopback hosts (SageMaker's hosts resolve each
    # other's names); the fake hosts' own /etc/hosts starts from this one.
    with open("/etc/hosts") as f:
        hosts = f.read() + "127.0.0.1 algo-1\n127.0.0.2 algo-2\n"
    files = {"/etc/hosts": (hosts, 0o644),
             "/opt/ml/input/config/resourceconfig.json": (RESOURCE_CONFIG, 0o444)}
    r = kolorun_in(tmp_path, files, ["--verbose", "--mpi-args", FAKE_HOSTS, PRINT_RANKS],
                   SAGEMAKER)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "kolorun: hosts from SageMaker: algo-1:1,algo-2:1\n" in r.stderr, r.stderr
    job = "\n".join(l for l in r.stdout.splitlines() if l.startswith("["))
    assert ranks_by_host(job, 2) == {0: 0, 1: 1}
