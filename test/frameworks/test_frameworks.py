"""Unchanged framework scripts under kolorun, end to end, np=4 on two loopback hosts
(issue 18): a plain torch.distributed DDP script (init_method="env://") and a DeepSpeed
script (deepspeed.init_distributed(), a ZeRO stage-1 step on the CPU), neither importing
kolo. Each test checks every rank's ranks and environment and the trained parameters:
equal on every rank and equal, within a stated tolerance, to the same script run as one
process on the whole batch.

127.0.0.2 is a second host as in test/launcher/test_jax.py: fake_ssh.sh starts its
ranks in their own UTS namespace, named kolo-127.0.0.2. The scripts run on the project's
Python environment (KOLO_TF_PYTHON: PyTorch 2.x, DeepSpeed) and, for DDP, also on
Debian's /usr/bin/python3 (PyTorch 1.13); a test is skipped, saying why, where its
interpreter lacks the framework.
"""
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import warnings

import pytest

KOLORUN = os.environ["KOLORUN"]
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_SSH = os.path.join(HERE, "..", "launcher", "fake_ssh.sh")
RECORDING_SSH = os.path.join(HERE, "recording_ssh.sh")
VENV_PYTHON = os.environ.get("KOLO_TF_PYTHON") or os.path.join(HERE, "..", "..", ".venv", "bin",
                                                                 "python")
DEBIAN_PYTHON = "/usr/bin/python3"
NP = 4
SECOND_HOST = "kolo-127.0.0.2"
# The trained parameters against the one-process run: float32 sums in another order
# (per-rank means averaged instead of one mean) after a few steps.
ATOL, RTOL = 1e-6, 1e-5


def require(python, module):
    if not os.access(python, os.X_OK):
        pytest.skip("no interpreter at %s (KOLO_TF_PYTHON; scripts/setup.sh makes .venv)" % python)
    found = subprocess.run([python, "-c", "import importlib.util as u, sys; "
                            "sys.exit(u.find_spec(%r) is None)" % module], capture_output=True)
    if found.returncode != 0:
        pytest.skip("%s has no %s (scripts/setup.sh installs it into .venv)" % (python, module))
    return python


def run(argv, timeout, env=None, what="kolorun"):
    """Runs argv; on a hang stops it with SIGTERM (kolorun then ends every rank) and fails."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, **(env or {})))
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        pytest.fail("%s hung: still running after %d s; its output:\n%s\n%s"
                    % (what, timeout, out[-4000:], err[-4000:]))
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def reports(stdout, tag):
    """{rank: the JSON that rank printed after TAG}, from kolorun's tagged lines."""
    seen = {}
    for line in stdout.splitlines():
        m = re.match(r"\[(\d+)\]<stdout>:%s (\{.*\})$" % tag, line)
        if m:
            seen[int(m.group(1))] = json.loads(m.group(2))
    return seen


# What libstdc++ prints when torch's gloo teardown aborts a rank (see run_to_the_end).
TEARDOWN_ABORT = "terminate called without an active exception"


def run_to_the_end(argv, timeout, tag, env=None):
    """run(), once more when the first run failed only in PyTorch's gloo teardown.

    Seen once in CI on torch 2.15 (and never in 40 runs here, with and without kolorun):
    every rank had printed its report after training, then one rank aborted in
    destroy_process_group() or at exit with TEARDOWN_ABORT, which is no part of kolo's
    launch. That run is reported as a warning and the script is run again; the second
    run must pass, and any other failure fails at once."""
    r = run(argv, timeout, env=env)
    if r.returncode != 0 and len(reports(r.stdout, tag)) == NP and TEARDOWN_ABORT in r.stdout + r.stderr:
        warnings.warn("every rank finished and reported, then a rank aborted in PyTorch's "
                      "gloo teardown (%r); running the script again:\n%s"
                      % (TEARDOWN_ABORT, r.stderr[-2000:]))
        r = run(argv, timeout, env=env)
    return r


def one_process_reference(python, script, tag, timeout, env=None):
    """The script as one process on the whole batch (RANK=0, WORLD_SIZE=1)."""
    one = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(free_port())}
    r = run([python, script], timeout, env=dict(env or {}, **one), what="the one-process run")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    (line,) = [l for l in r.stdout.splitlines() if l.startswith(tag + " ")]
    return json.loads(line[len(tag) + 1:])["params"]


def check_two_host_ranks(seen, stdout):
    """Ranks 0-3: local ranks 0,1 on each host, node ranks 0 and 1, rank 0's host as
    MASTER_ADDR (the first host, 127.0.0.1), one MASTER_PORT."""
    assert sorted(seen) == list(range(NP)), "ranks that reported: %s\n%s" % (sorted(seen),
                                                                               stdout[-4000:])
    for tag, r in seen.items():
        env = r["env"]
        assert env["RANK"] == str(tag) and r["rank"] == tag, (tag, env, r["rank"])
        assert env["WORLD_SIZE"] == str(NP) and r["size"] == NP, (tag, env)
        assert env["LOCAL_RANK"] == str(tag % 2), (tag, env)
        assert env["MASTER_ADDR"] == "127.0.0.1", (tag, env)
        assert r["host"] == (SECOND_HOST if tag >= 2 else seen[0]["host"]), (tag, r["host"])
        for name in ("NODE_RANK", "GROUP_RANK"):
            if name in env:
                assert env[name] == str(tag // 2), (tag, name, env)
    assert seen[0]["host"] != SECOND_HOST
    ports = {r["env"]["MASTER_PORT"] for r in seen.values()}
    assert len(ports) == 1 and int(ports.pop()) > 0, seen


def check_params(seen, reference):
    first = seen[0]["params"]
    for tag, r in seen.items():
        assert r["params"] == first, "rank %d's parameters differ from rank 0's" % tag
    assert len(first) == len(reference)
    worst = max(abs(a - b) - RTOL * abs(b) for a, b in zip(first, reference))
    assert worst <= ATOL, "4 ranks vs one process on the whole batch: off by %g beyond " \
        "rtol %g (atol %g)" % (worst, RTOL, ATOL)


# --- torch.distributed DDP ---------------------------------------------------------------

DDP_SCRIPT = os.path.join(HERE, "ddp_train.py")


@pytest.mark.parametrize("which", ["venv", "debian"])
def test_ddp_script_unchanged_on_two_hosts(which):
    python = require(VENV_PYTHON if which == "venv" else DEBIAN_PYTHON, "torch")
    r = run_to_the_end([KOLORUN, "-np", str(NP), "-H", "127.0.0.1:2,127.0.0.2:2",
                        "--mpi-args", "--mca plm_rsh_agent " + FAKE_SSH, python, DDP_SCRIPT],
                       timeout=120, tag="DDP")
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    seen = reports(r.stdout, "DDP")
    check_two_host_ranks(seen, r.stdout)
    for tag, rep in seen.items():
        assert rep["env"]["NODE_RANK"] == rep["env"]["GROUP_RANK"] == str(tag // 2), rep["env"]
        assert rep["env"]["LOCAL_WORLD_SIZE"] == "2", rep["env"]
        assert rep["hosts"] == [seen[0]["host"]] * 2 + [SECOND_HOST] * 2, rep["hosts"]
    check_params(seen, one_process_reference(python, DDP_SCRIPT, "DDP", timeout=60))


# --- DeepSpeed ---------------------------------------------------------------------------

DEEPSPEED_SCRIPT = os.path.join(HERE, "deepspeed_train.py")
# The CPU accelerator, also where a GPU is present; it uses gloo (the script asks for it).
DS_ENV = {"DS_ACCELERATOR": "cpu"}
GPT_NEOX_HOSTFILE = """\
# a DeepSpeed hostfile, as GPT-NeoX users keep them
worker-1 slots=4
worker-2 slots=4   # the second node
"""


def dry_run_command(stdout):
    """kolorun --dry-run's line: (the NAME=value settings, mpirun's argv)."""
    words = shlex.split(stdout.strip())
    i = words.index("mpirun")
    return dict(w.split("=", 1) for w in words[:i]), words[i:]


def test_deepspeed_hostfile_with_ssh_port_gives_the_mpirun_line(tmp_path):
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(GPT_NEOX_HOSTFILE)
    r = run([KOLORUN, "--hostfile", str(hostfile), "-p", "2222", "--dry-run", "python",
             "train.py", "--deepspeed_config", "ds.json"], timeout=30)
    assert r.returncode == 0, r.stderr
    env, argv = dry_run_command(r.stdout)
    assert argv[argv.index("-np") + 1] == "8", argv  # every slot
    assert argv[argv.index("-H") + 1] == "worker-1:4,worker-2:4", argv
    i = argv.index("plm_rsh_args")
    assert argv[i - 1] == "--mca" and argv[i + 1] == "-p 2222", argv
    assert env["MASTER_ADDR"] == "worker-1", env
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        assert argv[argv.index(name) - 1] == "-x", (name, argv)  # reaches the remote ranks
    assert argv[-4:] == ["python", "train.py", "--deepspeed_config", "ds.json"], argv
    # DeepSpeed's own parser reads the same file the same way.
    python = require(VENV_PYTHON, "deepspeed")
    parsed = run([python, "-c", "import sys, json\n"
                  "from deepspeed.launcher.runner import fetch_hostfile\n"
                  "print('POOL', json.dumps(fetch_hostfile(sys.argv[1])))", str(hostfile)],
                 timeout=60, what="deepspeed's fetch_hostfile")
    assert parsed.returncode == 0, parsed.stderr[-4000:]
    (line,) = [l for l in parsed.stdout.splitlines() if l.startswith("POOL ")]
    assert json.loads(line[5:]) == {"worker-1": 4, "worker-2": 4}, line


def test_deepspeed_init_distributed_and_zero1_on_two_hosts(tmp_path):
    python = require(VENV_PYTHON, "deepspeed")
    hostfile = tmp_path / "hostfile"
    hostfile.write_text("127.0.0.1 slots=2\n127.0.0.2 slots=2\n")
    ssh_log = tmp_path / "ssh.log"
    # -p 2222 as in a GPT-NeoX container; the ssh stand-in records what it was given.
    # The first run on a machine also builds DeepSpeed's shared-memory op (about 45 s).
    r = run_to_the_end([KOLORUN, "--hostfile", str(hostfile), "-p", "2222",
                        "--mpi-args", "--mca plm_rsh_agent " + RECORDING_SSH,
                        "-x", "DS_ACCELERATOR=cpu", python, DEEPSPEED_SCRIPT], timeout=240,
                       tag="DEEPSPEED", env={"KOLO_SSH_LOG": str(ssh_log)})
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    calls = ssh_log.read_text().splitlines()
    assert calls and all(c.startswith("-p 2222 127.0.0.2 ") for c in calls), calls
    seen = reports(r.stdout, "DEEPSPEED")
    check_two_host_ranks(seen, r.stdout)
    for tag, rep in seen.items():
        assert rep["local_rank"] == tag % 2, rep  # deepspeed.comm's, from LOCAL_RANK
        assert rep["backend"] == "gloo" and rep["zero_stage"] == 1, rep
        # Each rank's optimizer holds its quarter of the parameters (ZeRO-1's partition,
        # padded for alignment: 18 of 66 here), not all of them.
        assert rep["optimizer"] == "DeepSpeedZeroOptimizer", rep["optimizer"]
        assert 0 < rep["partition"] < len(rep["params"]) // 2, (rep["partition"],
                                                               len(rep["params"]))
        assert rep["rank_sum"] == sum(range(NP)), rep  # an all_reduce across both hosts
    check_params(seen, one_process_reference(python, DEEPSPEED_SCRIPT, "DEEPSPEED",
                                             timeout=120, env=DS_ENV))
