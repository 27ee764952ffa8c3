"""A stand-in for an elastic training script, without kolo: it speaks kolorun's
elastic verbs itself (KOLOE <token> CHECK / RESTART / RESUMED over TCP to
KOLORUN_RENDEZVOUS), keeps its "commit" in a file of ELASTIC_TEST_DIR, and
coordinates its ranks through files there (all hosts are this machine).

    elastic_worker.py grow   rank 0 commits, adds a host to the discovery file,
                             asks CHECK until it hears "added", then RESTART;
                             the job ends once it runs at WANT_SIZE ranks.
    elastic_worker.py kill   rank FAIL_RANK kills itself (SIGKILL) after the commit
                             in incarnation 0; the next incarnation finishes.
    elastic_worker.py exit   the last rank exits with code 3 after the commit, in
                             every incarnation.
    elastic_worker.py idle   the job ends once the discovery script has run
                             WANT_CALLS times (it appends a line to DIR/calls).

Every wait is bounded: past 60 s the worker says what it waited for and exits 9.
"""
import os
import signal
import socket
import sys
import time

MODE = sys.argv[1]
DIR = os.environ["ELASTIC_TEST_DIR"]
RANK = int(os.environ["RANK"])
SIZE = int(os.environ["WORLD_SIZE"])
GEN = int(os.environ["KOLO_ELASTIC_GENERATION"])
TOKEN = os.environ["KOLORUN_TOKEN"]
COMMIT = os.path.join(DIR, "commit")


def say(*words):
    print("WORKER", "rank=%d" % RANK, "gen=%d" % GEN, *words, flush=True)


def verb(line, token=TOKEN):
    host, port = os.environ["KOLORUN_RENDEZVOUS"].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(("KOLOE %s %s\n" % (token, line)).encode())
        return s.makefile().readline().strip()


def wait_for(what, ready):
    deadline = time.time() + 60
    while not ready():
        if time.time() > deadline:
            say("TIMEOUT waiting for", what)
            sys.exit(9)
        time.sleep(0.05)


def flag(name):
    return os.path.join(DIR, "%s.%d" % (name, GEN))


def read_commit():
    return int(open(COMMIT).read()) if os.path.exists(COMMIT) else -1


def commit(n):
    with open(COMMIT + ".tmp", "w") as f:
        f.write(str(n))
    os.rename(COMMIT + ".tmp", COMMIT)


def finish():
    """Rank 0 ends the job: every rank exits 0."""
    if RANK == 0:
        open(flag("done"), "w").close()
    wait_for("rank 0's done flag", lambda: os.path.exists(flag("done")))
    say("done", "size=%d" % SIZE)
    sys.exit(0)


def main():
    env = {k: os.environ.get(k, "-") for k in ("KOLO_ELASTIC", "KOLO_ELASTIC_JOB")}
    say("size=%d" % SIZE, "elastic=%s" % env["KOLO_ELASTIC"], "job=%s" % env["KOLO_ELASTIC_JOB"])
    resumed_from = read_commit()
    if RANK == 0:
        say("resumed", verb("RESUMED %d %d %d" % (GEN, resumed_from, SIZE)))
        say("bad token", verb("CHECK %d" % GEN, token="0" * 32))
        say("old generation", verb("CHECK %d" % (GEN + 1)))
    if MODE == "idle":
        calls = os.path.join(DIR, "calls")
        want = int(os.environ["WANT_CALLS"])
        wait_for("%d runs of the discovery script" % want,
                 lambda: os.path.exists(calls) and len(open(calls).readlines()) >= want)
        finish()
    if MODE == "grow":
        if SIZE >= int(os.environ["WANT_SIZE"]):
            finish()
        if RANK == 0:
            commit(resumed_from + 1)
            say("check", verb("CHECK %d" % GEN))
            with open(os.environ["DISCOVERY_HOSTS"], "a") as f:
                f.write("127.0.0.2:2\n")
            answer = []
            wait_for("CHECK to hear of the new host",
                     lambda: answer.append(verb("CHECK %d" % GEN)) or "UPDATED" in answer[-1])
            say("check", answer[-1])
            say("restart", verb("RESTART %d %d" % (GEN, read_commit())))
            open(flag("restart"), "w").close()
        wait_for("rank 0's restart flag", lambda: os.path.exists(flag("restart")))
        say("leaving for the restart")
        sys.exit(0)
    if GEN > 0 and MODE == "kill":
        finish()
    if RANK == 0:
        commit(resumed_from + 1)
        open(flag("committed"), "w").close()
    wait_for("rank 0's commit", lambda: os.path.exists(flag("committed")))
    if MODE == "kill" and RANK == int(os.environ["FAIL_RANK"]):
        say("killing myself")
        os.kill(os.getpid(), signal.SIGKILL)
    if MODE == "exit" and RANK == SIZE - 1:
        say("exiting with code 3")
        sys.exit(3)
    wait_for("the end of the incarnation", lambda: False)


main()
