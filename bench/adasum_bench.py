"""Adasum against Sum on host memory, in one job: the two take turns on the same float32
buffers, round after round, so machine noise hits both. Prints one JSON object (rank 0):
per size, the median seconds per allreduce of each op and their ratio.

    build/launcher/kolorun -np 4 python3 bench/adasum_bench.py [--sizes 4096,1048576] [--rounds 15]
"""
import argparse
import json
import time

import numpy as np

import kolo.numpy as kn


def seconds_per_call(array, op, name, repeats):
    start = time.perf_counter()
    for _ in range(repeats):
        kn.allreduce(array, op=op, name=name)
    return (time.perf_counter() - start) / repeats


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4096,262144,4194304,33554432",
                        help="bytes per buffer, comma-separated")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    kn.init()
    rng = np.random.default_rng(kn.rank())
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        array = rng.normal(size=size // 4).astype(np.float32)
        repeats = max(1, min(200, (8 << 20) // size))  # ~8 MiB moved per timing
        times = {"sum": [], "adasum": []}
        for r in range(args.rounds + 1):
            for op_name, op in (("sum", kn.Sum), ("adasum", kn.Adasum)):
                t = seconds_per_call(array, op, "bench.%s.%d" % (op_name, size), repeats)
                if r > 0:  # the first round warms up
                    times[op_name].append(t)
        sum_s, adasum_s = (float(np.median(times[k])) for k in ("sum", "adasum"))
        results.append({"bytes": size, "sum_s": sum_s, "adasum_s": adasum_s,
                        "ratio": adasum_s / sum_s})
    if kn.rank() == 0:
        print(json.dumps({"np": kn.size(), "dtype": "float32", "results": results}, indent=1))
    kn.shutdown()


if __name__ == "__main__":
    main()
