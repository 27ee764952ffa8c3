"""kolo's init() outside any MPI launch, in a process that is one of several: on every host
of a SageMaker job without the estimator's MPI distribution (SM_HOSTS, or
/opt/ml/input/config/resourceconfig.json, lists the hosts), or started with WORLD_SIZE > 1
by hand. Every process must fail at once with one line saying that the job would train
separate copies and what to do instead; one SageMaker host, and SageMaker's MPI
distribution (played by kolorun on two loopback hosts), start as before.

A pytest file run directly, not under kolorun (``pytest test/python`` runs under kolorun
and collects test_*.py files only): PYTHONPATH has the built package, KOLORUN names kolorun,
KOLO_TF_PYTHON (optional) a Python with TensorFlow and JAX for those bindings. As root:
the resourceconfig.json test mounts a tmpfs on /opt in a mount namespace of its own.
"""
import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import hosts  # noqa: E402

SECOND_HOST = "127.0.0.2"  # hostname kolo-127.0.0.2, through test/launcher/fake_ssh.sh
TWO_HOSTS = json.dumps(["algo-1", "algo-2"])
# What SageMaker gives each host of a two-host job on instances with 4 GPUs.
SAGEMAKER = dict(SM_HOSTS=TWO_HOSTS, SM_NUM_GPUS="4", SM_NUM_CPUS="2")
SAGEMAKER_LINE = (
    "RuntimeError: kolo: SageMaker started this script on each of 2 hosts (algo-1, algo-2) "
    "without MPI, so this job would train 2 separate copies of the model; set the "
    "estimator's distribution={\"mpi\": {\"enabled\": True, \"processes_per_host\": 4}} (one "
    "process per GPU; SM_NUM_GPUS=4), or make kolorun the entry point")
# resourceconfig.json alone says nothing of GPUs.
RESOURCE_CONFIG_LINE = SAGEMAKER_LINE.replace(
    "4}} (one process per GPU; SM_NUM_GPUS=4)", "1}} (on GPU instances: one per GPU)")
WORLD_SIZE_LINE = (
    "RuntimeError: kolo: WORLD_SIZE=2 (RANK=%d) says this process is one of 2, but no MPI "
    "launcher started it (neither kolorun nor mpirun), so kolo would run it alone and the 2 "
    "processes would train 2 separate copies of the model; start them with kolorun (kolorun "
    "-np 2 python script.py), or, with PyTorch, join them with "
    "dist.init_process_group(backend=\"kolo\") instead of kolo's init()")
# Importing the binding and failing; the time it takes is mostly the import.
SECONDS = 60


def init_command(binding, python=sys.executable):
    return [python, "-c", "import kolo.%s as k; k.init(); print('kolo.init: rank %%d of %%d' "
                          "%% (k.rank(), k.size()), flush=True)" % binding]


def with_resource_config(config, argv):
    """``argv`` in a mount namespace whose /opt/ml/input/config/resourceconfig.json holds
    ``config``: a tmpfs over /opt, which the test's processes do not otherwise need."""
    script = ('mount -t tmpfs kolo-test-opt /opt && mkdir -p /opt/ml/input/config && '
              'printf %s "$1" > /opt/ml/input/config/resourceconfig.json && shift && '
              'exec "$@"')
    return ["unshare", "--mount", "sh", "-c", script, "sh", json.dumps(config)] + argv


def run_on_two_hosts(argv, env_per_host):
    """``argv`` on this machine and on the second host at once; [(exit code, stdout,
    stderr, seconds)]."""
    start = time.monotonic()
    processes = [hosts.start(argv, env, host)
                 for host, env in zip([None, SECOND_HOST], env_per_host)]
    results = hosts.finish(processes, SECONDS)
    return [r + (time.monotonic() - start,) for r in results]


def check_each_fails(results, lines):
    for (code, out, err, seconds), line in zip(results, lines):
        assert code not in (0, None), "a process did not fail (exit code %s):\n%s\n%s" % (
            code, out, err)
        assert "kolo.init:" not in out, "a process started kolo:\n" + out
        assert hosts.last_line(err) == line, "wanted the line\n%s\ngot:\n%s" % (line, err)
        assert seconds < SECONDS


@pytest.mark.parametrize("binding", ["numpy", "torch"])
def test_sagemaker_hosts_without_mpi_each_fail_with_one_line(binding):
    envs = [hosts.environment(SM_CURRENT_HOST=h, **SAGEMAKER) for h in ("algo-1", "algo-2")]
    check_each_fails(run_on_two_hosts(init_command(binding), envs), [SAGEMAKER_LINE] * 2)


def test_resourceconfig_at_its_sagemaker_path_lists_the_hosts():
    """A container without SageMaker's training toolkit has no SM_* variables; every host
    still has resourceconfig.json."""
    envs = [hosts.environment(), hosts.environment()]
    argvs = [with_resource_config({"current_host": h, "hosts": ["algo-1", "algo-2"]},
                                  init_command("numpy")) for h in ("algo-1", "algo-2")]
    start = time.monotonic()
    processes = [hosts.start(argv, env, host)
                 for argv, env, host in zip(argvs, envs, [None, SECOND_HOST])]
    results = [r + (time.monotonic() - start,) for r in hosts.finish(processes, SECONDS)]
    check_each_fails(results, [RESOURCE_CONFIG_LINE] * 2)


@pytest.mark.parametrize("source", ["SM_HOSTS", "resourceconfig.json"])
def test_one_sagemaker_host_starts_as_before(source):
    if source == "SM_HOSTS":
        argv, env = init_command("numpy"), hosts.environment(
            SM_HOSTS='["algo-1"]', SM_CURRENT_HOST="algo-1", SM_NUM_GPUS="0")
    else:
        argv, env = with_resource_config({"current_host": "algo-1", "hosts": ["algo-1"]},
                                         init_command("numpy")), hosts.environment()
    [(code, out, err)] = hosts.finish([hosts.start(argv, env)], SECONDS)
    assert code == 0 and "kolo.init: rank 0 of 1" in out, out + err


def test_sagemaker_mpi_distribution_starts_one_job_over_the_hosts():
    """SageMaker's MPI distribution runs mpirun on the first host, and every process sees
    SM_HOSTS: kolorun on two loopback hosts plays it."""
    code = ("import kolo.numpy as kn, numpy as np; kn.init(); "
            "print('kolo.init: rank %d of %d, sum %d' % (kn.rank(), kn.size(), "
            "kn.allreduce(np.ones(1), op=kn.Sum)[0]), flush=True)")
    argv = [os.environ["KOLORUN"], "-np", "2", "-H", "127.0.0.1:1,%s:1" % SECOND_HOST,
            "--mpi-args", "--mca plm_rsh_agent " + os.path.abspath(hosts.FAKE_SSH),
            sys.executable, "-c", code]
    env = hosts.environment(SM_CURRENT_HOST="algo-1", **SAGEMAKER)
    [(status, out, err)] = hosts.finish([hosts.start(argv, env)], 90)
    assert status == 0, out + err
    for rank in (0, 1):
        assert "[%d]<stdout>:kolo.init: rank %d of 2, sum 2" % (rank, rank) in out, out + err


@pytest.mark.parametrize("binding", ["numpy", "torch"])
def test_world_size_without_a_launcher_each_fail_with_one_line(binding):
    """Processes started by hand with torch.distributed's variables, one per host."""
    port = hosts.free_port()
    envs = [hosts.environment(RANK=r, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            for r in (0, 1)]
    check_each_fails(run_on_two_hosts(init_command(binding), envs),
                     [WORLD_SIZE_LINE % 0, WORLD_SIZE_LINE % 1])


def test_every_binding_refuses():
    """kolo.tensorflow, kolo.keras and kolo.jax start through the same init(): one host of
    the SageMaker job each, at once."""
    python = os.environ.get("KOLO_TF_PYTHON")
    if not python or not os.path.exists(python):
        pytest.skip("KOLO_TF_PYTHON names no Python with TensorFlow and JAX")
    bindings = ["tensorflow", "keras", "jax"]
    env = hosts.environment(SM_CURRENT_HOST="algo-2", TF_CPP_MIN_LOG_LEVEL="2",
                            JAX_PLATFORMS="cpu", **SAGEMAKER)
    processes = [hosts.start(init_command(b, python), env) for b in bindings]
    for binding, (code, out, err) in zip(bindings, hosts.finish(processes, SECONDS)):
        assert code not in (0, None), "kolo.%s: exit code %s\n%s\n%s" % (binding, code, out, err)
        assert hosts.last_line(err) == SAGEMAKER_LINE, "kolo.%s:\n%s" % (binding, err)
