"""Runs a command if this interpreter has the named modules, else exits 77, which the
torch2 tests take as "skipped" (CTest's SKIP_RETURN_CODE), saying what is missing.

    python requires.py MODULE[,MODULE...] REASON -- COMMAND [ARG...]

The check runs at test time, not at configure time, so that a module installed into
.venv later is used without re-running cmake.
"""
import importlib.util
import os
import sys


def main(argv):
    if "--" not in argv or argv.index("--") != 3 or len(argv) < 5:
        sys.exit("usage: requires.py MODULE[,MODULE...] REASON -- COMMAND [ARG...]")
    modules, reason, command = argv[1].split(","), argv[2], argv[4:]
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        print("skipped: %s has no %s (%s)" % (sys.executable, ", ".join(missing), reason),
              flush=True)
        sys.exit(77)
    os.execv(command[0], command)


if __name__ == "__main__":
    main(sys.argv)
