"""Restart time of an elastic job that loses a host: from the SIGKILL of one
loopback host's ranks to the first step of the resumed job, with a
ResNet-50-sized state (bench/elastic_restart_job.py), and where that time goes.

Each run: kolorun -np 4 --min-np 2 on 127.0.0.1:2 + 127.0.0.2:2 (the second
through test/launcher/fake_ssh.sh); at step 3 every rank marks itself and
waits; the bench kills 127.0.0.2's ranks, says go, and times the rest from the
job's PHASE lines (unix times, same clock).

Two paths (issue 47), alternated run by run on the same Open MPI 5
(--mpi-home, default .venv-ompi5): in_place (the survivors shrink and go on in
their processes) and restart (KOLO_ELASTIC_IN_PLACE=0: every worker restarts
from the last commit, the path of Open MPI 4.1). --mpi-home "" runs the
restart path on the system's Open MPI.

usage: python3 bench/elastic_restart.py [--runs 5] [--paths in_place,restart]
           [--kolorun build/launcher/kolorun] [--python .venv/bin/python]
           [--mpi-home .venv-ompi5] [--out bench/results/elastic_restart.json]
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
JOB = os.path.join(HERE, "elastic_restart_job.py")
FAKE_SSH = os.path.join(ROOT, "test", "launcher", "fake_ssh.sh")


def end(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def one_run(args, path):
    with tempfile.TemporaryDirectory() as tmp:
        discover = os.path.join(tmp, "discover.sh")
        with open(discover, "w") as f:
            f.write("#!/bin/sh\necho 127.0.0.1:2\necho 127.0.0.2:2\n")
        os.chmod(discover, 0o755)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"),
                   ELASTIC_BENCH_DIR=tmp, ELASTIC_PAUSE_STEP="3", ELASTIC_STEPS="5",
                   KOLO_ELASTIC_IN_PLACE="1" if path == "in_place" else "0")
        if args.mpi_home:
            env["KOLO_MPI_HOME"] = args.mpi_home
        cmd = [args.kolorun, "-np", "4", "--min-np", "2", "--host-discovery-script", discover,
               "--mpi-args", "--mca plm_rsh_agent " + FAKE_SSH, args.python, JOB]
        out_path = os.path.join(tmp, "out")
        with open(out_path, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            marks = [os.path.join(tmp, f"reached.{r}") for r in range(4)]
            deadline = time.monotonic() + 300
            while not all(os.path.exists(m) and open(m).read().endswith("\n") for m in marks):
                if proc.poll() is not None or time.monotonic() > deadline:
                    end(proc)
                    raise SystemExit("elastic_restart: the job did not reach step 3:\n"
                                     + open(out_path).read())
                time.sleep(0.05)
            killed_at = time.time()
            for m in marks:
                pid, host = open(m).read().split()
                if host == "kolo-127.0.0.2":
                    os.kill(int(pid), signal.SIGKILL)
            open(os.path.join(tmp, "go"), "w").close()
            try:
                proc.wait(timeout=300)
            except subprocess.TimeoutExpired:
                end(proc)
                raise SystemExit("elastic_restart: the job did not end:\n" + open(out_path).read())
        text = open(out_path).read()
    if proc.returncode != 0:
        raise SystemExit(f"elastic_restart: kolorun exited {proc.returncode}:\n{text}")
    phases = {m.group(1): float(m.group(2))
              for m in re.finditer(r"PHASE gen=1 (\w+)=([\d.]+)", text)}
    report = [line for line in text.splitlines() if "kolorun: elastic:" in line]
    # Phases, each from the previous mark. Restarting: kolorun noticing the loss and
    # starting mpirun and the interpreter; importing torch, torchvision and kolo;
    # kolo.init; run's load + sync; the first step (forward, backward, allreduce,
    # commit). In place: the survivors' failed collective, shrink and kolorun's
    # answer, load + sync ("resumed"); the first step.
    marks = [("killed", killed_at)] + [(k, phases[k]) for k in
                                        ("started", "imported", "init", "resumed",
                                         "first_step") if k in phases]
    if path == "in_place" and "started" in phases:
        raise SystemExit("elastic_restart: in_place restarted the processes:\n" + text)
    return {"path": path, "total_s": phases["first_step"] - killed_at,
            "phases_s": {b[0]: b[1] - a[1] for a, b in zip(marks, marks[1:])},
            "kolorun_lines": report}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="runs of each path")
    p.add_argument("--paths", default="in_place,restart")
    p.add_argument("--mpi-home", default=os.path.join(ROOT, ".venv-ompi5"))
    p.add_argument("--kolorun", default=os.path.join(ROOT, "build", "launcher", "kolorun"))
    p.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    p.add_argument("--out", default=os.path.join(HERE, "results", "elastic_restart.json"))
    args = p.parse_args()
    paths = args.paths.split(",")
    runs = [one_run(args, path) for _ in range(args.runs) for path in paths]
    summary = {"runs": runs, "paths": {}}
    for path in paths:
        mine = [r for r in runs if r["path"] == path]
        totals = [r["total_s"] for r in mine]
        summary["paths"][path] = {
            "median_total_s": statistics.median(totals), "min_total_s": min(totals),
            "max_total_s": max(totals),
            "median_phases_s": {k: statistics.median(r["phases_s"][k] for r in mine)
                                for k in mine[0]["phases_s"]}}
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
