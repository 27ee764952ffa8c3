"""End-to-end tests of kolorun with real processes (all traffic on loopback).

Run by CTest: /usr/bin/python3 -m pytest test/launcher, with KOLORUN,
PRINT_RANKS and AVERAGE_TENSORS pointing at the built programs.
"""
import os
import re
import shutil
import subprocess
import time

import pytest

from netns_host import namespace_host
from processes import no_process_matches
from which_mpi import (DAEMON, DAEMON_FAILED, FAMILY, HYDRA, MPI_NAME, MPIRUN_PROCESS,
                       NONZERO_EXIT, OPEN_MPI_5, forwarded_names, hosts_words, needs_kolo,
                       remote_agent_args)

KOLORUN = os.environ["KOLORUN"]
PRINT_RANKS = os.environ["PRINT_RANKS"]
AVERAGE_TENSORS = os.environ["AVERAGE_TENSORS"]
PYTHON = "/usr/bin/python3"
PYTHON_DIR = os.environ.get("TEST_PYTHON_DIR", "")  # the binding, where this build has it
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_SSH = os.path.join(HERE, "fake_ssh.sh")
# Through the ssh stand-in: other hosts on this machine (docs/launcher.md).
FAKE_HOSTS = remote_agent_args(FAKE_SSH)
# The program whose ranks print their view of the job (print_ranks.cc; under Hydra, until kolo
# runs there, mpi_probe.c), by the name the process table gives it.
PROBE = os.path.basename(PRINT_RANKS)[:15]


def kolorun(*args, timeout=60, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([KOLORUN, *args], capture_output=True, text=True, timeout=timeout,
                          env=full_env)


def script(tmp_path, body):
    path = tmp_path / "script.py"
    path.write_text(body)
    return str(path)


ENV_SCRIPT = """
import os
keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
        "GROUP_WORLD_SIZE", "TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "MY_SETTING", "KOLO_CYCLE_TIME"]
# Unbuffered fragments: several write() calls per line.
print("ENV", *[k + "=" + os.environ.get(k, "-") for k in keys])
"""


def parse_env_lines(stdout):
    ranks = {}
    for line in stdout.splitlines():
        m = re.match(r"\[(\d+)\]<stdout>:ENV (.*)$", line)
        assert m, "not a whole tagged line: %r" % line
        ranks[int(m.group(1))] = dict(kv.split("=", 1) for kv in m.group(2).split())
    return ranks


def test_every_rank_gets_the_environment_other_libraries_expect(tmp_path):
    r = kolorun("-np", "2", "-x", "MY_SETTING=hello", "--cycle-time-ms", "2", PYTHON,
                script(tmp_path, ENV_SCRIPT), env={"PYTHONUNBUFFERED": "1"})
    assert r.returncode == 0, r.stderr
    ranks = parse_env_lines(r.stdout)
    assert sorted(ranks) == [0, 1]
    ports = set()
    for rank, env in ranks.items():
        # The MPI's own rank: Open MPI's name, or Hydra's PMI's.
        assert env["RANK"] == str(rank) == env["PMI_RANK" if HYDRA else "OMPI_COMM_WORLD_RANK"]
        assert env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "2" and env["LOCAL_WORLD_SIZE"] == "2"
        assert env["NODE_RANK"] == "0" == env["GROUP_RANK"]
        assert env["GROUP_WORLD_SIZE"] == "1" and env["TORCHELASTIC_RUN_ID"] == "kolorun"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["MY_SETTING"] == "hello"
        assert env["KOLO_CYCLE_TIME"] == "2"
        ports.add(env["MASTER_PORT"])
    assert len(ports) == 1 and int(ports.pop()) > 0


def test_two_hosts_over_loopback_give_right_local_node_and_cross_ranks():
    r = kolorun("-np", "4", "-H", "127.0.0.1:2,127.0.0.2:2", "--mpi-args",
                FAKE_HOSTS, PRINT_RANKS, timeout=90)
    assert r.returncode == 0, r.stdout + r.stderr
    seen = {}
    for line in r.stdout.splitlines():
        m = re.match(r"\[(\d+)\]<stdout>:rank (\d+) size 4 local (\d+)/2 cross (\d+)/2 sum 10$", line)
        assert m, line
        seen[int(m.group(1))] = (int(m.group(2)), int(m.group(3)), int(m.group(4)))
    # Ranks 0,1 on the first host, 2,3 on the second: local = rank % 2, cross = host index.
    assert seen == {0: (0, 0, 0), 1: (1, 1, 0), 2: (2, 0, 1), 3: (3, 1, 1)}


def test_two_hosts_node_rank_and_hostname(tmp_path):
    body = ("import os, socket\nprint('N', os.environ['NODE_RANK'], os.environ['LOCAL_RANK'], "
            "os.environ['GROUP_WORLD_SIZE'], socket.gethostname())\n")
    r = kolorun("-np", "4", "-H", "127.0.0.1:2,127.0.0.2:2", "--mpi-args",
                FAKE_HOSTS, PYTHON, script(tmp_path, body), timeout=90)
    assert r.returncode == 0, r.stderr
    lines = dict(re.match(r"\[(\d+)\]<stdout>:N (.*)$", l).groups() for l in r.stdout.splitlines())
    assert lines["2"].startswith("1 0 2 kolo-127.0.0.2")
    assert lines["3"].startswith("1 1 2 kolo-127.0.0.2")
    assert lines["0"].startswith("0 0 2 ") and lines["1"].startswith("0 1 2 ")


def process_tree(root):
    """root and every process below it (mpirun, the daemons, the ranks)."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = open("/proc/%s/stat" % entry).read()
            except OSError:
                continue
            children.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += children.get(pid, [])
    return tree


def listening_sockets_of_a_running_job(tmp_path, *args, namespaces=()):
    """(local address, process name) of every TCP socket the job listens on (here and in
    the network `namespaces` of other hosts), taken while both ranks hold the job after
    MPI's first allreduce."""
    hold = tmp_path / "hold"
    p = subprocess.Popen([KOLORUN, "-np", "2", *args, PRINT_RANKS, str(hold)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        printed = [p.stdout.readline(), p.stdout.readline()]
        assert all("sum 3" in line for line in printed), printed
        tree = process_tree(p.pid)
        ss = "".join(subprocess.run(prefix + ["ss", "-tlnpH"], capture_output=True, text=True,
                                    check=True).stdout
                     for prefix in [[]] + [["ip", "netns", "exec", ns] for ns in namespaces])
    finally:
        hold.write_text("")
        _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    sockets = []
    for line in ss.splitlines():
        for name, pid in re.findall(r'\("([^"]+)",pid=(\d+)', line):
            if int(pid) in tree:
                sockets.append((line.split()[3], name))
    return sockets


def only_loopback(sockets):
    return all(re.match(r"(127\.\d+\.\d+\.\d+|\[::1\]):\d+$", address) for address, _ in sockets)


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_a_job_on_one_host_listens_on_loopback_only(tmp_path):
    sockets = listening_sockets_of_a_running_job(tmp_path)
    assert only_loopback(sockets), sockets
    # Shared memory between Open MPI's ranks: no MPI transport socket at all. (MPICH's UCX
    # keeps a TCP listener, on loopback.)
    assert HYDRA or not [s for s in sockets if s[1] == PROBE], sockets
    assert {"kolorun", MPIRUN_PROCESS} <= {name for _, name in sockets}, sockets


# What listens on the other host besides the ranks: Open MPI's daemon; none of Hydra's proxies.
REMOTE_LISTENERS = set() if HYDRA else {DAEMON}


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
@pytest.mark.skipif(OPEN_MPI_5, reason="Open MPI 5's PRRTE takes no loopback channel where "
                    "another interface exists (mpirun exits 213), so across hosts reached over "
                    "loopback its mpirun and daemons talk, and listen, on that other interface")
def test_a_job_across_hosts_listens_on_the_interface_that_reaches_them(tmp_path):
    # 127.0.0.2 is reached through lo: every listener of mpirun, the other
    # host's daemon and the ranks' TCP transport is on lo's addresses.
    sockets = listening_sockets_of_a_running_job(
        tmp_path, "-H", "127.0.0.1:1,127.0.0.2:1", "--mpi-args", FAKE_HOSTS)
    assert only_loopback(sockets), sockets
    assert {"kolorun", MPIRUN_PROCESS, PROBE} | REMOTE_LISTENERS <= {n for _, n in sockets}, sockets


@pytest.mark.skipif(shutil.which("ss") is None, reason="needs ss (iproute2)")
def test_a_job_across_hosts_on_a_real_network_listens_there_only(tmp_path):
    # The other host in a network namespace behind a veth link (10.232.0.0/24): mpirun,
    # its daemon there and the ranks' TCP transport listen on that network and loopback,
    # never on every interface, on Open MPI 4.1 and 5 alike (the bind shim).
    with namespace_host("10.232.0.2", "10.232.0.1", "kolo-l") as ns:
        sockets = listening_sockets_of_a_running_job(
            tmp_path, "-H", "10.232.0.1:1,10.232.0.2:1", "--mpi-args",
            FAKE_HOSTS, namespaces=[ns])
    wide = [s for s in sockets
            if not re.match(r"(127\.\d+\.\d+\.\d+|\[::1\]|10\.232\.0\.[12]):\d+$", s[0])]
    assert not wide, sockets
    assert {"kolorun", MPIRUN_PROCESS, PROBE} | REMOTE_LISTENERS <= {n for _, n in sockets}, sockets
    remote = DAEMON if not HYDRA else PROBE
    assert any(a.startswith("10.232.0.2:") and n == remote for a, n in sockets), sockets


@needs_kolo
def test_the_cpp_main_job_runs_under_kolorun():
    r = kolorun("-np", "2", AVERAGE_TENSORS)
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:ranks: 2, weights identical across ranks: yes" in r.stdout


FAIL_SCRIPT = """
import os, signal, sys, time
if os.environ["RANK"] == "1":
    print("marker-%s" % sys.argv[2], flush=True)
    if sys.argv[1] == "exit":
        sys.exit(3)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError("bad batch on rank 1")
time.sleep(60)
"""


def test_rank_exit_code_becomes_kolorun_exit_code_and_is_named(tmp_path):
    tag = "exit%d" % os.getpid()
    start = time.monotonic()
    r = kolorun("-np", "2", PYTHON, script(tmp_path, FAIL_SCRIPT), "exit", tag)
    assert r.returncode == 3
    # Hydra says nothing of a rank that exits without MPI (kolorun ends the job itself).
    log = r"(?: \(%s's messages: \S+\))" % MPI_NAME + ("?" if HYDRA else "")
    assert re.search(r"kolorun: rank 1 on host \S+ exited with code 3: see its \[1\]<stderr> lines "
                     r"above; the other ranks were stopped(%s)\n$" % log, r.stderr), r.stderr
    assert time.monotonic() - start < 20
    assert no_process_matches(tag)


def test_rank_killed_by_sigkill_ends_the_job_within_seconds(tmp_path):
    tag = "kill%d" % os.getpid()
    start = time.monotonic()
    r = kolorun("-np", "2", PYTHON, script(tmp_path, FAIL_SCRIPT), "kill", tag)
    elapsed = time.monotonic() - start
    assert r.returncode == 137
    assert "kolorun: rank 1 on host" in r.stderr and "killed by signal 9 (SIGKILL)" in r.stderr
    assert elapsed < 10, elapsed
    assert no_process_matches(tag)


def open_mpi_log(stderr):
    m = re.search(r"\(%s's messages: (\S+)\)$" % MPI_NAME, stderr.rstrip())
    assert m, stderr
    return open(m.group(1)).read()


def test_kolorun_speaks_alone_when_a_rank_fails():
    r = kolorun("-np", "2", "/bin/false")
    assert r.returncode == 1
    # One line, kolorun's; Open MPI's banners went to the log it names.
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kolorun: rank "), r.stderr
    assert "exited with code 1" in lines[0]
    assert HYDRA or NONZERO_EXIT in open_mpi_log(r.stderr)


def test_open_mpi_failing_to_start_is_one_line_that_quotes_it(tmp_path):
    # A remote shell that answers kolorun's check but cannot start Open MPI's daemon.
    agent = tmp_path / "agent.sh"
    agent.write_text('#!/bin/sh\ncase "$*" in *%s*) exit 1 ;; esac\nexec %s "$@"\n' % (DAEMON, FAKE_SSH))
    agent.chmod(0o755)
    r = kolorun("-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1", "--output-filename", str(tmp_path),
                "--mpi-args", remote_agent_args(str(agent)), "/bin/true")
    assert r.returncode != 0
    assert len(r.stderr.splitlines()) == 1, r.stderr
    said = DAEMON_FAILED + (" This could" if OPEN_MPI_5 else "")
    launcher, code = ("mpiexec.hydra", 255) if HYDRA else ("mpirun", 1)
    assert r.stderr.startswith("kolorun: %s exited with code %d before any rank reported: "
                               "%s says \"%s" % (launcher, code, MPI_NAME, said)), r.stderr
    assert r.stderr.rstrip().endswith("\" (%s's messages: %s/mpirun.log)" % (MPI_NAME, tmp_path)), \
        r.stderr
    assert DAEMON_FAILED in (tmp_path / "mpirun.log").read_text().replace("\n", " ")


def test_a_program_that_cannot_start_is_found_on_every_host_before_launch(tmp_path):
    two_hosts = ["-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1", "--mpi-args",
                 FAKE_HOSTS]
    r = kolorun(*two_hosts, "kolo_no_such_program", timeout=30)
    assert r.returncode == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 2, r.stderr  # every host's problem, at once
    for host, line in zip(["127.0.0.1", "127.0.0.2"], lines):
        assert line.startswith("kolorun: host '%s': 'kolo_no_such_program' is not found on the "
                               "ranks' PATH (" % host), line
    text = tmp_path / "notes.txt"
    text.write_text("not a program\n")
    r = kolorun(*two_hosts, str(text), timeout=30)
    assert r.returncode == 2
    assert r.stderr.count("'%s' is not executable (chmod +x" % text) == 2, r.stderr
    # The ranks' PATH is the one checked: -x PATH=... changes where a name is found.
    r = kolorun("-np", "1", "-x", "PATH=" + str(tmp_path), "true")
    assert r.returncode == 2 and "'true' is not found on the ranks' PATH (%s)" % tmp_path in r.stderr
    r = kolorun("-np", "2", "/nonexistent/prog")
    assert r.returncode == 2 and r.stderr == "kolorun: host 'localhost': '/nonexistent/prog' does not exist\n"


def test_an_unreachable_remote_shell_is_named_before_launch():
    r = kolorun("-np", "2", "-H", "127.0.0.1:1,127.0.0.2:1", "--mpi-args",
                remote_agent_args("/bin/false"), "/bin/true", timeout=30)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == ("kolorun: host '127.0.0.2': cannot check the program there through "
                        "/bin/false: it ended with code 1, saying nothing; can this user log in "
                        "there without a password?\n")


def test_python_exception_shows_the_traceback_of_that_rank(tmp_path):
    r = kolorun("-np", "2", PYTHON, script(tmp_path, FAIL_SCRIPT), "raise", "x")
    assert r.returncode == 1
    assert "[1]<stderr>:Traceback (most recent call last):" in r.stderr
    assert "[1]<stderr>:ValueError: bad batch on rank 1" in r.stderr
    assert "kolorun: rank 1 on host" in r.stderr


def test_output_filename_writes_one_file_per_rank(tmp_path):
    out = tmp_path / "logs"
    r = kolorun("-np", "2", "--output-filename", str(out), PYTHON, "-c",
                "import os; print('hello from', os.environ['RANK'])")
    assert r.returncode == 0, r.stderr
    assert (out / "rank.0" / "stdout").read_text() == "hello from 0\n"
    assert (out / "rank.1" / "stdout").read_text() == "hello from 1\n"
    assert "[1]<stdout>:hello from 1" in r.stdout  # and the live console


def test_dry_run_prints_the_command_and_settings():
    r = kolorun("-np", "2", "--dry-run", "--fusion-threshold-mb", "32", "--no-stall-check",
                "--binding", "core", "prog", "--flag")
    assert r.returncode == 0, r.stderr
    assert "KOLO_FUSION_THRESHOLD=33554432" in r.stdout and "KOLO_STALL_CHECK_DISABLE=1" in r.stdout
    binding = {"openmpi": "--tag-output -np 2 -H localhost:2 --bind-to core",
               "mpich": "-n 2 -hosts localhost:2 -bind-to core",
               "impi": "I_MPI_PIN_DOMAIN=core"}[FAMILY]
    assert hosts_words(2, "localhost", 2) in r.stdout and binding in r.stdout, r.stdout
    assert r.stdout.rstrip().endswith("prog --flag")
    # Remote hosts only see what is passed by name (local ranks inherit everything).
    for name in ("KOLO_FUSION_THRESHOLD", "MASTER_ADDR", "MASTER_PORT", "KOLORUN_HOSTS", "PATH"):
        assert name in forwarded_names(r.stdout), name


def test_dry_run_shows_the_autotune_settings():
    r = kolorun("-np", "2", "--dry-run", "--autotune", "--autotune-log-file", "at.csv",
                "--autotune-warmup-samples", "1", "--autotune-steps-per-sample", "4",
                "--autotune-file", "tuned.env", "--autotune-bayes-opt-max-samples", "40", "prog")
    assert r.returncode == 0, r.stderr
    for setting in ("KOLO_AUTOTUNE=1", "KOLO_AUTOTUNE_LOG=at.csv", "KOLO_AUTOTUNE_WARMUP_SAMPLES=1",
                    "KOLO_AUTOTUNE_STEPS_PER_SAMPLE=4", "KOLO_AUTOTUNE_FILE=tuned.env"):
        assert setting in r.stdout, setting
        assert setting.split("=")[0] in forwarded_names(r.stdout), setting
    assert ("kolorun: --autotune-bayes-opt-max-samples is accepted and ignored: kolo's autotune is "
            "a coordinate search") in r.stderr
    r = kolorun("-np", "2", "--dry-run", "--no-autotune", "prog")
    assert r.returncode == 0, r.stderr
    assert "KOLO_AUTOTUNE=0" in r.stdout


def test_hosts_come_from_hostfile_or_scheduler(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# two slots here\nlocalhost slots=2\n")
    r = kolorun("--hostfile", str(hostfile), "--dry-run", "prog")
    assert hosts_words(2, "localhost", 2) in r.stdout
    slurm = {"SLURM_JOB_NODELIST": "localhost", "SLURM_TASKS_PER_NODE": "3"}
    r = kolorun("--verbose", "--dry-run", "prog", env=slurm)
    assert "hosts from Slurm: localhost:3" in r.stderr and hosts_words(3, "localhost", 3) in r.stdout
    r = kolorun("-np", "2", "--hostfile", str(hostfile), PYTHON, "-c", "print('ok')")
    assert r.returncode == 0 and r.stdout.count("ok") == 2


@pytest.mark.parametrize("args,message", [
    (["-np", "5", "-H", "127.0.0.1:2,127.0.0.2:2", "true"], "-np 5 asks for more ranks than the 4 slots"),
    (["-H", "a:two", "true"], "slot count 'two' is not a positive whole number"),
    (["-H", "a:2,,b", "true"], "empty entry"),
    (["--hostfile", "/nonexistent/hosts", "true"], "cannot read '/nonexistent/hosts'"),
    (["-H", "a:1", "--hostfile", "/etc/hostname", "true"], "cannot be used together"),
    (["-np", "1", "-H", "a" * 64 + ".invalid:1", "true"], "does not resolve"),
    (["-np", "1", "-H", "127.0.0.2:1", "-p", "2222", "--start-timeout", "3", "true"],
     "nothing answers on ssh port 2222"),
    (["-np", "2", "-x", "KOLO_UNSET_FOR_TEST", "true"], "is not set in kolorun's environment"),
    (["-np", "2"], "no command to run"),
    (["-np", "0", "true"], "not in range"),
    (["-np", "2", "--bogus", "true"], "kolorun: unknown option '--bogus' (kolorun --help"),
    (["-np", "2", "--hostfle", "h", "true"], "unknown option '--hostfle'; did you mean '--hostfile'?"),
    (["--log-level", "loud", "true"], "loud"),
    (["--mpi-args", "'unterminated", "true"], "unterminated quote"),
    # horovodrun flags that kolorun refuses, naming the flag and the kolorun way.
    (["-np", "2", "--gloo", "true"], "--gloo is not supported: kolo runs on MPI; drop --gloo"),
    (["--autotune-steps-per-sample", "0", "true"], "--autotune-steps-per-sample"),
    # Elastic mode's flags: checked against each other before anything starts.
    (["-np", "2", "--min-np", "3", "true"], "--min-np 3 is more than -np 2"),
    (["-np", "4", "--max-np", "2", "true"], "--max-np 2 is less than -np 4"),
    (["--host-discovery-script", "d.sh", "true"], "elastic mode needs -np"),
    (["-np", "2", "--host-discovery-script", "d.sh", "-H", "a:2", "true"],
     "it cannot be used with -H or --hostfile"),
    (["-np", "2", "--reset-limit", "1", "true"], "--reset-limit applies to elastic mode"),
    (["-np", "2", "--min-np", "2", "--blacklist-cooldown-range", "0", "10", "true"],
     "--blacklist-cooldown-range 0 10: expected MIN <= MAX within 1 and 3600 seconds"),
    (["--config-file", "c.yaml", "true"], "does not read horovodrun's YAML file"),
    (["--binding-args=--rankfile r", "true"], "use --binding"),
])
def test_bad_input_ends_with_one_clear_line_and_starts_nothing(args, message):
    r = kolorun(*args, timeout=30)
    assert r.returncode == 2, r.stderr
    assert message in r.stderr, r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert r.stdout == ""  # no rank ran


def test_help_prints_one_usage_line():
    r = kolorun("--help")
    assert r.returncode == 0 and r.stderr == ""
    assert r.stdout.lower().count("usage:") == 1, r.stdout
    assert "usage: kolorun [options] [--] command args..." in r.stdout


def test_options_after_the_program_are_the_programs():
    r = kolorun("-np", "2", PYTHON, "-c", "import sys; print(sys.argv[1:])", "--lr", "1")
    assert r.returncode == 0, r.stderr
    assert "[1]<stdout>:['--lr', '1']" in r.stdout


def test_check_build_and_version():
    r = kolorun("--check-build", env={"KOLO_PYTHON": PYTHON, "PYTHONPATH": PYTHON_DIR})
    assert r.returncode == 0 and MPI_NAME in r.stdout and "PyTorch" in r.stdout
    assert "Python           %s (3." % PYTHON in r.stdout and "from KOLO_PYTHON" in r.stdout
    # Debian's interpreter has no TensorFlow (the project's .venv does).
    assert re.search(r"TensorFlow +\S", r.stdout) and re.search(r"Keras +\S", r.stdout), r.stdout
    assert r.stderr == ""
    assert kolorun("--version").stdout.startswith("kolorun ")
    # Which mpirun a job runs, its version and dialect, and why that one.
    why = "from KOLO_MPI_HOME" if os.environ.get("KOLO_MPI_HOME") else "the first mpirun on PATH"
    said = {"openmpi": r"mpirun: Open MPI %s\.\d+\.\d+ \(%s\)" % (
                "5" if OPEN_MPI_5 else "4", "PRRTE" if OPEN_MPI_5 else "ORTE"),
            "mpich": r"mpiexec\.hydra: MPICH \d+\.\d+\.\d+ \(Hydra\)",
            "impi": r"mpiexec\.hydra: Intel MPI 20\d\d\.\d+\.\d+ \(Hydra\)"}[FAMILY]
    assert re.search(r"MPI \(job\) +/\S*%s, %s\n" % (said, why), r.stdout), r.stdout
    # The ABIs the package has a libkolo for, the one the binding took and why, its libmpi.
    if not os.path.isdir(PYTHON_DIR):
        return
    assert re.search(r"MPI \(built\) +Open MPI(, the MPICH ABI, the MPI-5 standard ABI)?\n",
                     r.stdout), r.stdout
    assert re.search(r"Python binding +yes: on (Open MPI|the MPICH ABI|the MPI-5 standard ABI) "
                     r"\(.+\); libmpi: /\S+\n", r.stdout), r.stdout


def test_mpi_home_names_the_mpirun_and_refuses_what_kolo_cannot_run_on(tmp_path):
    r = kolorun("-np", "1", "--mpi-home", str(tmp_path / "none"), "true")
    assert r.returncode == 2
    assert r.stderr == ("kolorun: --mpi-home=%s: neither an mpirun nor an MPI "
                        "installation's folder (no executable %s/bin/mpirun)\n"
                        % (tmp_path / "none", tmp_path / "none")), r.stderr
    # An mpirun that is neither Open MPI's nor Hydra's: refused before anything starts.
    other = tmp_path / "other" / "bin"
    other.mkdir(parents=True)
    (other / "mpirun").write_text("#!/bin/sh\necho 'mpirun (Some MPI) 1.0'\n")
    (other / "mpirun").chmod(0o755)
    r = kolorun("-np", "1", "true", env={"KOLO_MPI_HOME": str(tmp_path / "other")})
    assert r.returncode == 2
    assert r.stderr.startswith("kolorun: %s/mpirun (from KOLO_MPI_HOME): this mpirun is neither "
                               "Open MPI's nor Hydra's (MPICH, Intel MPI)" % other), r.stderr
    # The flag wins over the variable; --dry-run shows the mpirun (Hydra: mpiexec.hydra) by
    # its path.
    home = os.environ.get("KOLO_MPI_HOME") or os.path.dirname(os.path.dirname(
        os.path.realpath(shutil.which("mpirun"))))
    r = kolorun("-np", "1", "--mpi-home", home, "--dry-run", "true",
                env={"KOLO_MPI_HOME": str(tmp_path / "other")})
    assert r.returncode == 0, r.stderr
    assert " %s/bin/%s " % (home, "mpiexec.hydra" if HYDRA else "mpirun") in r.stdout, r.stdout


def test_check_build_says_which_interpreter_it_asked_when_kolo_python_is_unset():
    env = {k: v for k, v in os.environ.items() if k != "KOLO_PYTHON"}
    r = subprocess.run([KOLORUN, "--check-build"], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 0, r.stderr
    # The build tree's kolorun has no python3 beside it: the default.
    assert "Python           /usr/bin/python3 (3." in r.stdout
    assert "the default (KOLO_PYTHON is unset)" in r.stdout


FAKE_PYTHON = """#!/bin/sh
# Answers kolorun --check-build's questions the way a Python would.
case "$2" in
  *platform*) echo 3.99.0 ;;
  *tensorflow*) printf '2.99.0-fake\\n3.99.1-fake\\n' ;;
  *torch*) echo 9.9.9-fake ;;
  *kolo*) printf 'Open MPI, the MPICH ABI\nyes: on Open MPI (fake); libmpi: /fake/libmpi.so.40\n' ;;
esac
"""


def fake_python(path, text=FAKE_PYTHON):
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_check_build_runs_kolo_python_without_a_shell(tmp_path):
    # A path with a space, quotes and a command substitution: a shell would
    # split it, or run the substitution; an argv vector takes it as it is.
    folder = tmp_path / "my python's $(touch INJECTED) dir"
    folder.mkdir()
    python = fake_python(folder / 'py"thon')
    r = kolorun("--check-build", env={"KOLO_PYTHON": str(python)})
    assert r.returncode == 0, r.stderr
    assert "Python           %s (3.99.0), from KOLO_PYTHON" % python in r.stdout
    assert "MPI (built)      Open MPI, the MPICH ABI\n" in r.stdout
    assert "Python binding   yes: on Open MPI (fake); libmpi: /fake/libmpi.so.40\n" in r.stdout
    assert "PyTorch          9.9.9-fake" in r.stdout
    assert "TensorFlow       2.99.0-fake" in r.stdout and "Keras            3.99.1-fake" in r.stdout
    assert not list(tmp_path.rglob("INJECTED")) and not os.path.exists("INJECTED")
    assert r.stderr == ""


def test_check_build_asks_the_python3_beside_an_installed_kolorun(tmp_path):
    # kolorun installed into a virtual environment (.venv/bin/kolorun) asks
    # .venv/bin/python3 when KOLO_PYTHON is unset.
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    shutil.copy(KOLORUN, bin_dir / "kolorun")
    python = fake_python(bin_dir / "python3")
    env = {k: v for k, v in os.environ.items() if k != "KOLO_PYTHON"}
    r = subprocess.run([str(bin_dir / "kolorun"), "--check-build"], capture_output=True,
                       text=True, timeout=60, env=env)
    assert r.returncode == 0, r.stderr
    assert "Python           %s (3.99.0), beside kolorun (KOLO_PYTHON is unset)" % python in r.stdout
    assert "TensorFlow       2.99.0-fake" in r.stdout


def test_check_build_names_an_import_that_kills_the_interpreter(tmp_path):
    # TensorFlow's wheels need AVX: without, the import dies of SIGILL. The
    # other frameworks' lines stay.
    python = fake_python(tmp_path / "python", FAKE_PYTHON.replace(
        "*tensorflow*) printf", "*tensorflow*) kill -ILL $$; printf"))
    r = kolorun("--check-build", env={"KOLO_PYTHON": str(python)})
    assert r.returncode == 0, r.stderr
    assert "PyTorch          9.9.9-fake" in r.stdout
    assert "TensorFlow       import failed: killed by signal 4" in r.stdout
    assert "Keras            import failed: killed by signal 4" in r.stdout


def test_check_build_says_why_the_binding_does_not_import(tmp_path):
    # An interpreter without kolo on its path: the import error, in one line.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["KOLO_PYTHON"] = PYTHON
    r = subprocess.run([KOLORUN, "--check-build"], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 0, r.stderr
    assert "MPI (built)      unknown: the Python binding does not import\n" in r.stdout, r.stdout
    assert ("Python binding   no: ModuleNotFoundError: No module named 'kolo'\n" in r.stdout
            ), r.stdout


def test_check_build_says_a_missing_kolo_python_is_not_found(tmp_path):
    missing = str(tmp_path / "no such python")
    r = kolorun("--check-build", env={"KOLO_PYTHON": missing})
    assert r.returncode == 0, r.stderr
    assert "Python           %s: not found; KOLO_PYTHON names the interpreter" % missing in r.stdout
    assert "Python binding   no" in r.stdout and "PyTorch          not found" in r.stdout
    assert "TensorFlow       not found" in r.stdout and "Keras            not found" in r.stdout
    assert r.stderr == ""  # nothing from a shell ("sh: 1: ...: not found")


def test_check_build_reads_kolo_python_as_a_setting():
    r = kolorun("--check-build", env={"KOLO_PYTHON": "/usr/bin/python3", "KOLO_CYCLE_TIME": "fast"})
    assert r.returncode == 2
    assert "kolorun: KOLO_CYCLE_TIME='fast' is not a number" in r.stderr


def test_rank_that_does_not_start_in_time_is_named(tmp_path):
    start = time.monotonic()
    r = kolorun("-np", "4", "-H", "127.0.0.1:2,127.0.0.2:2", "--start-timeout", "2", "--mpi-args",
                FAKE_HOSTS, PYTHON, "-c", "import time; time.sleep(30)",
                env={"FAKE_SSH_DELAY": "15"}, timeout=60)
    assert r.returncode == 2
    # Open MPI starts ranks only once every host's daemon is up, so the slow
    # host holds back all ranks; the message names them with their hosts.
    assert re.search(r"rank\(s\) .*2 \(127\.0\.0\.2\), 3 \(127\.0\.0\.2\) did not start within 2 s "
                     r"\(--start-timeout\)", r.stderr), r.stderr
    # Intel MPI's mpiexec.hydra ignores SIGTERM until its proxies are up: kolorun's teardown
    # kills it 5 s later, and stops reading 3 s after that (10.5 s in all, measured).
    assert time.monotonic() - start < (16 if FAMILY == "impi" else 12)


INTRUDER = """
import os, socket
host, port = os.environ["KOLORUN_RENDEZVOUS"].rsplit(":", 1)
if os.environ["RANK"] == "0":
    token = os.environ["KOLORUN_TOKEN"] if "{mode}" == "duplicate" else "not-the-token"
    s = socket.create_connection((host, int(port)))
    s.sendall(("KOLO1 %s 1 0 intruder 99\\n" % token).encode())
    print("reply", s.recv(100).decode().strip(), flush=True)
import time; time.sleep({sleep})
print("done", os.environ["RANK"], flush=True)
"""


def test_connection_without_the_token_is_refused_and_the_job_goes_on(tmp_path):
    r = kolorun("-np", "2", PYTHON, script(tmp_path, INTRUDER.format(mode="token", sleep=0.5)))
    assert r.returncode == 0, r.stderr
    assert "kolorun: refused a registration from 127.0.0.1" in r.stderr and "wrong job token" in r.stderr
    assert "[0]<stdout>:done 0" in r.stdout and "[1]<stdout>:done 1" in r.stdout


def test_two_processes_claiming_one_rank_end_the_job(tmp_path):
    r = kolorun("-np", "2", PYTHON, script(tmp_path, INTRUDER.format(mode="duplicate", sleep=30)),
                timeout=40)
    assert r.returncode == 2
    # Whichever registered first is named first: rank 0 sends the intruder's claim as
    # it starts, which may come before the real rank 1's (a slow start, under ASan).
    real, intruder = r"pid \d+ on host \S+", r"pid 99 on host intruder"
    assert re.search(r"kolorun: two processes claim rank 1: (%s and %s|%s and %s)"
                     % (real, intruder, intruder, real), r.stderr), r.stderr


def test_sigterm_to_kolorun_tears_the_job_down(tmp_path):
    tag = "sigterm%d" % os.getpid()
    p = subprocess.Popen([KOLORUN, "-np", "2", PYTHON, "-c",
                          "import time, sys; print('up', flush=True); time.sleep(60)", tag],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert "up" in p.stdout.readline()
    p.terminate()
    _, err = p.communicate(timeout=20)
    assert p.returncode == 128 + 15, err
    assert "stopped by" in err
    assert no_process_matches(tag)


def test_pin_gpus_gives_each_local_rank_its_own_gpu(tmp_path):
    body = "import os\nprint('CVD', os.environ['CUDA_VISIBLE_DEVICES'])\n"
    r = kolorun("-np", "2", "--pin-gpus", PYTHON, script(tmp_path, body))
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:CVD 0" in r.stdout and "[1]<stdout>:CVD 1" in r.stdout
    # The list the ranks were given is honoured.
    r = kolorun("-np", "2", "--pin-gpus", "-x", "CUDA_VISIBLE_DEVICES=5,7", PYTHON,
                script(tmp_path, body))
    assert r.returncode == 0, r.stderr
    assert "[0]<stdout>:CVD 5" in r.stdout and "[1]<stdout>:CVD 7" in r.stdout
    r = kolorun("-np", "2", "--pin-gpus", "-x", "CUDA_VISIBLE_DEVICES=5", PYTHON,
                script(tmp_path, body))
    assert r.returncode != 0
    assert "local rank 1 has no GPU of its own: CUDA_VISIBLE_DEVICES=5 lists 1" in r.stderr


def test_horovodrun_command_line_runs_after_renaming_horovodrun_to_kolorun():
    r = kolorun("--num-proc", "2", "--dry-run", "--disable-cache", "--network-interfaces", "lo",
                "--log-level", "FATAL", "--no-hierarchical-allreduce", "--stall-check-warning-time-seconds",
                "5", "prog", "-np", "3", "--gloo")
    assert r.returncode == 0, r.stderr
    assert hosts_words(2, "localhost", 2) in r.stdout
    assert "KOLO_LOG_LEVEL=error" in r.stdout and "KOLO_HIERARCHICAL_ALLREDUCE=0" in r.stdout
    assert "KOLO_STALL_CHECK_TIME_SECONDS=5" in r.stdout and "NCCL_SOCKET_IFNAME=lo" in r.stdout
    # The program's own flags are the program's, even horovodrun's names.
    assert r.stdout.rstrip().endswith("prog -np 3 --gloo")
    assert "kolorun: --disable-cache is accepted and ignored:" in r.stderr


def test_horovod_start_timeout_is_the_default_of_start_timeout():
    r = kolorun("-np", "1", "--dry-run", "true", env={"HOROVOD_START_TIMEOUT": "soon"})
    assert r.returncode == 2
    assert "HOROVOD_START_TIMEOUT='soon' is not a positive number of seconds" in r.stderr
    r = kolorun("-np", "1", "--start-timeout", "5", "--dry-run", "true",
                env={"HOROVOD_START_TIMEOUT": "soon"})
    assert r.returncode == 0, r.stderr
    # kolo's own name is read first, as every setting's
    r = kolorun("-np", "1", "--dry-run", "true",
                env={"KOLO_START_TIMEOUT": "later", "HOROVOD_START_TIMEOUT": "5"})
    assert r.returncode == 2
    assert "KOLO_START_TIMEOUT='later' is not a positive number of seconds" in r.stderr


@needs_kolo
def test_horovod_variables_reach_the_ranks_and_are_read_as_kolo_settings():
    env = {"HOROVOD_LOG_LEVEL": "info", "HOROVOD_CYCLE_TIME": "2", "HOROVOD_AUTOTUNE": "1",
           "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE": "0.75",
           "HOROVOD_FUSION_THRESHOLD": "1048576", "KOLO_FUSION_THRESHOLD": "2M"}
    r = kolorun("-np", "2", AVERAGE_TENSORS, env=env)
    assert r.returncode == 0, r.stderr
    assert ("[0]<stderr>:[kolo 0 INFO] Horovod settings: using HOROVOD_CYCLE_TIME=2 as "
            "KOLO_CYCLE_TIME, HOROVOD_LOG_LEVEL=info as KOLO_LOG_LEVEL, HOROVOD_AUTOTUNE=1 as "
            "KOLO_AUTOTUNE; not using HOROVOD_FUSION_THRESHOLD (KOLO_FUSION_THRESHOLD is set and "
            "wins)") in r.stderr
    assert ("[0]<stderr>:[kolo 0 WARNING] HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE is ignored: "
            "kolo's autotune is a coordinate search") in r.stderr
    # Fusion threshold and cycle time were given (HOROVOD_CYCLE_TIME too): autotune holds them.
    assert ("[0]<stderr>:[kolo 0 INFO] autotune: tuning from fusion threshold 2 MiB, cycle time "
            "2 ms, piece size 2 MiB: 1 fusion thresholds, 1 cycle times, 3 piece sizes") in r.stderr
    assert "[kolo 1 " not in r.stderr  # rank 0 alone reports the configuration
    # A value read as Horovod's strtol reads it, with one warning (rank 0) where that is
    # not what it says.
    r = kolorun("-np", "2", AVERAGE_TENSORS, env={"HOROVOD_FUSION_THRESHOLD": "64M"})
    assert r.returncode == 0, r.stderr
    assert ("[0]<stderr>:[kolo 0 WARNING] HOROVOD_FUSION_THRESHOLD='64M' is read as Horovod "
            "reads it, as 64 bytes: Horovod reads the number it starts with and ignores 'M'"
            ) in r.stderr
    assert r.stderr.count("HOROVOD_FUSION_THRESHOLD='64M' is read as") == 1, r.stderr
