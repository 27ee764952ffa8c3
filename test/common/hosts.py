"""Processes started on two hosts without any launcher, as a user's loop over hosts (or
SageMaker, once per host) starts them: for the tests of what kolo checks before it starts
(test/python/separate_copies_check.py, test/c10d/rank_claims_check.py).

A host is this machine (None), a loopback address that test/launcher/fake_ssh.sh runs a
command for in UTS and mount namespaces of its own (127.0.0.2: hostname kolo-127.0.0.2),
or an address with a network namespace of its own (``network_host``), where a process
can listen on a port that one on this machine listens on too, as on a real second
machine: two processes that both take rank 0 both start torch.distributed's store there.
"""
import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER_TESTS = os.path.join(HERE, "..", "launcher")
FAKE_SSH = os.path.join(LAUNCHER_TESTS, "fake_ssh.sh")

# What launchers set; a test's processes get only the ones it gives them.
_LAUNCH_VARS = ("RANK", "GROUP_RANK", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE",
                "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")
_LAUNCH_PREFIXES = ("OMPI_", "PMI_", "PMIX_", "KOLORUN_", "SM_", "SLURM_")


def environment(**variables):
    """This process's environment without any launcher's variables, plus ``variables``."""
    env = {k: v for k, v in os.environ.items()
           if k not in _LAUNCH_VARS and not k.startswith(_LAUNCH_PREFIXES)}
    env.update({k: str(v) for k, v in variables.items()})
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def start(argv, env, host=None):
    """``argv`` on ``host`` (None: here), in a session of its own so that it can be ended
    with everything it started."""
    if host is not None:
        argv = [FAKE_SSH, host, shlex.join(argv)]
    return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def finish(processes, timeout):
    """[(exit code, stdout, stderr)] of every process; those still running after
    ``timeout`` seconds are killed (exit code None) with what they wrote."""
    deadline = time.monotonic() + timeout
    results = []
    for p in processes:
        try:
            out, err = p.communicate(timeout=max(deadline - time.monotonic(), 0.1))
            results.append((p.returncode, out, err))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
            results.append((None, out, err))
    return results


def last_line(text):
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@contextlib.contextmanager
def network_host(host, local, veth):
    """``host`` with a network namespace of its own, this machine being ``local`` on its
    link (test/launcher/netns_host.py); skips the test where none can be made."""
    sys.path.insert(0, LAUNCHER_TESTS)
    try:
        from netns_host import namespace_host
    finally:
        sys.path.remove(LAUNCHER_TESTS)
    with namespace_host(host, local, veth) as ns:
        yield ns
