"""Elastic jobs end to end on two loopback hosts (127.0.0.1 and 127.0.0.2, the
second started through fake_ssh.sh as another machine): kolorun's elastic
mode, the workers' commit store and kolo.torch.elastic together.

Each job is elastic_train.py, whose final parameters are exact in float64, so
they must equal reference.py's replay of the same sizes and restart points.
The test orders itself by the job's marks (reached.0.<rank>, written by every
rank at the pause step) and kolorun's own lines, never by sleeping.

Run by CTest with KOLORUN and TEST_PYTHON_DIR set; with ELASTIC_IN_PLACE=1 (and
KOLO_MPI_HOME naming Open MPI 5) the jobs recover in place (docs/elastic.md, "Reset in
place"): the survivors go on in the same processes, which the START lines' pids show.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import reference  # noqa: E402

KOLORUN = os.environ["KOLORUN"]
PYTHON_DIR = os.environ["TEST_PYTHON_DIR"]
FAKE_SSH = os.path.join(HERE, "..", "launcher", "fake_ssh.sh")
TRAIN = os.path.join(HERE, "elastic_train.py")
KERAS_TRAIN = os.path.join(HERE, "keras_elastic_train.py")
HOST_A, HOST_B, HOST_C = "127.0.0.1", "127.0.0.2", "127.0.0.3"
IN_PLACE = os.environ.get("ELASTIC_IN_PLACE") == "1"
# Each job bounds its own waits (wait_reached, finish); this is conftest's backstop.
pytestmark = pytest.mark.limit_s(600)


class Job:
    """kolorun running `script` (elastic_train.py), its output collected by a thread."""

    def __init__(self, tmp_path, hosts, args, pause_step, script=TRAIN, go_ranks=(),
                 extra_env=None):
        self.dir = tmp_path
        self.hosts_file = tmp_path / "hosts"
        self.set_hosts(hosts)
        discover = tmp_path / "discover.sh"
        discover.write_text(f"#!/bin/sh\ncat {self.hosts_file}\n")
        discover.chmod(0o755)
        env = dict(os.environ, PYTHONPATH=PYTHON_DIR, ELASTIC_TEST_DIR=str(tmp_path),
                   ELASTIC_PAUSE_STEP=str(pause_step),
                   ELASTIC_GO_RANKS=",".join(str(r) for r in go_ranks), **(extra_env or {}))
        cmd = [KOLORUN, *args, "--host-discovery-script", str(discover),
               "--mpi-args", "--mca plm_rsh_agent " + FAKE_SSH, sys.executable, script]
        self.lines = []
        self.seen = threading.Condition()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True, env=env, start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def set_hosts(self, hosts):
        tmp = self.hosts_file.with_suffix(".new")
        tmp.write_text("".join(h + "\n" for h in hosts))
        tmp.rename(self.hosts_file)  # the discovery script never sees half a file

    def _read(self):
        for line in self.proc.stdout:
            with self.seen:
                self.lines.append(line.rstrip("\n"))
                self.seen.notify_all()
        with self.seen:
            self.seen.notify_all()

    def output(self):
        with self.seen:
            return "\n".join(self.lines)

    def wait_line(self, pattern, timeout=90):
        """The first output line matching `pattern`; fails naming it after `timeout` s."""
        deadline = time.monotonic() + timeout
        with self.seen:
            while True:
                for line in self.lines:
                    if re.search(pattern, line):
                        return line
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self.reader.is_alive()):
                    pytest.fail(f"no line matching {pattern!r} within {timeout} s; output:\n"
                                + "\n".join(self.lines))
                self.seen.wait(min(left, 0.5))

    def wait_reached(self, ranks, timeout=90):
        """{rank: (pid, hostname)} once every rank wrote its mark at the pause step."""
        deadline = time.monotonic() + timeout
        marks = [self.dir / f"reached.0.{r}" for r in range(ranks)]
        while not all(m.exists() and m.read_text().endswith("\n") for m in marks):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.kill()
                pytest.fail(f"the {ranks} ranks did not all reach the pause step; output:\n"
                            + self.output())
            time.sleep(0.05)
        return {r: (int(m.read_text().split()[0]), m.read_text().split()[1])
                for r, m in enumerate(marks)}

    def finish(self, timeout=120):
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"kolorun did not end within {timeout} s; output:\n" + self.output())
        self.reader.join(10)
        return self.proc.returncode, self.output()

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def final_params(out):
    m = re.search(r"FINAL size=(\d+) step=(\d+) params=(.*)", out)
    assert m, "no FINAL line; output:\n" + out
    return int(m.group(1)), [float.fromhex(v) for v in m.group(3).split()]


def kill_host_b(job, timeout=90, entering=()):
    """SIGKILL to the ranks on 127.0.0.2 once all 4 ranks reached the pause step (and the
    `entering` ranks went on into the next step's allreduce); then the go-ahead, which a
    job that recovers in place needs to go on (a restarted one never reads it)."""
    ranks = job.wait_reached(4, timeout)
    deadline = time.monotonic() + timeout
    while not all((job.dir / f"entering.0.{r}").exists() for r in entering):
        if time.monotonic() > deadline or job.proc.poll() is not None:
            job.kill()
            pytest.fail(f"ranks {entering} did not go on past the pause; output:\n"
                        + job.output())
        time.sleep(0.05)
    on_b = [pid for pid, host in ranks.values() if host == "kolo-" + HOST_B]
    assert len(on_b) == 2, ranks
    for pid in on_b:
        os.kill(pid, signal.SIGKILL)
    (job.dir / "go.0").write_text("go\n")


def resumed_at_np2_from_step_4(out):
    """The job went on at np=2 from step 4's commit: restarted (a new process, generation 1)
    or, in place, in the process that was rank 0 before."""
    starts = re.findall(r"START gen=(\d+) size=(\d+) step=(\d+) pid=(\d+)", out)
    assert len(starts) == 2, out
    assert starts[1][1:3] == ("2", "4"), out
    if IN_PLACE:
        assert starts[1][3] == starts[0][3], out  # the same process
        assert re.search(r"kolorun: elastic: resumed in place at np=2 ", out), out
    else:
        assert starts[1][0] == "1" and starts[1][3] != starts[0][3], out


def test_killed_mid_epoch_the_job_goes_on_at_np2_from_the_last_commit(tmp_path):
    job = Job(tmp_path, [f"{HOST_A}:2", f"{HOST_B}:2"], ["-np", "4", "--min-np", "2"],
              pause_step=5)
    kill_host_b(job)
    code, out = job.finish()
    assert code == 0, out
    # Step 5 was not committed: the job resumes from step 4's commit, at np=2.
    resumed_at_np2_from_step_4(out)
    assert re.search(r"kolorun: elastic: .*" + re.escape(HOST_B), out), out
    size, params = final_params(out)
    assert size == 2
    assert params == reference.as_float64(reference.replay([(4, 4), (2, None)]))


# Ranks 0 and 1 (127.0.0.1) go on past the pause while 127.0.0.2's ranks wait there and
# are killed: at step 5 into step 6, whose allreduce waits for them; at step 6 into its
# commit, which waits for them too (the sampler's indices are shared before the save), so
# step 6's commit is complete nowhere. Either way the job goes on from step 4's commit.
@pytest.mark.parametrize("pause_step,entering", [
    pytest.param(5, (0, 1), id="wait_in_an_allreduce"),
    pytest.param(6, (), id="others_commit"),
])
def test_killed_while_the_others_went_on_the_job_continues_from_the_last_whole_commit(
        tmp_path, pause_step, entering):
    job = Job(tmp_path, [f"{HOST_A}:2", f"{HOST_B}:2"], ["-np", "4", "--min-np", "2"],
              pause_step=pause_step, go_ranks=(0, 1))
    kill_host_b(job, entering=entering)
    code, out = job.finish()
    assert code == 0, out
    resumed_at_np2_from_step_4(out)
    size, params = final_params(out)
    assert size == 2
    assert params == reference.as_float64(reference.replay([(4, 4), (2, None)]))


def test_a_host_added_by_discovery_grows_to_np4_at_the_next_commit(tmp_path):
    job = Job(tmp_path, [f"{HOST_A}:2"], ["-np", "2", "--min-np", "2", "--max-np", "4"],
              pause_step=3)
    job.wait_reached(2)
    job.set_hosts([f"{HOST_A}:2", f"{HOST_B}:2"])
    job.wait_line(r"kolorun: elastic: .*" + re.escape(HOST_B))
    (tmp_path / "go.0").write_text("go\n")
    code, out = job.finish()
    assert code == 0, out
    # A job started on this machine alone runs its transports on loopback: growing onto
    # another host restarts the workers, in place or not (docs/elastic.md).
    assert re.search(r"START gen=1 size=4 step=4\b", out), out
    size, params = final_params(out)
    assert size == 4
    assert params == reference.as_float64(reference.replay([(2, 4), (4, None)]))


in_place_only = pytest.mark.skipif(not IN_PLACE, reason="grows in place only on Open MPI 5")


def kill_one_rank_per_host(job):
    """SIGKILL to rank 1 (127.0.0.1) and rank 3 (127.0.0.2) once all 4 ranks reached the
    pause step: each host keeps one rank. Returns the pids of the survivors."""
    ranks = job.wait_reached(4)
    assert [h == "kolo-" + HOST_B for _, h in ranks.values()] == [False, False, True, True], \
        ranks
    for r in (1, 3):
        os.kill(ranks[r][0], signal.SIGKILL)
    (job.dir / "go.0").write_text("go\n")
    return ranks[0][0], ranks[2][0]


@in_place_only
def test_a_rank_killed_on_each_host_is_replaced_in_place(tmp_path):
    # The survivors go on at np=2 from step 4's commit; at step 8 they commit until the
    # replacements that rank 0 started on both hosts have joined; np=4 from there on.
    job = Job(tmp_path, [f"{HOST_A}:2", f"{HOST_B}:2"], ["-np", "4", "--min-np", "2"],
              pause_step=5, extra_env={"ELASTIC_HOLD_STEP": "8", "ELASTIC_FULL_SIZE": "4"})
    kill_one_rank_per_host(job)
    code, out = job.finish(timeout=240)
    assert code == 0, out
    starts = re.findall(r"START gen=(\d+) size=(\d+) step=(\d+) pid=(\d+)", out)
    assert [s[1:3] for s in starts] == [("4", "0"), ("2", "4"), ("4", "8")], out
    assert len({s[3] for s in starts}) == 1, out  # rank 0 stayed the same process
    assert re.search(r"kolorun: elastic: incarnation 1 grew in place: new process\(es\) on "
                     + re.escape(f"{HOST_A}:1,{HOST_B}:1"), out), out
    assert re.search(r"kolorun: elastic: resumed in place at np=4 ", out), out
    assert "starting incarnation 1" not in out, out  # no restart
    size, params = final_params(out)
    assert size == 4
    assert params == reference.as_float64(reference.replay([(4, 4), (2, 8), (4, None)]))


@in_place_only
def test_replacements_that_die_before_joining_are_given_up_and_the_job_goes_on(tmp_path):
    # The new processes exit before hvd.init(); rank 0 gives them up after
    # KOLO_START_TIMEOUT, kolorun offers their hosts no more, and the job ends at np=2.
    job = Job(tmp_path, [f"{HOST_A}:2", f"{HOST_B}:2"], ["-np", "4", "--min-np", "2"],
              pause_step=5, extra_env={"ELASTIC_HOLD_STEP": "8", "ELASTIC_FULL_SIZE": "4",
                                       "ELASTIC_NEW_PROCESS_FAILS": "1",
                                       "KOLO_START_TIMEOUT": "10"})
    kill_one_rank_per_host(job)
    job.wait_line(r"kolorun: elastic: the new process\(es\) on .* did not start or join",
                  timeout=180)
    (tmp_path / "hold.done").write_text("done\n")
    code, out = job.finish(timeout=240)
    # The job's own ranks ended well; mpirun passes on the new processes' exit code (3),
    # which kolorun reports as the job's (docs/elastic.md).
    assert code in (0, 3), out
    assert re.search(r"kolo: elastic: the new process\(es\) on .* did not start or join "
                     r"\(they did not initialize MPI within 10 s", out), out
    starts = re.findall(r"START gen=(\d+) size=(\d+) step=(\d+) pid=(\d+)", out)
    assert [s[1:3] for s in starts] == [("4", "0"), ("2", "4")], out
    size, params = final_params(out)
    assert size == 2
    assert params == reference.as_float64(reference.replay([(4, 4), (2, None)]))


@in_place_only
def test_replacements_that_die_while_joining_are_given_up_and_the_job_goes_on(tmp_path):
    # The new processes are killed once they initialized MPI, while they wait in
    # hvd.init() to join: rank 0's join with them ends without them, it names their hosts
    # in one line, kolorun offers those hosts no more, and the job goes on at np=2 in the
    # same processes.
    job = Job(tmp_path, [f"{HOST_A}:2", f"{HOST_B}:2"], ["-np", "4", "--min-np", "2"],
              pause_step=5, extra_env={"ELASTIC_HOLD_STEP": "8", "ELASTIC_FULL_SIZE": "4",
                                       "ELASTIC_NEW_PROCESS_DIES_JOINING": "1"})
    kill_one_rank_per_host(job)
    deadline = time.monotonic() + 180
    while not (tmp_path / "spawned").exists():
        if time.monotonic() > deadline or job.proc.poll() is not None:
            job.kill()
            pytest.fail("the new processes did not initialize MPI; output:\n" + job.output())
        time.sleep(0.05)
    new = [int(p.name.split(".")[1]) for p in tmp_path.glob("new.*")]
    assert len(new) == 2, new
    for pid in new:
        os.kill(pid, signal.SIGKILL)
    (tmp_path / "killed").write_text("killed\n")
    line = job.wait_line(r"kolo: elastic: the new process\(es\) on .* did not start or join",
                         timeout=180)
    (tmp_path / "hold.done").write_text("done\n")
    code, out = job.finish(timeout=240)
    assert re.search(re.escape(f"{HOST_A}:1,{HOST_B}:1") + r" did not start or join \(.*"
                     r"(died after initializing MPI|stopped).*\); the job goes on without them",
                     line), out
    # The job's own ranks ended well; mpirun may pass on the killed processes' end.
    assert code in (0, 137), out
    starts = re.findall(r"START gen=(\d+) size=(\d+) step=(\d+) pid=(\d+)", out)
    assert [s[1:3] for s in starts] == [("4", "0"), ("2", "4")], out
    assert len({s[3] for s in starts}) == 1, out  # no restart
    assert "grew in place" not in out, out
    size, params = final_params(out)
    assert size == 2
    assert params == reference.as_float64(reference.replay([(4, 4), (2, None)]))


@in_place_only
def test_the_training_ends_before_joining_the_new_processes_end_and_the_job_ends_with_0(tmp_path):
    # The survivors go on at np=2 from step 4's commit and rank 0 starts new processes on
    # both hosts; these wait before hvd.init() until the training has ended. Rank 0 then
    # waits for their MPI_Init and tells them there is nothing to join: they exit 0 (a new
    # process whose parent had gone failed in MPI_Init, and mpirun with it), and the job
    # ends well at np=2.
    job = Job(tmp_path, [f"{HOST_A}:2", f"{HOST_B}:2"], ["-np", "4", "--min-np", "2"],
              pause_step=5, extra_env={"ELASTIC_NEW_PROCESS_WAITS": "1"})
    kill_one_rank_per_host(job)
    code, out = job.finish(timeout=240)
    assert code == 0, out
    assert re.search(r"kolo: elastic: starting 2 new process\(es\) on "
                     + re.escape(f"{HOST_A}:1,{HOST_B}:1"), out), out
    assert re.search(r"kolo: elastic: the training ended before the new process\(es\) on "
                     + re.escape(f"{HOST_A}:1,{HOST_B}:1") + " joined", out), out
    # The new processes' lines are not tagged with a rank: kolorun keeps them in Open MPI's log.
    log = re.search(r"kolorun: Open MPI wrote \d+ line\(s\) to (\S+)", out)
    assert log, out
    with open(log.group(1)) as f:
        said = f.read()
    assert len(re.findall(r"kolo: elastic: the training ended before this new process "
                          r"\(pid \d+\) joined it; it is not needed and exits", said)) == 2, said
    assert "could not be told to end" not in out, out
    assert "grew in place" not in out, out
    starts = re.findall(r"START gen=(\d+) size=(\d+) step=(\d+) pid=(\d+)", out)
    assert [s[1:3] for s in starts] == [("4", "0"), ("2", "4")], out
    assert len({s[3] for s in starts}) == 1, out  # no restart
    size, params = final_params(out)
    assert size == 2
    assert params == reference.as_float64(reference.replay([(4, 4), (2, None)]))


@in_place_only
def test_a_host_added_by_discovery_joins_in_place(tmp_path):
    # A job on two hosts at np=2 commits at step 4 until the new processes on a third
    # host (which PRRTE adds to its allocation) joined; np=4 from there on.
    job = Job(tmp_path, [f"{HOST_A}:1", f"{HOST_B}:1"],
              ["-np", "2", "--min-np", "2", "--max-np", "4"],
              pause_step=3, extra_env={"ELASTIC_HOLD_STEP": "4", "ELASTIC_FULL_SIZE": "4"})
    job.wait_reached(2)
    job.set_hosts([f"{HOST_A}:1", f"{HOST_B}:1", f"{HOST_C}:2"])
    job.wait_line(r"kolorun: elastic: discovery lists .*" + re.escape(HOST_C))
    (tmp_path / "go.0").write_text("go\n")
    code, out = job.finish(timeout=240)
    assert code == 0, out
    starts = re.findall(r"START gen=(\d+) size=(\d+) step=(\d+) pid=(\d+)", out)
    assert [s[:3] for s in starts] == [("0", "2", "0"), ("0", "4", "4")], out
    assert starts[0][3] == starts[1][3], out  # rank 0 stayed the same process
    assert re.search(r"kolorun: elastic: incarnation 0 grew in place: new process\(es\) on "
                     + re.escape(f"{HOST_C}:2"), out), out
    assert "starting incarnation 1" not in out, out
    size, params = final_params(out)
    assert size == 4
    assert params == reference.as_float64(reference.replay([(2, 4), (4, None)]))


def test_keras_fit_with_the_elastic_callbacks_survives_a_host_killed_mid_epoch(tmp_path):
    job = Job(tmp_path, [f"{HOST_A}:2", f"{HOST_B}:2"], ["-np", "4", "--min-np", "2"],
              pause_step=5, script=KERAS_TRAIN)
    kill_host_b(job, timeout=300)  # four TensorFlow processes starting on two cores
    code, out = job.finish(timeout=300)
    assert code == 0, out
    # Committed every 2 batches: the 5th batch of epoch 0 was lost, the 4th was kept.
    assert re.search(r"START gen=1 size=2 epoch=0 batch=3\b", out), out
    finals = re.findall(r"FINAL rank=(\d) size=(\d+) epoch=(\d+) checksum=(\S+)", out)
    assert sorted(f[0] for f in finals) == ["0", "1"], out
    assert {f[1:] for f in finals} == {("2", "3", finals[0][3])}, out


def commit_store(job):
    """This job's commit store on this machine (kolo-elastic-<its KOLO_ELASTIC_JOB>), named
    by the mark that rank 0 wrote at the pause step."""
    job_id = (job.dir / "reached.0.0").read_text().split()[2]
    return os.path.join(os.environ.get("KOLO_ELASTIC_DIR") or "/dev/shm", "kolo-elastic-" + job_id)


def test_past_the_reset_limit_the_job_ends_naming_it_with_the_failed_ranks_code(tmp_path):
    job = Job(tmp_path, [f"{HOST_A}:2", f"{HOST_B}:2"],
              ["-np", "4", "--min-np", "2", "--reset-limit", "0"], pause_step=5)
    job.wait_reached(4)
    store = commit_store(job)
    assert os.path.isdir(store), store  # step 4's commit is there
    kill_host_b(job)
    code, out = job.finish()
    assert code == 128 + signal.SIGKILL, out
    assert re.search(r"kolorun: .*--reset-limit", out), out
    assert not re.search(r"START gen=\d+ size=2", out), out
    # The ranks' last commits (both "hosts" are this machine) went with the job; other
    # jobs' stores (tests running beside this one) are theirs.
    assert not os.path.exists(store), os.listdir(store)
