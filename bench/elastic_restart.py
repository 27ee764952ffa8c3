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

--lose rank (issue 60) kills one rank of 127.0.0.2 only (rank 3), on a small model
(--model small) by default: the host keeps a rank, its slot is free, and the job must
come back to 4 ranks. Paths there: grow_in_place (a new process started by rank 0 joins
at a commit while the survivors train on at np=3) and restart_to_grow
(KOLO_ELASTIC_GROW_IN_PLACE=0: the survivors shrink in place, and the next commit restarts
every worker at np=4). The figure is the survivors' lost time: from the kill to their
first step at np=3, plus, once back at 4 ranks, from the start of the commit where the
job grew (or restarted) to the first step at np=4.

--lose none (issue 60) loses nothing: a job at np=2 on 127.0.0.1:1 + 127.0.0.2:1
(--max-np 4) reaches step 3, the discovery script then lists 127.0.0.3:2 too, and the job
grows to 4 ranks, in place (grow_in_place: PRRTE adds the host, rank 0 starts two
processes there) or through a restart (restart_to_grow). The figure is the running ranks'
stall: from the start of the commit where the job grew to its first step at np=4.

A run that breaks (PRRTE lost a daemon, the job did not go 4 -> 3 -> 4) is listed under
failed_runs with its first lines, not timed; each timed run keeps the load average
(1, 5, 15 min) at its start.

usage: python3 bench/elastic_restart.py [--runs 5] [--paths in_place,restart]
           [--lose host|rank|none] [--model resnet50|small]
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
    """Ends a run that broke: SIGTERM first, on which kolorun ends its mpirun (a SIGKILL
    alone leaves that mpirun's job running, in a session of its own), then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=15)
            return
        except subprocess.TimeoutExpired:
            continue


def set_hosts(path, hosts):
    with open(path + ".new", "w") as f:
        f.write("".join(h + "\n" for h in hosts))
    os.rename(path + ".new", path)  # the discovery script never reads half a file


def one_run(args, path):
    with tempfile.TemporaryDirectory() as tmp:
        discover, hosts = os.path.join(tmp, "discover.sh"), os.path.join(tmp, "hosts")
        adding = args.lose == "none"
        set_hosts(hosts, ["127.0.0.1:1", "127.0.0.2:1"] if adding
                  else ["127.0.0.1:2", "127.0.0.2:2"])
        with open(discover, "w") as f:
            f.write(f"#!/bin/sh\ncat {hosts}\n")
        os.chmod(discover, 0o755)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "build", "python"),
                   ELASTIC_BENCH_DIR=tmp, ELASTIC_PAUSE_STEP="3", ELASTIC_STEPS="5",
                   ELASTIC_MODEL=args.model,
                   KOLO_ELASTIC_IN_PLACE="0" if path == "restart" else "1",
                   KOLO_ELASTIC_GROW_IN_PLACE="0" if path == "restart_to_grow" else "1")
        if args.lose in ("rank", "none"):
            env["ELASTIC_FULL_SIZE"] = "4"  # the job goes on until it is (back) at 4 ranks
        if args.mpi_home:
            env["KOLO_MPI_HOME"] = args.mpi_home
        size = ["-np", "2", "--min-np", "2", "--max-np", "4"] if adding \
            else ["-np", "4", "--min-np", "2"]
        cmd = [args.kolorun, *size, "--host-discovery-script", discover,
               "--mpi-args", "--mca plm_rsh_agent " + FAKE_SSH, args.python, JOB]
        out_path = os.path.join(tmp, "out")
        with open(out_path, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            marks = [os.path.join(tmp, f"reached.{r}") for r in range(2 if adding else 4)]
            deadline = time.monotonic() + 300
            while not all(os.path.exists(m) and open(m).read().endswith("\n") for m in marks):
                if proc.poll() is not None or time.monotonic() > deadline:
                    end(proc)
                    raise SystemExit("elastic_restart: the job did not reach step 3:\n"
                                     + open(out_path).read())
                time.sleep(0.05)
            killed_at = time.time()
            if adding:
                set_hosts(hosts, ["127.0.0.1:1", "127.0.0.2:1", "127.0.0.3:2"])
            for r, m in enumerate(marks):
                pid, host = open(m).read().split()
                if host == "kolo-127.0.0.2" and (args.lose == "host" or r == 3):
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
    if args.lose == "rank":
        return rank_lost(path, killed_at, text)
    if adding:
        return host_added(path, killed_at, text)
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


def rank_lost(path, killed_at, text):
    """The survivors' lost time when one rank of 4 died: kill -> first step at np=3 (the
    shrink; restart_to_grow shrinks the same way), and the commit where the job went back
    to 4 ranks -> its first step at np=4."""
    phases = {}
    for m in re.finditer(r"PHASE gen=(\d+) (\w+)=([\d.]+)", text):
        phases.setdefault(int(m.group(1)), {})[m.group(2)] = float(m.group(3))
    sizes = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"SIZE gen=(\d+) (\d+)", text)}
    report = [line for line in text.splitlines() if "kolorun: elastic:" in line]
    shrunk = next((g for g in sorted(sizes) if sizes[g] == 3), None)
    back = next((g for g in sorted(sizes) if shrunk is not None and g > shrunk and sizes[g] == 4),
                None)
    if shrunk is None or back is None:
        raise SystemExit("elastic_restart: the job did not go 4 -> 3 -> 4 ranks:\n" + text)
    if path == "grow_in_place" and "started" in phases[back]:
        raise SystemExit("elastic_restart: grow_in_place restarted the processes:\n" + text)
    if "first_step" not in phases[shrunk] or "first_step" not in phases[back]:
        raise SystemExit("elastic_restart: no first step at np=3 or back at 4:\n" + text)
    shrink_s = phases[shrunk]["first_step"] - killed_at
    # The last commit before the job was back at 4 ranks: where it stopped training.
    began = max(p["commit_began"] for g, p in phases.items() if g < back and "commit_began" in p)
    grow_s = phases[back]["first_step"] - began
    return {"path": path, "total_s": shrink_s + grow_s, "phases_s": {
        "kill_to_np3_step": shrink_s, "commit_to_np4_step": grow_s,
        "kill_to_np4_step": phases[back]["first_step"] - killed_at}, "kolorun_lines": report}


def host_added(path, added_at, text):
    """The running ranks' stall when discovery added a host: from the start of the commit
    where the job grew from 2 to 4 ranks (in place, or through a restart) to its first step
    at np=4."""
    phases = {}
    for m in re.finditer(r"PHASE gen=(\d+) (\w+)=([\d.]+)", text):
        phases.setdefault(int(m.group(1)), {})[m.group(2)] = float(m.group(3))
    sizes = {int(m.group(1)): int(m.group(2)) for m in re.finditer(r"SIZE gen=(\d+) (\d+)", text)}
    report = [line for line in text.splitlines() if "kolorun: elastic:" in line]
    back = next((g for g in sorted(sizes) if sizes[g] == 4), None)
    if back is None or "first_step" not in phases[back]:
        raise SystemExit("elastic_restart: the job did not grow to 4 ranks:\n" + text)
    if path == "grow_in_place" and "started" in phases[back]:
        raise SystemExit("elastic_restart: grow_in_place restarted the processes:\n" + text)
    began = max(p["commit_began"] for g, p in phases.items() if g < back and "commit_began" in p)
    return {"path": path, "total_s": phases[back]["first_step"] - began, "phases_s": {
        "commit_to_np4_step": phases[back]["first_step"] - began,
        "added_to_np4_step": phases[back]["first_step"] - added_at}, "kolorun_lines": report}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=5, help="runs of each path")
    p.add_argument("--paths", default=None,
                   help="default: in_place,restart (--lose host), "
                   "grow_in_place,restart_to_grow (--lose rank)")
    p.add_argument("--lose", choices=("host", "rank", "none"), default="host",
                   help="none: nothing is lost, discovery adds a host (127.0.0.3:2) to a job "
                   "at np=2")
    p.add_argument("--model", choices=("resnet50", "small"), default=None,
                   help="default: resnet50 (--lose host), small (--lose rank)")
    p.add_argument("--mpi-home", default=os.path.join(ROOT, ".venv-ompi5"))
    p.add_argument("--kolorun", default=os.path.join(ROOT, "build", "launcher", "kolorun"))
    p.add_argument("--python", default=os.path.join(ROOT, ".venv", "bin", "python"))
    p.add_argument("--out", default=os.path.join(HERE, "results", "elastic_restart.json"))
    args = p.parse_args()
    if args.paths is None:
        args.paths = "in_place,restart" if args.lose == "host" \
            else "grow_in_place,restart_to_grow"
    if args.model is None:
        args.model = "resnet50" if args.lose == "host" else "small"
    paths = args.paths.split(",")
    runs, failed = [], []
    for _ in range(args.runs):
        for path in paths:
            load = os.getloadavg()
            try:
                run = one_run(args, path)
            except SystemExit as e:  # a run that broke (PRRTE lost a daemon): kept, not timed
                why = str(e)  # its first line, and the end of the job's output
                failed.append({"path": path, "load": load,
                               "why": why.splitlines()[0] + "\n...\n" + why[-3000:]})
                print(f"elastic_restart: a {path} run failed: {str(e).splitlines()[0]}",
                      flush=True)
                continue
            run["load_1_5_15"] = load
            runs.append(run)
    summary = {"runs": runs, "failed_runs": failed, "paths": {}}
    for path in paths:
        mine = [r for r in runs if r["path"] == path]
        if not mine:
            continue
        totals = [r["total_s"] for r in mine]
        summary["paths"][path] = {
            "median_total_s": statistics.median(totals), "min_total_s": min(totals),
            "max_total_s": max(totals), "timed_runs": len(mine),
            "failed_runs": sum(f["path"] == path for f in failed),
            "median_phases_s": {k: statistics.median(r["phases_s"][k] for r in mine)
                                for k in mine[0]["phases_s"]}}
    with open(args.out, "w") as f:
        json.dump(summary, f, indent=1)
    print(json.dumps({k: v for k, v in summary.items() if k != "runs"}, indent=1))


if __name__ == "__main__":
    main()
