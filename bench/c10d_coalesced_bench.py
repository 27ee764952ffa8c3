"""A list of small tensors through torch.distributed's coalescing manager on the backend
"kolo": all_reduce, all_gather_into_tensor and reduce_scatter_tensor of N tensors in one
`_coalescing_manager(async_ops=False)` block, the call that FSDP-style code makes. Each list
is one grouped kolo operation (docs/api-torch-distributed.md, "What it supports").

    # one build in a job of its own; rank 0 prints one JSON object
    kolorun -np 2 .venv/bin/python bench/c10d_coalesced_bench.py alone [--tensors 100]
    # before and after alternated: "kolo:base" runs the build in $BASE_BUILD
    BASE_BUILD=../wt-base/build .venv/bin/python bench/c10d_coalesced_bench.py jobs \\
        --sides kolo,kolo:base [--jobs 5]

A job times ``--iters`` blocks per collective after a few untimed ones (a block's time is
rank 0's, both ranks start each block together after a barrier) and reports the median
block in ms; `jobs` reports per side and collective the median over jobs and the spread
(slowest job / fastest).
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standalone_jobs  # noqa: E402

COLLECTIVES = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor")
WARMUP = 5


def alone(args):
    import torch
    import torch.distributed as dist
    import kolo.torch.c10d  # noqa: F401  (registers the backend)
    torch.set_num_threads(1)
    dist.init_process_group(backend="kolo")
    size, n, numel = dist.get_world_size(), args.tensors, args.bytes // 4
    inputs = [torch.ones(numel) for _ in range(n)]
    big = [torch.ones(numel * size) for _ in range(n)]
    outs = [torch.zeros(numel * size) for _ in range(n)]
    small = [torch.zeros(numel) for _ in range(n)]
    calls = {
        "all_reduce": lambda: [dist.all_reduce(t) for t in inputs],
        "all_gather_into_tensor": lambda: [dist.all_gather_into_tensor(o, i)
                                           for o, i in zip(outs, inputs)],
        "reduce_scatter_tensor": lambda: [dist.reduce_scatter_tensor(o, i)
                                          for o, i in zip(small, big)],
    }
    result = {"benchmark": "c10d_coalesced", "tensors": n, "bytes": args.bytes,
              "np": size, "median_ms": {}}
    for name in COLLECTIVES:
        times = []
        for i in range(WARMUP + args.iters):
            dist.barrier()
            start = time.perf_counter()
            with dist._coalescing_manager(async_ops=False):
                calls[name]()
            if i >= WARMUP:
                times.append(time.perf_counter() - start)
        result["median_ms"][name] = float(np.median(times)) * 1e3
    rank = dist.get_rank()
    dist.destroy_process_group()
    return rank, result


def jobs(args):
    kolorun = standalone_jobs.kolorun(2)
    python = standalone_jobs.interpreter(args.python)
    runs = {s: [] for s in args.sides.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        commands = {}
        for side in runs:
            run = standalone_jobs.base_kolorun(2) if side.endswith(":base") else kolorun
            commands[side] = run + [python, os.path.abspath(__file__), "--out", out, "alone",
                                    "--tensors", str(args.tensors), "--bytes", str(args.bytes),
                                    "--iters", str(args.iters)]
        for i, side, job in standalone_jobs.alternate(args.jobs, commands, out):
            runs[side].append(job)
            print("job %d %-10s %s" % (i + 1, side, job["median_ms"]), file=sys.stderr)
    summary = {side: {name: standalone_jobs.spread([job["median_ms"][name] for job in jobs])
                      for name in COLLECTIVES} for side, jobs in runs.items()}
    placements = {side: [job.get("placement", {}).get("placement", "unknown") for job in jobs]
                  for side, jobs in runs.items()}
    for name in COLLECTIVES:
        print("%-24s" % name + "".join("%12.3f" % summary[s][name]["median_ms"] for s in runs),
              file=sys.stderr)
    return 0, {"benchmark": "c10d_coalesced", "commit": standalone_jobs.commit(),
               "tensors": args.tensors, "bytes": args.bytes, "jobs": args.jobs,
               "sides": summary, "placements": placements}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the JSON here as well as to stdout")
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("alone", "jobs"):
        p = sub.add_parser(name)
        p.add_argument("--tensors", type=int, default=100)
        p.add_argument("--bytes", type=int, default=2048, help="bytes per tensor and rank")
        p.add_argument("--iters", type=int, default=50)
    p.add_argument("--jobs", type=int, default=5)
    p.add_argument("--sides", default="kolo,kolo:base")
    p.add_argument("--python", default=".venv/bin/python")
    args = parser.parse_args()
    rank, result = alone(args) if args.what == "alone" else jobs(args)
    if rank == 0:
        standalone_jobs.write_result(result, args.out)


if __name__ == "__main__":
    main()
