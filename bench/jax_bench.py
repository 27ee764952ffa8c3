"""kolo.jax's gradient allreduce against kolo.torch's on the same tensors (issue 17's speed
target), against JAX's own cross-process psum, and the copies each path makes.

    # one path in a job of its own; rank 0 prints one JSON object
    JAX_PLATFORMS=cpu kolorun -np 2 .venv/bin/python bench/jax_bench.py alone --path jit_optimizer
    # a 100 MB allreduce against a 100 MB memcpy, and page faults per call
    kolorun -np 2 .venv/bin/python bench/jax_bench.py copies
    # the comparison: each path in jobs of its own, JOBS rounds, paths alternated job by job
    python3 bench/jax_bench.py jobs [--jobs 5] [--out bench/results/jax_vs_torch.json]

Paths (`alone`), all on ResNet-50's gradients (torchvision's 161 parameter shapes, 97.5 MiB,
backward order), float32, op Sum:
  jit_optimizer   a jax.jit step: kj.DistributedOptimizer(optax.identity(), op=Sum).update,
                  kolo.jax's ordered io_callback inside the jitted computation
  jit_allreduce   a jax.jit step: kj.allreduce(grads, op=Sum)
  eager           kj.allreduce(grads, op=Sum), eagerly (NumPy views in, DLPack out)
  psum            JAX's own collective: jax.distributed.initialize() (JAX finds Open MPI's
                  environment that kolorun sets up), then a jitted shard_map of
                  jax.lax.psum over the processes' CPU devices (JAX's gloo CPU collectives)
  plain_jit       a jax.jit step that returns grads * 1 with no allreduce: jit's own cost
kolo.torch's side is bench/torch_bench.py's `alone` (kolo: allreduce_async_ per tensor, as
DistributedOptimizer does; kolo_grouped: one grouped_allreduce_async_), with the same step
and warm-up counts. As in tf_bench.py, a step's time is the slowest rank's (every step ends
with jax.block_until_ready) and a job reports its median step.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_bench import MODELS, median, run_job  # noqa: E402

JAX_PATHS = ("jit_optimizer", "jit_allreduce", "eager", "psum", "plain_jit")
TORCH_STRATEGIES = ("kolo", "kolo_grouped")


def _jax():
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    return jax


# --- one JAX path in a job of its own ----------------------------------------------------

def psum_step(jax, shapes):
    """JAX's own allreduce of ``shapes`` over the processes: every process holds one row of
    a global array per tensor; a jitted shard_map sums the rows."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    mesh = Mesh(np.array(jax.devices()), ("ranks",))
    sharding = NamedSharding(mesh, P("ranks"))
    grads = [jax.make_array_from_process_local_data(sharding, np.ones((1,) + s, np.float32))
             for s in shapes]
    summed = jax.jit(jax.shard_map(
        lambda *g: [jax.lax.psum(x[0], "ranks") for x in g], mesh=mesh,
        in_specs=tuple(P("ranks") for _ in shapes), out_specs=[P() for _ in shapes]))
    return lambda: summed(*grads)


def alone(args):
    jax = _jax()
    shapes = list(reversed(MODELS[args.model]()))
    if args.path == "psum":
        jax.distributed.initialize()
    import jax.numpy as jnp
    import optax
    import kolo.jax as kj
    kj.init()
    grads = [jnp.ones(s, jnp.float32) for s in shapes]
    if args.path == "psum":
        step = psum_step(jax, shapes)
    elif args.path == "jit_optimizer":
        tx = kj.DistributedOptimizer(optax.identity(), op=kj.Sum)
        state = tx.init(grads)
        update = jax.jit(lambda g: tx.update(g, state)[0])
        step = lambda: update(grads)  # noqa: E731
    elif args.path == "jit_allreduce":
        reduce = jax.jit(lambda g: kj.allreduce(g, op=kj.Sum))
        step = lambda: reduce(grads)  # noqa: E731
    elif args.path == "eager":
        step = lambda: kj.allreduce(grads, op=kj.Sum)  # noqa: E731
    else:
        same = jax.jit(lambda g: [x * 1.0 for x in g])
        step = lambda: same(grads)  # noqa: E731

    def timed():
        return jax.block_until_ready(step())
    out = timed()
    if args.path != "plain_jit":  # a wrong sum would make the timing meaningless
        got = float(jnp.min(out[0])), float(jnp.max(out[-1]))
        if got != (kj.size(), kj.size()):
            raise SystemExit("%s: allreduce sum gave %s, expected %d" % (args.path, got,
                                                                        kj.size()))
    del out
    for _ in range(args.warmup):
        timed()
    kj.barrier()
    times, faults = [], []
    for _ in range(args.steps):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        out = timed()
        times.append(time.perf_counter() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        del out
    everyone = kj.allgather_object((times, faults))
    slowest_per_step = np.max(np.asarray([t for t, _ in everyone]), axis=0)
    result = {"benchmark": "standalone_step", "framework": "jax", "np": kj.size(),
              "model": args.model, "path": args.path, "steps": args.steps,
              "warmup": args.warmup, "median_ms": median(slowest_per_step) * 1e3,
              "step_ms": [t * 1e3 for t in slowest_per_step.tolist()],
              "minor_faults_per_step": max(median(f) for _, f in everyone),
              "jax": jax.__version__}
    if args.path == "psum":
        result["jax_cpu_collectives"] = str(jax.config.jax_cpu_collectives_implementation)
    return kj, result


# --- copies: a big allreduce against a memcpy of the same bytes --------------------------

def copies(args):
    """tf_bench.py's `copies` for kolo.jax: one allreduce of `mbytes` MB per path against a
    memcpy of the same bytes, alternating rounds, a barrier before each call; kolo.numpy's
    out-of-place allreduce of the same buffer is the binding-free reference."""
    jax = _jax()
    import jax.numpy as jnp
    import kolo.numpy as kn
    import kolo.jax as kj
    kj.init()
    count = int(args.mbytes * 1e6) // 4
    src = np.ones(count, dtype=np.float32)
    dst = np.zeros_like(src)
    x = jnp.ones(count, jnp.float32)
    in_jit = jax.jit(lambda v: kj.allreduce(v, op=kj.Sum, name="copies_jit"))
    paths = {"memcpy into a reused buffer": lambda: np.copyto(dst, src),
             "memcpy into fresh memory (np.copy)": lambda: src.copy(),
             "kolo.numpy allreduce (new output)": lambda: kn.allreduce(src, op=kn.Sum,
                                                                       name="copies_numpy"),
             "kolo.jax allreduce, eager": lambda: jax.block_until_ready(
                 kj.allreduce(x, op=kj.Sum, name="copies")),
             "kolo.jax allreduce, jit": lambda: jax.block_until_ready(in_jit(x))}
    for name, fn in paths.items():  # warm up; a wrong sum would make the timing meaningless
        out = fn()
        if "allreduce" in name and float(np.asarray(out).reshape(-1)[-1]) != kj.size():
            raise SystemExit("copies: %s gave %s, expected %d" % (
                name, np.asarray(out).reshape(-1)[-1], kj.size()))
        del out
    seconds = {name: [] for name in paths}
    faults = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, fn in paths.items():
            for _ in range(args.repeats):
                kj.barrier()
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.perf_counter()
                out = fn()
                seconds[name].append(time.perf_counter() - start)
                faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
                del out
    everyone = kj.allgather_object((seconds, faults))
    rows = {}
    memcpy_ms = None
    for name in paths:
        slowest = np.max([s[name] for s, _ in everyone], axis=0)
        ms = median(slowest) * 1e3
        memcpy_ms = memcpy_ms or ms  # the first path is the memcpy
        rows[name] = {"median_ms": ms, "memcpy_units": ms / memcpy_ms,
                      "minor_faults_per_call": median([median(f[name]) for _, f in everyone])}
    return kj, {"benchmark": "allreduce_copies", "framework": "jax", "np": kj.size(),
                "bytes": count * 4, "calls": args.rounds * args.repeats, "rows": rows,
                "jax": jax.__version__}


# --- the comparison: jobs alternated -------------------------------------------------------

def jobs(args):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    build = os.path.join(root, os.environ.get("BUILD", "build"))
    kolorun = [os.path.join(build, "launcher", "kolorun"), "-np", str(args.np)]
    os.environ["PYTHONPATH"] = os.path.join(build, "python") + (
        ":" + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    jax_python, torch_python = (os.path.join(root, p) for p in (args.jax_python,
                                                                 args.torch_python))
    me = os.path.abspath(__file__)
    torch_bench = os.path.join(root, "bench", "torch_bench.py")
    counts = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--model", args.model]
    medians = {"jax " + p: [] for p in args.jax_paths.split(",")}
    medians.update({"torch " + s: [] for s in args.torch_strategies.split(",")})
    faults = {name: [] for name in medians}
    copy_runs = []
    load = os.getloadavg()
    versions = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        for i in range(args.jobs):
            for name in medians:
                framework, path = name.split(" ")
                if framework == "jax":
                    cmd = kolorun + [jax_python, me, "--out", out, "alone", "--path", path] + counts
                else:
                    cmd = kolorun + [torch_python, torch_bench, "--out", out, "alone",
                                     "--strategy", path] + counts
                job = run_job(cmd, out)
                medians[name].append(job["median_ms"])
                versions.update({k: job[k] for k in ("jax", "jax_cpu_collectives") if k in job})
                if "minor_faults_per_step" in job:
                    faults[name].append(job["minor_faults_per_step"])
                print("job %d %-22s %8.2f ms" % (i + 1, name, medians[name][-1]), file=sys.stderr)
            if args.copies_jobs is None or args.copies_jobs > i:
                cmd = kolorun + [jax_python, me, "--out", out, "copies", "--mbytes",
                                 str(args.mbytes)]
                copy_runs.append(run_job(cmd, out))
    paths = {name: {"job_median_ms": m, "median_ms": statistics.median(m),
                    "slowest_over_fastest": max(m) / min(m)} for name, m in medians.items()}
    for name, f in faults.items():
        if f:
            paths[name]["minor_faults_per_step"] = statistics.median(f)
    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True, check=False).stdout.strip()
    result = {"benchmark": "jax_vs_torch", "commit": commit, "model": args.model, "np": args.np,
              "jobs": args.jobs, "steps": args.steps, "warmup": args.warmup,
              "load_before": list(load), "versions": versions, "paths": paths, "ratios": {}}
    for j in (n for n in paths if n.startswith("jax ") and "plain_jit" not in n):
        for r in (n for n in paths if n.startswith("torch ")):
            result["ratios"]["%s / %s" % (j, r)] = paths[j]["median_ms"] / paths[r]["median_ms"]
    if copy_runs:
        rows = {}
        for name in copy_runs[0]["rows"]:
            rows[name] = {key: statistics.median(r["rows"][name][key] for r in copy_runs)
                          for key in copy_runs[0]["rows"][name]}
        result["copies"] = {"jax": {"jobs": len(copy_runs), "bytes": copy_runs[0]["bytes"],
                                    "calls_per_job": copy_runs[0]["calls"], "rows": rows}}
    for name, p in paths.items():
        print("%-22s per job: %s  median %.2f ms, slowest/fastest %.2f" % (
            name, " ".join("%.2f" % m for m in p["job_median_ms"]), p["median_ms"],
            p["slowest_over_fastest"]), file=sys.stderr)
    for name, ratio in result["ratios"].items():
        print("%-45s %.2f" % (name, ratio), file=sys.stderr)
    return None, result


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the JSON here as well as to stdout")
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("alone")
    p.add_argument("--path", choices=JAX_PATHS, default="jit_optimizer")
    p.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p = sub.add_parser("copies")
    p.add_argument("--mbytes", type=float, default=100)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5, help="calls per path and round")
    p = sub.add_parser("jobs")
    p.add_argument("--jobs", type=int, default=5)
    p.add_argument("--np", type=int, default=int(os.environ.get("NP", 2)))
    p.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--jax-paths", default=",".join(JAX_PATHS))
    p.add_argument("--torch-strategies", default=",".join(TORCH_STRATEGIES))
    p.add_argument("--copies-jobs", type=int, default=None,
                   help="rounds that also run `copies` (default: all)")
    p.add_argument("--mbytes", type=float, default=100)
    p.add_argument("--jax-python", default=".venv/bin/python")
    p.add_argument("--torch-python", default="/usr/bin/python3")
    args = parser.parse_args()
    kj, result = {"alone": alone, "copies": copies, "jobs": jobs}[args.what](args)
    result["settings"] = {k: v for k, v in os.environ.items()
                          if k.startswith(("KOLO_", "MALLOC_", "XLA_", "JAX_"))}
    if kj is None or kj.rank() == 0:
        text = json.dumps(result, indent=1)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text + "\n")
    if kj is not None:
        kj.shutdown()


if __name__ == "__main__":
    main()
