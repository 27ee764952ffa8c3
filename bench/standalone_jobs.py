"""The benchmarks' standalone jobs: each system or path in a kolorun job of its own, the
jobs alternated round by round so that a slow spell of the machine hits every side, each
job writing one JSON object; per side the median over jobs and the spread (slowest job /
fastest job). Before each job, build/bench/placement_probe says which placement the VM's
vCPUs are in (docs/performance.md, "Machine and method"); each job's JSON carries it under
"placement", and torch_alone also summarises each side per placement. Used by tf_bench.py and jax_bench.py (`jobs`), ddp_bench.py (`jobs`),
p2p_bench.py (`jobs`) and standalone.sh (torch_bench.py `alone`).

Run as a script, it is standalone.sh's body:

    python3 bench/standalone_jobs.py torch_alone JOBS MODEL STRATEGY...

A strategy "<name>:base" runs with the build in $BASE_BUILD instead (kolorun and package),
so that a change's before and after alternate in one run; "<name>@KOLO_X=V" runs with that
setting.
"""
import json
import os
import shlex
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def build_dir():
    """The build to measure: $BUILD (default build/), relative to the repository."""
    return os.path.join(ROOT, os.environ.get("BUILD", "build"))


def kolorun(np, extra=()):
    """kolorun's argv prefix for ``np`` ranks (``extra``: more kolorun options). Puts the
    build's kolo package first on PYTHONPATH, in this process's environment, so that every
    job started from here imports it."""
    build = build_dir()
    os.environ["PYTHONPATH"] = os.path.join(build, "python") + (
        ":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    return [os.path.join(build, "launcher", "kolorun"), "-np", str(np)] + list(extra)


def base_kolorun(np, extra=()):
    """kolorun's argv prefix for ``np`` ranks with the build in $BASE_BUILD (its kolorun and
    its kolo package), for a change's before and after alternated in one run."""
    base = os.path.join(ROOT, os.environ["BASE_BUILD"])
    return ["env", "PYTHONPATH=" + os.path.join(base, "python"),
            os.path.join(base, "launcher", "kolorun"), "-np", str(np)] + list(extra)


def interpreter(path):
    """An interpreter named relative to the repository (.venv/bin/python) or absolute."""
    return path if os.path.isabs(path) else os.path.join(ROOT, path)


def run_job(cmd, out, quiet=True):
    """Runs one job and returns the JSON object it wrote to ``out``. Its stdout is dropped;
    its stderr shows only when it fails (``quiet``: TensorFlow's start-up lines would bury
    the progress) or always (not ``quiet``). A failed job ends the benchmark."""
    job = subprocess.run(cmd, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE if quiet else None, text=True)
    if job.returncode != 0:
        if quiet:
            sys.stderr.write(job.stderr)
        raise SystemExit("%s: job failed (exit %d): %s" % (
            os.path.basename(sys.argv[0]), job.returncode, " ".join(cmd)))
    with open(out) as f:
        return json.load(f)


def probe_placement():
    """The placement probe's JSON object ({"placement": "near"|"far", "round_trip_ns": ...}),
    or None when the build has no probe."""
    probe = os.path.join(build_dir(), "bench", "placement_probe")
    if not os.path.exists(probe):
        return None
    return json.loads(subprocess.run([probe], capture_output=True, text=True,
                                     check=True).stdout)


def alternate(rounds, commands, out, quiet=True):
    """Runs ``rounds`` rounds of jobs, in each round one job per entry of ``commands``
    (name -> argv, or a function of the round number giving the argv or None to skip it
    in that round), in the order given. Every job writes its JSON to ``out``; the
    placement probed just before it is added as "placement". Yields (round, name, the
    job's JSON) as each job ends."""
    for i in range(rounds):
        for name, command in commands.items():
            argv = command(i) if callable(command) else command
            if argv is None:
                continue
            placement = probe_placement()
            job = run_job(argv, out, quiet)
            if placement is not None:
                job["placement"] = placement
            yield i, name, job


def spread(values, unit="ms"):
    """One side's job figures (in ``unit``): every job's, their median, and slowest /
    fastest."""
    return {"job_median_" + unit: values, "median_" + unit: statistics.median(values),
            "slowest_over_fastest": max(values) / min(values)}


def by_placement(jobs, key, unit="ms"):
    """``spread`` of ``key`` over the jobs of each placement ({"near": ..., "far": ...})."""
    groups = {}
    for job in jobs:
        where = job.get("placement", {}).get("placement", "unknown")
        groups.setdefault(where, []).append(job[key])
    return {where: spread(values, unit) for where, values in sorted(groups.items())}


def write_result(result, out=None):
    """Prints a benchmark's JSON object and, given ``out``, writes it there too."""
    text = json.dumps(result, indent=1)
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text + "\n")


def commit():
    """The commit measured (short hash; empty outside a git checkout)."""
    return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=False).stdout.strip()


def torch_alone(jobs, model, strategies):
    """standalone.sh: torch_bench.py `alone` for each strategy in a job of its own, ``jobs``
    rounds; prints each strategy's job medians, their median and the spread, and with
    $OUT=file.json writes them as JSON (bench/report.py reads it). $NP ranks (2),
    $KOLORUN_ARGS and $ALONE_ARGS are passed on."""
    import tempfile
    np = os.environ.get("NP", "2")
    extra = shlex.split(os.environ.get("KOLORUN_ARGS", ""))
    run = kolorun(np, extra)
    alone_args = shlex.split(os.environ.get("ALONE_ARGS", ""))
    bench = os.path.join("bench", "torch_bench.py")
    runs = {s: [] for s in strategies}

    def command(strategy, out):
        # "<strategy>:base" runs the build in $BASE_BUILD (kolorun and package): a change's
        # before and after, alternated in one run.
        # "<strategy>@VAR=VALUE": with that setting (kolorun passes KOLO_* on).
        strategy, *settings = strategy.split("@")
        name, _, which = strategy.partition(":")
        prefix = ["env"] + settings + run
        if which == "base":
            prefix = ["env"] + settings + base_kolorun(np, extra)
        return prefix + ["/usr/bin/python3", bench, "--out", out, "alone", "--strategy", name,
                         "--model", model] + alone_args

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        commands = {s: command(s, out) for s in strategies}
        for _, s, job in alternate(jobs, commands, out, quiet=False):
            runs[s].append(job)
    result = {"benchmark": "standalone_jobs", "model": model, "jobs": jobs, "strategies": {}}
    for s in strategies:
        med = [r["median_ms"] for r in runs[s]]
        result["strategies"][s] = spread(med)
        result["strategies"][s]["by_placement"] = by_placement(runs[s], "median_ms")
        result["strategies"][s]["placements"] = [
            r.get("placement", {}).get("placement", "unknown") for r in runs[s]]
        submit = [r["submit_ms"] for r in runs[s] if r.get("submit_ms") is not None]
        if submit:
            result["strategies"][s]["submit_ms"] = statistics.median(submit)
        result["np"], result["steps"] = runs[s][0]["np"], runs[s][0]["steps"]
        print(f"{s:15s} per job: " + " ".join(f"{m:.2f}" for m in med))
        print(f"{s:15s} median {statistics.median(med):.2f} ms, slowest/fastest job "
              f"{max(med) / min(med):.2f}")
        for where, sp in result["strategies"][s]["by_placement"].items():
            print(f"{s:15s}   {where}: {len(sp['job_median_ms'])} jobs, median "
                  f"{sp['median_ms']:.2f} ms, slowest/fastest {sp['slowest_over_fastest']:.2f}")
    if os.environ.get("OUT"):
        with open(os.environ["OUT"], "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) < 5 or sys.argv[1] != "torch_alone":
        raise SystemExit(__doc__)
    os.chdir(ROOT)
    torch_alone(int(sys.argv[2]), sys.argv[3], sys.argv[4:])
