"""Processes started on two hosts without any launcher, as a user's loop over hosts (or
SageMaker, once per host) starts them: for the tests of what kolo checks before it starts
(test/python/separate_copies_check.py, test/c10d/rank_claims_check.py).

A host is this machine (None), a loopback address that test/launcher/fake_ssh.sh runs a
command for in UTS and mount namespaces of its own (127.0.0.2: hostname kolo-127.0.0.2),
or an address with a network namespace of its own (``network_host``), where a process
can listen on a port that one on this machine listens on too, as on a real second
machine: two processes that both take rank 0 both start torch.distributed's store there.

A worker says who it is, when it calls what must fail and when it failed (``say_*``);
``all_failed_together`` checks that every worker failed, soon after the last call.
"""
import contextlib
import os
import re
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


def assert_last_lines_in(errors, wanted):
    """Each process's last line of output (``errors``) is one of the ``wanted`` messages."""
    for err in errors:
        assert last_line(err) in wanted, "got:\n%s\nwanted one of:\n%s" % (
            err, "\n".join(sorted(wanted)))


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


# What a worker prints, for all_failed_together: who it is, when it called what fails (the
# start of kolo), and when that failed.
_WORKER = re.compile(r"^worker pid (\d+) host (\S+)$", re.M)
_CALLED = re.compile(r"^calling .* at ([0-9.]+)$", re.M)
_FAILED = re.compile(r"^failed at ([0-9.]+)$", re.M)


def say_who():
    print("worker pid %d host %s" % (os.getpid(), socket.gethostname()), flush=True)


def say_calling(what):
    print("calling %s at %f" % (what, time.time()), flush=True)


def say_failed():
    print("failed at %f" % time.time(), flush=True)


def all_failed_together(processes, timeout, within):
    """[(pid, host, stderr)] of the workers, after checking that every one failed, within
    ``within`` seconds of the latest call."""
    called, failed, who = [], [], []
    for code, out, err in finish(processes, timeout):
        assert code not in (0, None), "a process did not fail (exit code %s):\n%s\n%s" % (
            code, out, err)
        assert _WORKER.search(out) and _CALLED.search(out) and _FAILED.search(out), out + err
        called.append(float(_CALLED.search(out).group(1)))
        failed.append(float(_FAILED.search(out).group(1)))
        who.append(_WORKER.search(out).groups() + (err,))
    late = max(failed) - max(called)
    assert late < within, "the last process failed %.1f s after the last call" % late
    return who
