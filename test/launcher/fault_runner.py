"""Runs fault_job.py under kolorun with one fault and measures what the other ranks saw:
used by the fault matrix (test_fault_matrix.py) and the chaos run (bench/chaos.py)."""
import os
import re
import signal
import subprocess
import tempfile
import time

from which_mpi import remote_agent_args

HERE = os.path.dirname(os.path.abspath(__file__))
FAULT_JOB = os.path.join(HERE, "fault_job.py")
FAKE_SSH = os.path.join(HERE, "fake_ssh.sh")
# Faults whose rank goes away (or is ended): the others must get a named error or be
# ended by kolorun with a line naming the rank. With "badinput" every rank survives.
FAULTS = ("kill", "stop", "raise", "badinput", "exit", "stuck")
# Stall settings of every fault job: a stuck or stopped rank is named after 5 s.
STALL_ENV = {"KOLO_STALL_CHECK_TIME_SECONDS": "2", "KOLO_STALL_SHUTDOWN_TIME_SECONDS": "5"}


def run_fault(kolorun, python_dir, fault, np=3, rank=None, step=3, two_hosts=False, timeout=60,
              python="/usr/bin/python3", hosts=None, extra_env=None, job=FAULT_JOB,
              kolorun_args=(), program=None):
    """One job. Returns a dict: fault, rank, step, hung, returncode, seconds (fault until
    kolorun returned), seen {rank: (seconds after the fault, error line)}, named (the
    lines that name the faulty rank), output. `hosts` ("a:2,b:2") places the ranks on
    hosts started by fake_ssh.sh, as two_hosts does on 127.0.0.1 and 127.0.0.2. `program`
    (an MPI program that reads FAULT* as fault_job.py does: mpi_probe.c) runs instead of
    `python job`."""
    rank = np - 1 if rank is None else rank
    with tempfile.TemporaryDirectory() as tmp:
        stamp = os.path.join(tmp, "stamp")
        env = dict(os.environ, PYTHONPATH=python_dir, FAULT=fault, FAULT_RANK=str(rank),
                   FAULT_STEP=str(step), FAULT_STAMP=stamp, **STALL_ENV, **(extra_env or {}))
        cmd = [kolorun, "-np", str(np), *kolorun_args]
        if two_hosts and not hosts:
            hosts = "127.0.0.1:%d,127.0.0.2:%d" % (np // 2, np - np // 2)
        if hosts:
            cmd += ["-H", hosts, "--mpi-args", remote_agent_args(FAKE_SSH)]
        cmd += [program] if program else [python, job]
        # A session of its own: a job that hangs is ended whole (kolorun, the MPI's
        # launcher and the ranks), not kolorun alone, so nothing of it runs on.
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env, start_new_session=True)
        try:
            stdout, stderr = p.communicate(timeout=timeout)
            hung, out, code = False, stdout + stderr, p.returncode
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            try:  # a process that left the session may still hold the pipes
                stdout, stderr = p.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                stdout, stderr = "", "(its output was held by a process outside its session)"
            hung, code = True, None
            out = stdout + stderr
        ended = time.time()
        fault_at = float(open(stamp).read()) if os.path.exists(stamp) else None
    seen = {}
    for m in re.finditer(r"FAULT-SEEN rank=(\d+) at=([\d.]+) error=(.*)", out):
        seen[int(m.group(1))] = (float(m.group(2)) - (fault_at or 0), m.group(3))
    named = [line for line in out.splitlines()
             if re.search(r"\brank[s]?(\(s\))? (\d+, )*%d\b" % rank, line, re.IGNORECASE)
             and re.search(r"kolorun:|kolo-rank:|FAULT-SEEN", line)]
    return {"fault": fault, "rank": rank, "step": step, "np": np, "two_hosts": two_hosts,
            "hung": hung, "returncode": code, "fault_happened": fault_at is not None,
            "seconds": None if fault_at is None else ended - fault_at, "seen": seen,
            "named": named, "output": out}

