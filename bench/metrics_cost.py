"""What the monitor's always-on counters cost: the same small allreduce loop
(torch_bench.py latency: a 4-byte kolo.torch allreduce_, 2 ranks) on a build
with the counters and on one configured with -DKOLO_METRICS=OFF, job after job,
alternated. Prints each job's p50 and, per build, the median over jobs.

    bench/metrics_cost.py BUILD_WITH BUILD_WITHOUT [--jobs 10] [--iterations 3000]

The ResNet-50 standalone step has its own driver, with the same alternation:
    BASE_BUILD=BUILD_WITHOUT bench/standalone.sh 10 resnet50 "kolo kolo:base"
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def job(build, iterations, out):
    env = dict(os.environ, PYTHONPATH=os.path.join(build, "python"))
    cmd = [os.path.join(build, "launcher", "kolorun"), "-np", "2", "/usr/bin/python3",
           os.path.join(ROOT, "bench", "torch_bench.py"), "--out", out, "latency",
           "--iterations", str(iterations)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit("job failed on %s:\n%s%s" % (build, r.stdout, r.stderr))
    with open(out) as f:
        return json.load(f)["rows"]["kolo.torch allreduce_"]["p50_us"]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("with_counters")
    p.add_argument("without_counters")
    p.add_argument("--jobs", type=int, default=10)
    p.add_argument("--iterations", type=int, default=3000)
    args = p.parse_args()
    builds = {"counters": os.path.abspath(args.with_counters),
              "no counters": os.path.abspath(args.without_counters)}
    p50 = {name: [] for name in builds}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        for i in range(args.jobs):
            order = list(builds) if i % 2 == 0 else list(reversed(builds))
            for name in order:
                p50[name].append(job(builds[name], args.iterations, out))
                print("job %d %-12s p50 %.2f us" % (i, name, p50[name][-1]), flush=True)
    medians = {name: float(np.median(v)) for name, v in p50.items()}
    print(json.dumps({"benchmark": "metrics_cost_latency_4B", "jobs": args.jobs,
                      "iterations": args.iterations, "median_p50_us": medians,
                      "p50_us": p50,
                      "overhead_percent": 100 * (medians["counters"] / medians["no counters"] - 1)},
                     indent=1))


if __name__ == "__main__":
    main()
