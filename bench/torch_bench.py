"""kolo.torch against raw MPI (mpi4py on the same buffers) and torch.distributed
(gloo), in the same run. Run under kolorun; rank 0 prints one JSON object.

    kolorun -np 2 python3 bench/torch_bench.py sweep   [--max-bytes N] [--seconds S]
    kolorun -np 2 python3 bench/torch_bench.py latency [--iterations N]
    kolorun -np 2 python3 bench/torch_bench.py models  [--steps N] [--models resnet50,bert_base]
    kolorun -np 2 python3 bench/torch_bench.py alone --strategy kolo|kolo_grouped|kolo_grouped_blocking|raw_per_tensor|raw_packed [--model resnet50|bert_base|small]

`alone` runs one strategy by itself, as a training job would: no barrier and no
other strategy between steps; each rank times its steps and the slowest rank's
time per step is reported (bench/standalone.sh runs it job after job).

Every strategy in one benchmark runs in alternating rounds so that none gets a
warmer machine; a step's time is the slowest rank's; the table holds medians.
"""
import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from mpi4py import MPI

import kolo.torch as kolo
from model_shapes import bert_base_shapes

COMM = MPI.COMM_WORLD


def slowest(seconds):
    """A collective's time is the slowest rank's."""
    return COMM.allreduce(seconds, op=MPI.MAX)


def median(values):
    return float(np.median(np.asarray(values)))


def bus_bandwidth(nbytes, seconds, n):
    return nbytes * 2.0 * (n - 1) / n / seconds / 1e9


def interleaved(strategies, repeats, rounds=4):
    """Runs each strategy `repeats` times, split into alternating rounds.

    Returns {name: [seconds per call, slowest rank]}."""
    times = {name: [] for name in strategies}
    per_round = max(1, repeats // rounds)
    for _ in range(rounds):
        for name, fn in strategies.items():
            for _ in range(per_round):
                COMM.Barrier()
                start = time.perf_counter()
                fn()
                times[name].append(slowest(time.perf_counter() - start))
    return times


# --- 1. size sweep -----------------------------------------------------------

def sweep(args):
    n = kolo.size()
    rows = []
    size = 4
    while size <= args.max_bytes:
        x = torch.ones(size // 4)
        buf = x.numpy()

        def run_kolo():
            kolo.allreduce_(x, op=kolo.Sum, name="sweep")

        def run_raw():
            COMM.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

        run_raw(), run_kolo()
        start = time.perf_counter()
        run_raw()
        probe = COMM.bcast(time.perf_counter() - start)
        repeats = int(min(2000, max(8, args.seconds / max(probe, 1e-6))))
        t = interleaved({"raw": run_raw, "kolo": run_kolo}, repeats)
        raw, ko = median(t["raw"]), median(t["kolo"])
        rows.append({"bytes": size, "repeats": len(t["raw"]), "raw_us": raw * 1e6,
                     "kolo_torch_us": ko * 1e6, "raw_busbw_gbs": bus_bandwidth(size, raw, n),
                     "kolo_torch_busbw_gbs": bus_bandwidth(size, ko, n)})
        if kolo.rank() == 0:
            print("%10d B  raw %10.1f us  kolo.torch %10.1f us  (raw/kolo %.2f)"
                  % (size, raw * 1e6, ko * 1e6, raw / ko), file=sys.stderr)
        size *= 4
    return {"benchmark": "torch_sweep", "np": n, "rows": rows}


# --- 3. small-op latency -----------------------------------------------------

def latency(args):
    x = torch.ones(1)
    buf = x.numpy()
    results = {}
    for name, fn in (("raw MPI_Allreduce (mpi4py)", lambda: COMM.Allreduce(MPI.IN_PLACE, buf)),
                     ("kolo.torch allreduce_", lambda: kolo.allreduce_(x, op=kolo.Sum,
                                                                     name="latency"))):
        for _ in range(200):
            fn()
        samples = []
        for _ in range(args.iterations):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        # Per-rank percentiles; report the slower rank's.
        p50 = slowest(float(np.percentile(samples, 50)))
        p99 = slowest(float(np.percentile(samples, 99)))
        results[name] = {"p50_us": p50 * 1e6, "p99_us": p99 * 1e6}
    return {"benchmark": "latency_4B", "np": kolo.size(), "iterations": args.iterations,
            "rows": results}


# --- 2. model gradient sets --------------------------------------------------

def resnet50_shapes():
    import torchvision
    model = torchvision.models.resnet50()
    return [tuple(p.shape) for p in model.parameters()]


def small_shapes(tensors=100, elements=512):
    """The peers' "small" workload: 100 tensors, 0.2 MiB in all."""
    return [(elements,)] * tensors


MODELS = {"resnet50": resnet50_shapes, "bert_base": bert_base_shapes, "small": small_shapes}


class GradientSet:
    """Gradients laid out as DistributedOptimizer sees them: one tensor per
    parameter, submitted in backward order (last layer first)."""

    def __init__(self, shapes):
        self.backward = [torch.full(s, 1.0) for s in reversed(shapes)]
        self.numel = sum(t.numel() for t in self.backward)
        self.nbytes = self.numel * 4
        self.packed = np.ones(self.numel, dtype=np.float32)  # the lower bound's buffer
        self.names = ["grad.%d" % i for i in range(len(self.backward))]
        # Seconds spent in the submitting calls alone (not waiting), per step:
        # the part of a small step that is the Python binding's.
        self.submit_s = []

    def kolo(self):
        start = time.perf_counter()
        handles = [kolo.allreduce_async_(t, op=kolo.Sum, name=n)
                   for t, n in zip(self.backward, self.names)]
        self.submit_s.append(time.perf_counter() - start)
        for h in handles:
            kolo.synchronize(h)

    def kolo_grouped(self):
        start = time.perf_counter()
        handle = kolo.grouped_allreduce_async_(self.backward, op=kolo.Sum, name="grouped")
        self.submit_s.append(time.perf_counter() - start)
        kolo.synchronize(handle)

    def kolo_grouped_blocking(self):
        # The blocking call: the core is told the caller waits at once (caller_waits), so
        # the calling thread runs the round (KOLO_CALLER_RUNS). No submit time of its own.
        kolo.grouped_allreduce_(self.backward, op=kolo.Sum, name="grouped")

    def raw_packed(self):
        COMM.Allreduce(MPI.IN_PLACE, self.packed, op=MPI.SUM)

    def raw_per_tensor(self):
        for t in self.backward:
            COMM.Allreduce(MPI.IN_PLACE, t.numpy(), op=MPI.SUM)

    def fused_with_copies(self, limit=64 << 20):
        """Horovod's default: fill a 64 MiB buffer in submission order, reduce,
        copy out."""
        if not hasattr(self, "_fusion"):
            self._fusion = np.empty(limit // 4, dtype=np.float32)
        buf = self._fusion
        bucket, used = [], 0

        def flush():
            nonlocal bucket, used
            if not bucket:
                return
            off = 0
            for t in bucket:
                buf[off:off + t.numel()] = t.numpy().reshape(-1)
                off += t.numel()
            COMM.Allreduce(MPI.IN_PLACE, buf[:off], op=MPI.SUM)
            off = 0
            for t in bucket:
                t.numpy().reshape(-1)[:] = buf[off:off + t.numel()]
                off += t.numel()
            bucket, used = [], 0

        for t in self.backward:
            if t.numel() * 4 > limit:
                flush()
                COMM.Allreduce(MPI.IN_PLACE, t.numpy(), op=MPI.SUM)
                continue
            if used + t.numel() * 4 > limit:
                flush()
            bucket.append(t)
            used += t.numel() * 4
        flush()

    def gloo_buckets(self, bucket_bytes=25 * 1000 * 1000):
        """DDP's scheme: 25 MB buckets in backward order, flattened, reduced by gloo."""
        import torch.distributed as dist
        if not hasattr(self, "_buckets"):
            self._buckets, current, used = [], [], 0
            for t in self.backward:
                current.append(t)
                used += t.numel() * 4
                if used >= bucket_bytes:
                    self._buckets.append(current)
                    current, used = [], 0
            if current:
                self._buckets.append(current)
        for bucket in self._buckets:
            flat = torch.cat([t.reshape(-1) for t in bucket])
            dist.all_reduce(flat)
            off = 0
            for t in bucket:
                t.reshape(-1).copy_(flat[off:off + t.numel()])
                off += t.numel()


def models(args):
    import torch.distributed as dist
    dist.init_process_group("gloo", rank=kolo.rank(), world_size=kolo.size())
    results = []
    for name in args.models.split(","):
        grads = GradientSet(MODELS[name]())
        strategies = {
            "kolo": grads.kolo,
            "raw_packed": grads.raw_packed,
            "raw_per_tensor": grads.raw_per_tensor,
            "raw_fused_64MiB_with_copies": grads.fused_with_copies,
            "gloo_25MB_buckets": grads.gloo_buckets,
        }
        for fn in strategies.values():  # warm up: first touch, caches, buffers
            fn()
        t = interleaved(strategies, args.steps)
        ms = {k: median(v) * 1e3 for k, v in t.items()}
        best_raw = min(ms["raw_packed"], ms["raw_per_tensor"], ms["raw_fused_64MiB_with_copies"])
        row = {"model": name, "tensors": len(grads.backward), "parameters": grads.numel,
               "bytes": grads.nbytes, "steps": len(t["kolo"]), "step_ms": ms,
               "kolo_vs_best_raw": ms["kolo"] / best_raw,
               "gloo_vs_kolo": ms["gloo_25MB_buckets"] / ms["kolo"]}
        results.append(row)
        if kolo.rank() == 0:
            print(json.dumps(row), file=sys.stderr)
        del grads
    dist.destroy_process_group()
    return {"benchmark": "model_gradients", "np": kolo.size(), "rows": results}


def alone(args):
    """One strategy in its own job, nothing else between its steps."""
    grads = GradientSet(MODELS[args.model]())
    fn = getattr(grads, args.strategy)
    for _ in range(args.warmup):
        fn()
    COMM.Barrier()
    times = []
    grads.submit_s.clear()
    for _ in range(args.steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    slowest_per_step = np.max(np.asarray(COMM.allgather(times)), axis=0)
    return {"benchmark": "standalone_step", "np": kolo.size(), "model": args.model,
            "strategy": args.strategy, "steps": args.steps, "warmup": args.warmup,
            "median_ms": median(slowest_per_step) * 1e3,
            "submit_ms": median(grads.submit_s) * 1e3 if grads.submit_s else None,
            "step_ms": [t * 1e3 for t in slowest_per_step.tolist()]}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("sweep")
    p.add_argument("--max-bytes", type=int, default=256 << 20)
    p.add_argument("--seconds", type=float, default=0.4, help="time per size and path")
    p = sub.add_parser("latency")
    p.add_argument("--iterations", type=int, default=3000)
    p = sub.add_parser("models")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--models", default="resnet50,bert_base")
    p = sub.add_parser("alone")
    p.add_argument("--strategy", choices=["kolo", "kolo_grouped", "kolo_grouped_blocking", "raw_per_tensor",
                            "raw_packed"], default="kolo")
    p.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", help="write the JSON here as well as to stdout")
    args = parser.parse_args()
    torch.set_num_threads(1)
    kolo.init()
    result = {"sweep": sweep, "latency": latency, "models": models, "alone": alone}[args.what](args)
    result["settings"] = {k: v for k, v in os.environ.items() if k.startswith("KOLO_")}
    if kolo.rank() == 0:
        text = json.dumps(result, indent=1)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
    kolo.shutdown()


if __name__ == "__main__":
    main()
