"""What one kolo.torch call costs its caller when no other rank is waited for: np=1, one
process, the fastest of many short loops (robust to other load on the machine, unlike a
two-rank latency, which such load turns into scheduling delays). A change's before and
after: run it on both builds, alternated.

    kolorun -np 1 python3 bench/call_cost.py [--rounds 40]

Prints one JSON object, µs per call (or per step of 100 tensors of 2 KiB):
``allreduce_`` of 4 bytes unnamed and named, 100 named ``allreduce_async_`` + 100
``synchronize``, the same unnamed, and one named blocking ``grouped_allreduce_`` of the 100.
"""
import argparse
import json
import time

import torch

import kolo.torch as kolo


def fastest(f, calls, rounds):
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            f()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    kolo.init()
    torch.set_num_threads(1)
    tensors = [torch.ones(512) for _ in range(100)]
    names = ["grad.%d" % i for i in range(100)]
    one = torch.ones(1)

    def per_tensor():
        handles = [kolo.allreduce_async_(t, op=kolo.Sum, name=n) for t, n in zip(tensors, names)]
        for h in handles:
            kolo.synchronize(h)

    def per_tensor_unnamed():
        handles = [kolo.allreduce_async_(t, op=kolo.Sum) for t in tensors]
        for h in handles:
            kolo.synchronize(h)

    cases = {
        "allreduce__4B_unnamed_us": (lambda: kolo.allreduce_(one, op=kolo.Sum), 200),
        "allreduce__4B_named_us": (lambda: kolo.allreduce_(one, op=kolo.Sum, name="x"), 200),
        "async100_named_us": (per_tensor, 3),
        "async100_unnamed_us": (per_tensor_unnamed, 3),
        "grouped100_blocking_us": (
            lambda: kolo.grouped_allreduce_(tensors, op=kolo.Sum, name="grouped"), 3),
    }
    for f, _ in cases.values():
        f()  # the response cache and the buffers, warm
    print(json.dumps({k: round(fastest(f, n, args.rounds), 2) for k, (f, n) in cases.items()}))


if __name__ == "__main__":
    main()
