"""kolorun's elastic mode end to end (issue 34), with a worker that is no
framework script: elastic_worker.py speaks the rendezvous verbs itself.
Hosts are loopback addresses started through fake_ssh.sh, as in
test_kolorun.py. Every step waits for a message, never for a time; every run
is bounded and fails saying what it printed.

Run by CTest (launcher.elastic): /usr/bin/python3 -m pytest this file, with
KOLORUN pointing at the built kolorun.
"""
import os
import re
import stat
import subprocess

import pytest

from which_mpi import HYDRA, MPI_NAME, remote_agent_args

KOLORUN = os.environ["KOLORUN"]
PYTHON = "/usr/bin/python3"
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_SSH = os.path.join(HERE, "fake_ssh.sh")
WORKER = os.path.join(HERE, "elastic_worker.py")
FAKE_HOSTS = ["--mpi-args", remote_agent_args(FAKE_SSH)]


def kolorun(*args, timeout=120, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        return subprocess.run([KOLORUN, *args], capture_output=True, text=True, timeout=timeout,
                              env=full_env)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
        pytest.fail("kolorun did not end within %d s; it printed:\n%s" % (timeout, out))


def discovery_script(tmp_path, body):
    path = tmp_path / "discover.sh"
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def elastic_lines(r):
    return [line for line in r.stderr.splitlines() if line.startswith("kolorun: elastic: ")]


# kolorun's first line in elastic mode says how a lost rank is recovered (in place on Open
# MPI 5, by a restart elsewhere); the tests below compare what follows it.
RECOVERY = "kolorun: elastic: a lost rank or host "


def stderr_after_recovery_line(r):
    lines = r.stderr.splitlines()
    assert lines and lines[0].startswith(RECOVERY), r.stderr
    return lines[1:]


def test_restart_asked_by_rank_0_grows_the_job_to_the_new_hosts(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1:2\n")
    script = discovery_script(tmp_path, "cat " + str(hosts))
    r = kolorun("-np", "2", "--host-discovery-script", script, *FAKE_HOSTS,
                "-x", "ELASTIC_TEST_DIR=%s" % tmp_path, "-x", "WANT_SIZE=4",
                "-x", "DISCOVERY_HOSTS=%s" % hosts, PYTHON, WORKER, "grow")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    # Rank 0 heard SAME, then (the worker added 127.0.0.2 to the discovery file) "added".
    assert "gen=0 check OK SAME" in out and "gen=0 check OK UPDATED added" in out, out
    # The verbs' refusals: a wrong token, a generation that is not running.
    assert "gen=0 bad token ERR wrong job token" in out, out
    assert "gen=0 old generation ERR generation 1 is not the running one (0)" in out, out
    # The next incarnation runs at np=4 on both hosts, with the same job id, and every rank ends.
    jobs = set(re.findall(r"job=([0-9a-f]{32})", out))
    assert len(jobs) == 1, out
    for rank in range(4):
        assert "WORKER rank=%d gen=1 done size=4" % rank in out, out
    lines = elastic_lines(r)
    assert "kolorun: elastic: starting incarnation 0 at np=2 on 127.0.0.1:2" in lines, out
    assert "kolorun: elastic: discovery lists 127.0.0.1:2,127.0.0.2:2" in lines, out
    assert ("kolorun: elastic: rank 0 asks for a restart at commit 0 (hosts added)" in lines), out
    assert "kolorun: elastic: starting incarnation 1 at np=4 on 127.0.0.1:2,127.0.0.2:2" in lines
    resumed = [l for l in lines if "resumed at" in l]
    assert len(resumed) == 1, out
    assert re.fullmatch(r"kolorun: elastic: resumed at np=4 \(127\.0\.0\.1:2,127\.0\.0\.2:2\) from "
                        r"commit 0, [\d.]+ s after the restart asked at commit 0 \(hosts added\) "
                        r"\(reset 1\)", resumed[0]), resumed[0]


def test_host_of_a_killed_rank_is_blacklisted_and_the_job_goes_on_without_it(tmp_path):
    r = kolorun("-np", "4", "--min-np", "2", "--reset-limit", "3", "-H",
                "127.0.0.1:2,127.0.0.2:2", *FAKE_HOSTS, "-x", "ELASTIC_TEST_DIR=%s" % tmp_path,
                "-x", "FAIL_RANK=2", PYTHON, WORKER, "kill")
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "WORKER rank=2 gen=0 killing myself" in out, out
    assert "WORKER rank=0 gen=1 done size=2" in out and "WORKER rank=1 gen=1 done size=2" in out
    lines = elastic_lines(r)
    if HYDRA:  # the job's first line says why it restarts
        assert lines[0] == ("kolorun: elastic: a lost rank or host restarts every worker from the "
                            "last commit (%s has no fault tolerance to recover in place: no ULFM; "
                            "Open MPI 5 recovers in place)" % MPI_NAME), out
    assert ("kolorun: elastic: incarnation 0 failed: rank 2 on host 127.0.0.2 was killed by "
            "signal 9 (SIGKILL); host 127.0.0.2 blacklisted for the rest of the job") in lines, out
    assert "kolorun: elastic: starting incarnation 1 at np=2 on 127.0.0.1:2" in lines, out
    resumed = [l for l in lines if "resumed at" in l]
    assert len(resumed) == 1, out
    assert re.fullmatch(r"kolorun: elastic: resumed at np=2 \(127\.0\.0\.1:2\) from commit 0, "
                        r"[\d.]+ s after rank 2 on host 127\.0\.0\.2 was killed by signal 9 "
                        r"\(SIGKILL\); host 127\.0\.0\.2 blacklisted for the rest of the job "
                        r"\(reset 1 of 3\)", resumed[0]), resumed[0]


def test_reset_limit_reached_ends_with_a_named_error_and_the_failing_ranks_code(tmp_path):
    # Incarnation 0: rank 3 (on 127.0.0.3) exits with code 3, reset 1 of 1; incarnation 1:
    # rank 2 (on 127.0.0.2) exits with code 3, and a second reset is past the limit.
    r = kolorun("-np", "4", "--min-np", "2", "--reset-limit", "1", "-H",
                "127.0.0.1:2,127.0.0.2:1,127.0.0.3:1", *FAKE_HOSTS,
                "-x", "ELASTIC_TEST_DIR=%s" % tmp_path, PYTHON, WORKER, "exit")
    out = r.stdout + r.stderr
    assert r.returncode == 3, out
    lines = elastic_lines(r)
    assert ("kolorun: elastic: incarnation 0 failed: rank 3 on host 127.0.0.3 exited with code 3; "
            "host 127.0.0.3 blacklisted for the rest of the job") in lines, out
    assert "kolorun: elastic: starting incarnation 1 at np=3 on 127.0.0.1:2,127.0.0.2:1" in lines
    assert r.stderr.rstrip().splitlines()[-1] == (
        "kolorun: elastic: --reset-limit 1 reached: not restarting after rank 2 on host "
        "127.0.0.2 exited with code 3"), out


def test_min_np_not_reachable_within_the_elastic_timeout(tmp_path):
    # After the kill only 2 of the 4 slots that --min-np needs are left.
    r = kolorun("-np", "4", "--min-np", "4", "--elastic-timeout", "1", "-H",
                "127.0.0.1:2,127.0.0.2:2", *FAKE_HOSTS, "-x", "ELASTIC_TEST_DIR=%s" % tmp_path,
                "-x", "FAIL_RANK=3", PYTHON, WORKER, "kill")
    out = r.stdout + r.stderr
    assert r.returncode == 128 + 9, out  # the killed rank's
    lines = elastic_lines(r)
    assert ("kolorun: elastic: waiting up to 1.0 s (--elastic-timeout) for 4 slots (--min-np); "
            "2 available (127.0.0.1:2); blacklisted: 127.0.0.2") in lines, out
    assert r.stderr.rstrip().splitlines()[-1] == (
        "kolorun: elastic: only 2 available (127.0.0.1:2) of the 4 slots that --min-np needs "
        "after waiting 1.0 s (--elastic-timeout); blacklisted: 127.0.0.2"), out
    assert "gen=1" not in out, out


def test_first_start_waits_for_np_slots_and_horovods_timeout_variable_bounds_it(tmp_path):
    script = discovery_script(tmp_path, "echo 127.0.0.1:1")
    r = kolorun("-np", "2", "--host-discovery-script", script, PYTHON, WORKER, "grow",
                env={"HOROVOD_ELASTIC_TIMEOUT": "1"}, timeout=60)
    assert r.returncode == 1, r.stderr
    assert stderr_after_recovery_line(r) == [
        "kolorun: elastic: waiting up to 1.0 s (--elastic-timeout) for 2 slots (-np); "
        "1 available (127.0.0.1:1)",
        "kolorun: elastic: only 1 available (127.0.0.1:1) of the 2 slots that -np needs after "
        "waiting 1.0 s (--elastic-timeout)"], r.stderr
    assert r.stdout == ""


def test_discovery_script_that_fails_after_its_first_run_is_a_warning_once(tmp_path):
    # Horovod's rule: only the first run must work; later failures keep the hosts listed before.
    calls = tmp_path / "calls"
    script = discovery_script(tmp_path, "echo run >> %s\n"
                                        "[ $(wc -l < %s) -gt 1 ] && echo 'cloud API down' >&2 "
                                        "&& exit 5\n"
                                        "echo 127.0.0.1:1" % (calls, calls))
    r = kolorun("-np", "1", "--host-discovery-script", script, "-x",
                "ELASTIC_TEST_DIR=%s" % tmp_path, "-x", "WANT_CALLS=4", PYTHON, WORKER, "idle",
                timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "WORKER rank=0 gen=0 done size=1" in out, out
    warnings = [l for l in elastic_lines(r) if "warning" in l]
    assert warnings == [
        "kolorun: elastic: warning: host discovery script '%s' exited with code 5: cloud API "
        "down; keeping the hosts it listed before" % script], out


@pytest.mark.parametrize("body,message", [
    ("echo 'no cloud here' >&2; exit 3", "' exited with code 3: no cloud here"),
    ("echo 127.0.0.1:2; echo 'hello world'",
     "' printed line 2 'hello world' is not 'host' or 'host:slots'"),
    ("echo 127.0.0.1:two", "' printed line 1 '127.0.0.1:two' is not 'host' or 'host:slots'"),
    ("echo a:2; echo a:3", "' printed line 2 'a:3' gives host a 3 slots after an earlier line gave 2"),
])
def test_discovery_script_that_fails_or_prints_garbage_ends_before_any_rank(tmp_path, body,
                                                                            message):
    if "host:slots" in message:
        message += " (slots a whole number >= 1)"
    script = discovery_script(tmp_path, body)
    r = kolorun("-np", "2", "--host-discovery-script", script, PYTHON, WORKER, "grow", timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        "kolorun: host discovery script '" + script + message], r.stderr
    assert r.stdout == ""


def test_discovery_script_that_cannot_run(tmp_path):
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")  # not executable
    r = kolorun("-np", "2", "--host-discovery-script", str(script), PYTHON, WORKER, "grow",
                timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        "kolorun: host discovery script '%s' exited with code 127: cannot run it: Permission "
        "denied" % script], r.stderr


def test_dry_run_shows_the_first_incarnation_with_the_elastic_variables(tmp_path):
    script = discovery_script(tmp_path, "echo 127.0.0.1:3")
    r = kolorun("-np", "2", "--max-np", "2", "--host-discovery-script", script, "--dry-run",
                PYTHON, WORKER, "grow", timeout=60)
    assert r.returncode == 0, r.stderr
    assert re.search(r"KOLO_ELASTIC=1 KOLO_ELASTIC_GENERATION=0 KOLO_ELASTIC_JOB=[0-9a-f]{32} ",
                     r.stdout), r.stdout
    # min(--max-np, slots)
    assert (" -n 2 -hosts 127.0.0.1" if HYDRA else " -np 2 -H 127.0.0.1:2 ") in r.stdout, r.stdout
    assert "KOLORUN_TOKEN" not in re.split(r" \S*(?:mpirun|mpiexec\.hydra) (?=-)", r.stdout)[0], r.stdout
