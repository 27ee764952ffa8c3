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
  jit_donated     a jax.jit step: kj.DistributedOptimizer(optax.identity(), op=Sum).update
                  with the gradients donated (donate_argnums), each step's result being the
                  next step's gradients: the allreduce runs in place on XLA's buffers, as it
                  does on gradients that a jitted train step computes itself
  jit_optimizer   the same step without donation: the gradients are the computation's
                  arguments, which XLA keeps intact, so it copies them into fresh buffers
                  for the in-place allreduce (the copies of a benchmark, not of a train step)
  jit_allreduce   a jax.jit step: kj.allreduce(grads, op=Sum), not donated
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
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standalone_jobs  # noqa: E402
from tf_bench import (MODELS, add_compare_arguments, compare_with_torch,  # noqa: E402
                      measure_copies, time_steps)

JAX_PATHS = ("jit_donated", "jit_optimizer", "jit_allreduce", "eager", "psum", "plain_jit")


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
    elif args.path in ("jit_optimizer", "jit_donated"):
        tx = kj.DistributedOptimizer(optax.identity(), op=kj.Sum)
        state = tx.init(grads)
        donated = args.path == "jit_donated"
        update = jax.jit(lambda g: tx.update(g, state)[0], donate_argnums=0 if donated else ())
        inputs = [grads]

        def step():
            out = update(inputs[0])
            if donated:  # the next step reduces this step's result, in place again
                inputs[0] = out
            return out
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
    extra = {"jax": jax.__version__}
    if args.path == "psum":
        extra["jax_cpu_collectives"] = str(jax.config.jax_cpu_collectives_implementation)
    return kj, time_steps(timed, kj, "jax", args, extra)


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
    donated_jit = jax.jit(lambda v: kj.allreduce(v, op=kj.Sum, name="copies_donated"),
                          donate_argnums=0)
    donated = [jnp.ones(count, jnp.float32)]

    def in_place():  # each call reduces the previous call's result in place (powers of np)
        donated[0] = jax.block_until_ready(donated_jit(donated[0]))
        return donated[0]
    paths = {"memcpy into a reused buffer": lambda: np.copyto(dst, src),
             "memcpy into fresh memory (np.copy)": lambda: src.copy(),
             "kolo.numpy allreduce (new output)": lambda: kn.allreduce(src, op=kn.Sum,
                                                                       name="copies_numpy"),
             "kolo.jax allreduce, eager": lambda: jax.block_until_ready(
                 kj.allreduce(x, op=kj.Sum, name="copies")),
             "kolo.jax allreduce, jit": lambda: jax.block_until_ready(in_jit(x)),
             "kolo.jax allreduce, jit, donated (in place)": in_place}
    rows = measure_copies(paths, kj, args)
    return kj, {"benchmark": "allreduce_copies", "framework": "jax", "np": kj.size(),
                "bytes": count * 4, "calls": args.rounds * args.repeats, "rows": rows,
                "jax": jax.__version__}


# --- the comparison: jobs alternated -------------------------------------------------------

def jobs(args):
    return None, compare_with_torch(args, "jax", args.jax_python, args.jax_paths.split(","),
                                    {"plain_jit"}, [("jax", [], args.jax_python)],
                                    "jax_vs_torch", {"JAX_PLATFORMS": "cpu"})


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
    add_compare_arguments(sub.add_parser("jobs"), "jax", JAX_PATHS)
    args = parser.parse_args()
    kj, result = {"alone": alone, "copies": copies, "jobs": jobs}[args.what](args)
    result["settings"] = {k: v for k, v in os.environ.items()
                          if k.startswith(("KOLO_", "MALLOC_", "XLA_", "JAX_"))}
    if kj is None or kj.rank() == 0:
        standalone_jobs.write_result(result, args.out)
    if kj is not None:
        kj.shutdown()


if __name__ == "__main__":
    main()
