"""The chaos run (docs/reliability.md): N kolo.torch training jobs at np=4 on two loopback
hosts (127.0.0.1 and 127.0.0.2, the second started by test/launcher/fake_ssh.sh), each
with one fault drawn at random from the fault matrix (kill, stop, raise, badinput,
exit, stuck), on a random rank at a random training step. Every job must end within
its bound with a line naming the faulty rank, and every rank that outlives the fault
must either report a named error itself or be ended by kolorun.

    /usr/bin/python3 bench/chaos.py [--jobs 50] [--seed 1] [--json bench/results/chaos.json]

--in-place: the same faults inside an elastic training loop (test/launcher/
fault_job_elastic.py) under elastic kolorun (--min-np 2) on Open MPI 5 (--mpi-home,
default .venv-ompi5), where the survivors of a lost rank shrink and go on (issue 47).
There a job passes when it ends within its bound and either finished its training
(exit 0, with kolorun's line naming the lost rank where one was lost) or failed with a
line naming the faulty rank.

Stall settings of every job: check 2 s, shutdown 5 s (test/launcher/fault_runner.py).
Prints a table of faults, hangs, unnamed endings and times; writes them as JSON."""
import argparse
import collections
import json
import os
import random
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "test", "launcher"))
from fault_runner import FAULTS, run_fault  # noqa: E402

BOUND = 30  # seconds from the fault until the job has ended, any fault
# In place, a rank alive but not answering (stuck) holds the survivors' shrink for 30 s,
# then kolorun waits 30 s for their report before it restarts the job.
BOUND_IN_PLACE = 90
ELASTIC_JOB = os.path.join(HERE, "..", "test", "launcher", "fault_job_elastic.py")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--np", type=int, default=4)
    parser.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--json")
    parser.add_argument("--in-place", action="store_true")
    parser.add_argument("--mpi-home", default=os.path.join(HERE, "..", ".venv-ompi5"))
    args = parser.parse_args()
    extra = {}
    if args.in_place:
        extra = dict(job=ELASTIC_JOB, kolorun_args=("--min-np", "2"), timeout=150,
                     extra_env={"KOLO_MPI_HOME": os.path.abspath(args.mpi_home)})
    bound = BOUND_IN_PLACE if args.in_place else BOUND
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    kolorun = os.path.join(args.build, "launcher", "kolorun")
    python_dir = os.path.join(args.build, "python")
    rng = random.Random(args.seed)
    rows = []
    started = time.time()
    for job in range(args.jobs):
        fault, rank, step = rng.choice(FAULTS), rng.randrange(args.np), rng.randrange(8)
        r = run_fault(kolorun, python_dir, fault, np=args.np, rank=rank, step=step,
                      two_hosts=True, **({"timeout": 90} | extra))
        finished = r["returncode"] == 0 and "ELASTIC-DONE" in r["output"]
        ok_end = (not r["hung"] and r["fault_happened"]
                  and (r["returncode"] != 0 or (args.in_place and finished))
                  and r["seconds"] is not None and r["seconds"] < bound)
        # A job that finished without losing a rank (badinput) has nobody to name.
        if args.in_place and finished and not re.search(r"lost rank \d", r["output"]):
            r["named"] = r["named"] or ["finished, no rank lost"]
        row = {"job": job, "fault": fault, "rank": rank, "step": step, "hung": r["hung"],
               "returncode": r["returncode"], "named": bool(r["named"]),
               "seconds": None if r["seconds"] is None else round(r["seconds"], 3),
               "ranks_reporting": sorted(r["seen"]), "ok": ok_end and bool(r["named"]),
               "recovered_in_place": "resumed in place" in r["output"]}
        rows.append(row)
        print("job %2d  %-8s rank %d step %d  %s  %s s  rc=%s named=%s reporting=%s%s" % (
            job, fault, rank, step, "HUNG" if r["hung"] else "ended", row["seconds"],
            row["returncode"], row["named"], row["ranks_reporting"],
            "  in place" if row["recovered_in_place"] else ""), flush=True)
        if not row["ok"]:
            print(r["output"][-3000:], flush=True)
    by_fault = collections.defaultdict(list)
    for row in rows:
        by_fault[row["fault"]].append(row)
    summary = {}
    print("\n| fault | jobs | hung | not named | median s | max s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for fault in FAULTS:
        rs = by_fault.get(fault, [])
        times = [r["seconds"] for r in rs if r["seconds"] is not None]
        summary[fault] = {"jobs": len(rs), "hung": sum(r["hung"] for r in rs),
                          "not_named": sum(not r["named"] for r in rs),
                          "failed": sum(not r["ok"] for r in rs),
                          "recovered_in_place": sum(r["recovered_in_place"] for r in rs),
                          "median_s": round(statistics.median(times), 2) if times else None,
                          "max_s": round(max(times), 2) if times else None}
        s = summary[fault]
        print("| %s | %d | %d | %d | %s | %s |" % (fault, s["jobs"], s["hung"], s["not_named"],
                                                   s["median_s"], s["max_s"]))
    total = {"jobs": len(rows), "hung": sum(r["hung"] for r in rows),
             "failed": sum(not r["ok"] for r in rows),
             "wall_s": round(time.time() - started, 1)}
    print("\njobs %(jobs)d, hung %(hung)d, failed %(failed)d, %(wall_s)s s in all" % total)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "chaos", "np": args.np, "hosts": 2, "seed": args.seed,
                       "in_place": args.in_place, "bound_s": bound, "total": total,
                       "by_fault": summary, "jobs": rows},
                      f, indent=1)
    return 0 if total["failed"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
