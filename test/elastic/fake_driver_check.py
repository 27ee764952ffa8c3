"""The worker side of elastic training against a fake kolorun driver: a TCP server in this
script answers the rendezvous verbs (CHECK / RESTART / RESUMED, as docs/architecture.md's
"Elastic jobs" writes them), and plain kolorun starts each incarnation of
elastic_worker.py at -np 2 with the environment that elastic kolorun would set.

(kolorun sets KOLORUN_RENDEZVOUS and KOLORUN_TOKEN itself, for its own rendezvous, so
those two reach the workers by `env` in the command; the KOLO_ELASTIC* ones by -x.)

  reference    no KOLO_ELASTIC: the final weights W of an uninterrupted run
  incarnation 0  RESUMED 0 -1 2; the 3rd CHECK answers "UPDATED added": commit() raises
               HostsUpdatedInterrupt, rank 0 sends RESTART 0 2, every rank exits 0
  incarnation 1  RESUMED 1 2 2 (resumed from commit 2); rank 1 is SIGKILLed in the middle
               of commit 5: the job fails
  incarnation 2  resumes from commit 5 (rank 0 completed it) or 4 (it did not), never a
               partial one; trains to the end: the final weights equal W, bit for bit;
               the job's commits are removed
  a failure    HorovodInternalError in the function: every rank prints one line that the
               job will be restarted from its last commit and exits 1
Every launch is bounded (120 s) and fails with a message; prints "PASSED: fake driver"."""
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
KOLORUN, PYTHON = sys.argv[1], sys.argv[2]
TOKEN = "fake-token"


class FakeKolorun:
    """Answers one request line per connection; records (verb, args)."""

    def __init__(self):
        self.requests, self.updated_at_check = [], None
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            conn, _ = self.sock.accept()
            with conn:
                line = conn.makefile().readline().split()
                conn.sendall((self.answer(line) + "\n").encode())

    def answer(self, words):
        if len(words) < 3 or words[0] != "KOLOE" or words[1] != TOKEN:
            return "ERR bad request %r" % words
        verb, args = words[2], [int(w) for w in words[3:]]
        self.requests.append((verb, args))
        if verb == "CHECK":
            checks = sum(1 for v, _ in self.requests if v == "CHECK")
            return "OK UPDATED added" if checks == self.updated_at_check else "OK SAME"
        return "OK"

    def take(self):
        out, self.requests = self.requests, []
        return out


def launch(fake, job, store, generation, *worker_args, elastic=True):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = [KOLORUN, "-np", "2"]
    if elastic:
        cmd += ["-x", "KOLO_ELASTIC=1", "-x", "KOLO_ELASTIC_JOB=" + job,
                "-x", "KOLO_ELASTIC_GENERATION=%d" % generation,
                "-x", "KOLO_ELASTIC_DIR=" + store,
                "env", "KOLORUN_RENDEZVOUS=" + fake.address, "KOLORUN_TOKEN=" + TOKEN]
    cmd += [PYTHON, os.path.join(HERE, "elastic_worker.py")] + list(worker_args)
    try:
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=120)
    except subprocess.TimeoutExpired as e:
        sys.exit("FAILED: incarnation %d still running after 120 s:\n%s"
                 % (generation, e.output))
    return p.returncode, p.stdout


def finals(output):
    return dict(re.findall(r"rank (\d) final (.*)", output))


def check(condition, what, output):
    if not condition:
        sys.exit("FAILED: %s\n--- output ---\n%s" % (what, output))


def main():
    fake = FakeKolorun()
    store = tempfile.mkdtemp(prefix="kolo-elastic-check-")
    job = uuid.uuid4().hex
    job_dir = os.path.join(store, "kolo-elastic-" + job)
    try:
        rc, out = launch(fake, job, store, 0, elastic=False)
        want = finals(out)
        check(rc == 0 and len(want) == 2 and want["0"] == want["1"], "the reference run", out)
        check(fake.take() == [], "no rendezvous without KOLO_ELASTIC", out)

        fake.updated_at_check = 3
        rc, out = launch(fake, job, store, 0)
        got = fake.take()
        check(rc == 0, "incarnation 0 should end with 0 for a restart (rc %d)" % rc, out)
        check(got == [("RESUMED", [0, -1, 2]), ("CHECK", [0]), ("CHECK", [0]), ("CHECK", [0]),
                      ("RESTART", [0, 2])], "incarnation 0's requests: %s" % got, out)
        check(finals(out) == {}, "incarnation 0 ended before the end of training", out)

        fake.updated_at_check = None
        rc, out = launch(fake, job, store, 1, "--die-in-commit", "5")
        got = fake.take()
        check(rc != 0, "incarnation 1 should fail (rank 1 killed)", out)
        check(got[0] == ("RESUMED", [1, 2, 2]), "incarnation 1 resumes from 2: %s" % got, out)

        rc, out = launch(fake, job, store, 2)
        got = fake.take()
        check(rc == 0, "incarnation 2 (rc %d)" % rc, out)
        check(got[0][0] == "RESUMED" and got[0][1][0] == 2 and got[0][1][1] in (4, 5),
              "incarnation 2 resumes from commit 4 or 5: %s" % got, out)
        check(finals(out) == want, "the final weights equal the reference's", out)
        check(not os.path.exists(job_dir), "the commits are removed at the end: %s"
              % (os.listdir(job_dir) if os.path.exists(job_dir) else None), out)

        rc, out = launch(fake, uuid.uuid4().hex, store, 0, "--fail-at-step", "3")
        lines = re.findall(r"kolo: elastic: rank \d: step 3 failed on purpose; the job will "
                           r"be restarted by kolorun from its last commit \(commit 2 here\)",
                           out)
        check(rc != 0 and len(lines) == 2, "a failure: one line per rank, exit 1", out)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    print("PASSED: fake driver")


main()
