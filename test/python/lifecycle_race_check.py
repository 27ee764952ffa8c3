"""init() and shutdown() called from several Python threads at once (run directly, as a
singleton MPI job): they used to run into each other in kolo._core (one runtime shut down
twice at once, or replaced under a running shutdown) and crash the process in about 2 of
5 runs. Each round is a fresh process; every thread must return or raise kolo's own error
(kolo initialized MPI, so a second start is refused cleanly)."""
import subprocess
import sys
import threading

ROUNDS = 12
THREADS = 8


def one_round():
    import kolo._core as core
    core.init()
    barrier = threading.Barrier(THREADS)
    errors = []

    def call(fn):
        barrier.wait()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - every error is looked at below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(core.shutdown if i % 2 else core.init,))
               for i in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    unexpected = [e for e in errors if "MPI was already finalized" not in str(e)]
    assert not unexpected, unexpected
    core.shutdown()


if __name__ == "__main__":
    if sys.argv[1:] == ["round"]:
        one_round()
        sys.exit(0)
    for i in range(ROUNDS):
        r = subprocess.run([sys.executable, __file__, "round"], capture_output=True, text=True,
                           timeout=60)
        if r.returncode != 0:
            sys.exit("lifecycle race: round %d ended with code %d:\n%s%s"
                     % (i, r.returncode, r.stdout, r.stderr[-3000:]))
    print("lifecycle race: OK, %d rounds" % ROUNDS)
