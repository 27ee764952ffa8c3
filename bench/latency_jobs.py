"""The 4-byte allreduce as a user's job sees it, each measurement a kolorun job of its own
(np=2), the jobs alternated round by round, the VM's placement probed before each
(bench/standalone_jobs.py):

- ``cpp``: build/bench/allreduce_sweep up to 4 bytes: kolo's C++ API (a blocking call:
  enqueue with ``caller_waits``, then ``Wait``) against a raw ``MPI_Allreduce`` in the
  same job, medians over the job's iterations;
- ``torch``: bench/torch_bench.py ``latency``: ``kolo.torch.allreduce_`` against mpi4py's
  ``Allreduce`` in the same job, p50 over 3000 calls (the slower rank's).

Each runs with ``KOLO_CALLER_RUNS=1`` (the default: the waiting caller runs the cycle)
and ``=0`` (the background thread runs every cycle: the two thread hand-offs), so the
lever's before and after come from the same minutes; ``cpp shm_negotiation=0`` runs the
C++ side with the negotiation round over MPI (issue 49's lever off); with $BASE_BUILD (a
build directory) ``cpp base`` and ``torch base`` run the C++ and kolo.torch sides on that
build too. ``--sides A,B`` keeps only the sides whose name contains A or B. Prints per side the median over
jobs, the spread and the figures per placement; ``--out`` writes the JSON.

    python3 bench/latency_jobs.py --jobs 5 --out bench/results/latency_jobs.json
"""
import argparse
import json
import os
import statistics
import tempfile

import standalone_jobs as sj


def cpp_job(out, caller_runs, base=None, settings=()):
    """allreduce_sweep writes its JSON to stdout; a wrapper moves it to ``out``. ``base``:
    a build directory to run instead; ``settings``: more KOLO_*=value for the job."""
    sweep = os.path.join(base or sj.build_dir(), "bench", "allreduce_sweep")
    # kolorun tags each line of rank 0's output with "[0]<stdout>:".
    script = ("import subprocess, sys\n"
              "p = subprocess.run(sys.argv[2:], capture_output=True, text=True, check=True)\n"
              "t = p.stdout.replace('[0]<stdout>:', '')\n"
              "open(sys.argv[1], 'w').write(t[t.index('{'):t.rindex('}') + 1])\n")
    return (["env", "KOLO_CALLER_RUNS=%d" % caller_runs] + list(settings)
            + ["/usr/bin/python3", "-c", script, out] + sj.kolorun(2) + [sweep, "4", "1.0"])


def torch_job(out, caller_runs, base=None):
    """``base``: a build directory to run instead (kolorun and package)."""
    run = sj.kolorun(2)
    env = ["env", "KOLO_CALLER_RUNS=%d" % caller_runs]
    if base:
        run = [os.path.join(base, "launcher", "kolorun"), "-np", "2"]
        env.append("PYTHONPATH=" + os.path.join(base, "python"))
    return env + run + ["/usr/bin/python3", os.path.join(sj.ROOT, "bench", "torch_bench.py"),
                        "--out", out, "latency"]


def figures(name, job):
    """(kolo µs, raw µs) of one job."""
    if name.startswith("cpp"):
        row = job["rows"][0]
        return row["kolo_us"], row["raw_us"]
    rows = job["rows"]
    return rows["kolo.torch allreduce_"]["p50_us"], rows["raw MPI_Allreduce (mpi4py)"]["p50_us"]


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=5)
    parser.add_argument("--out")
    parser.add_argument("--sides", help="only the sides whose name contains one of these "
                        "comma-separated texts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        commands = {"cpp caller_runs=1": cpp_job(out, 1), "cpp caller_runs=0": cpp_job(out, 0),
                    "torch caller_runs=1": torch_job(out, 1),
                    "torch caller_runs=0": torch_job(out, 0)}
        # Issue 49's lever: the negotiation round through shared memory, off.
        commands["cpp shm_negotiation=0"] = cpp_job(out, 1, settings=["KOLO_SHM_NEGOTIATION=0"])
        if os.environ.get("BASE_BUILD"):  # the build before the change, as a side of its own
            base = os.path.join(sj.ROOT, os.environ["BASE_BUILD"])
            commands["cpp base"] = cpp_job(out, 1, base)
            commands["torch base"] = torch_job(out, 1, base)
        if args.sides:
            wanted = args.sides.split(",")
            commands = {k: v for k, v in commands.items() if any(w in k for w in wanted)}
        jobs = {name: [] for name in commands}
        for _, name, job in sj.alternate(args.jobs, commands, out):
            kolo_us, raw_us = figures(name, job)
            where = job.get("placement", {})
            jobs[name].append({"kolo_us": kolo_us, "raw_us": raw_us, "ratio": kolo_us / raw_us,
                               "placement": where})
            print("%-20s kolo %6.2f us  raw %5.2f us  (%s, %.0f ns, load %.2f)" % (
                name, kolo_us, raw_us, where.get("placement"), where.get("round_trip_ns", 0),
                where.get("load_1min", -1)), flush=True)
    result = {"benchmark": "latency_jobs", "np": 2, "jobs": args.jobs, "commit": sj.commit(),
              "sides": {}}
    for name, runs in jobs.items():
        side = {"kolo": sj.spread([r["kolo_us"] for r in runs], "us"),
                "raw": sj.spread([r["raw_us"] for r in runs], "us"),
                "kolo_over_raw_median": statistics.median(r["ratio"] for r in runs),
                "kolo_by_placement": sj.by_placement(
                    [{"placement": r["placement"], "v": r["kolo_us"]} for r in runs], "v", "us"),
                "runs": runs}
        result["sides"][name] = side
        print("%-20s kolo median %.2f us (spread %.2f), raw %.2f us, kolo/raw %.2f" % (
            name, side["kolo"]["median_us"], side["kolo"]["slowest_over_fastest"],
            side["raw"]["median_us"], side["kolo_over_raw_median"]))
    sj.write_result(result, args.out)


if __name__ == "__main__":
    main()
