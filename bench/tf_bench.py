"""kolo.tensorflow's gradient allreduce against kolo.torch's on the same tensors (issue 16's
speed target), and the copies each path makes.

    # one path in a job of its own; rank 0 prints one JSON object
    kolorun -np 2 .venv/bin/python bench/tf_bench.py alone --path tape_eager [--model resnet50]
    # a 100 MB allreduce against a 100 MB memcpy, and page faults per call
    kolorun -np 2 .venv/bin/python bench/tf_bench.py copies
    kolorun -np 2 /usr/bin/python3 bench/tf_bench.py copies --framework torch
    # the comparison: each path in jobs of its own, JOBS rounds, paths alternated job by job
    python3 bench/tf_bench.py jobs [--jobs 5] [--out bench/results/tf_vs_torch.json]
    # kolo's TensorFlow ops against the tf.numpy_function path (KOLO_TF_OPS=0), each path
    # in jobs of its own, the two alternated job by job
    python3 bench/tf_bench.py ops [--jobs 5] [--tf-paths grouped_function,tape_eager]

Paths (`alone`), all on ResNet-50's gradients as kolo.torch's DistributedOptimizer sees them
(torchvision's 161 parameter shapes, 97.5 MiB, backward order), float32, op Sum:
  tape_eager        hvd.DistributedGradientTape(tape, op=hvd.Sum).gradient(...), eagerly
  tape_function     the same inside tf.function
  grouped_eager     hvd.grouped_allreduce(gradients, op=hvd.Sum), eagerly
  grouped_function  the same inside tf.function
  plain_tape        tf.GradientTape alone: the tape's own cost, no allreduce
  keras_fit         a whole training step, as Horovod's tensorflow2_keras_synthetic_benchmark.py
                    takes one: keras.applications.ResNet50 (64x64 images, batch 32 per rank,
                    10 classes) compiled with kolo.tensorflow.keras.DistributedOptimizer(SGD),
                    one model.train_on_batch on synthetic data (model compute included; --model
                    does not apply)
The tape's loss has a custom gradient that returns the prepared gradient tensors, so a step
is the tape plus the allreduce, with no model compute. kolo.torch's side is
bench/torch_bench.py's `alone` (strategies kolo: allreduce_async_ per tensor, as
DistributedOptimizer does; kolo_grouped: one grouped_allreduce_async_), with the same step
and warm-up counts. As in torch_bench.py, a step's time is the slowest rank's and a job
reports its median step.
"""
import argparse
import os
import resource
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standalone_jobs  # noqa: E402

TF_PATHS = ("tape_eager", "tape_function", "grouped_eager", "grouped_function", "plain_tape")
TORCH_STRATEGIES = ("kolo", "kolo_grouped")


def resnet50_shapes():
    """torchvision.models.resnet50()'s parameter shapes in its parameters() order (the same
    list as bench/torch_bench.py's, without needing torchvision)."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for block in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,),
                       (planes, planes, 3, 3), (planes,), (planes,),
                       (planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]
            if block == 0:  # the downsample branch
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    return shapes + [(1000, 2048), (1000,)]


def small_shapes(tensors=100, elements=512):
    return [(elements,)] * tensors


MODELS = {"resnet50": resnet50_shapes, "small": small_shapes}


def median(values):
    return float(np.median(np.asarray(values)))


def time_steps(step, hvd, framework, args, extra):
    """Times ``step`` (after ``args.warmup`` untimed calls) ``args.steps`` times on every
    rank; a step's time is the slowest rank's. Returns the `alone` result: the median step,
    every step, and minor page faults per step (the most of any rank, median over steps:
    fresh output memory costs like a copy, since the kernel zeroes every page)."""
    for _ in range(args.warmup):
        step()
    hvd.barrier()
    times, faults = [], []
    for _ in range(args.steps):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        out = step()
        times.append(time.perf_counter() - start)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
        del out
    everyone = hvd.allgather_object((times, faults))
    slowest_per_step = np.max(np.asarray([t for t, _ in everyone]), axis=0)
    result = {"benchmark": "standalone_step", "framework": framework, "np": hvd.size(),
              "model": args.model, "path": args.path, "steps": args.steps,
              "warmup": args.warmup, "median_ms": median(slowest_per_step) * 1e3,
              "step_ms": [t * 1e3 for t in slowest_per_step.tolist()],
              "minor_faults_per_step": max(median(f) for _, f in everyone)}
    result.update(extra)
    return result


def measure_copies(paths, hvd, args):
    """Times every path of ``paths`` (name -> call; the first is the memcpy reference) in
    alternating rounds, a barrier before each call, and returns per path the slowest rank's
    median, that time in memcpy units, and minor page faults per call. An allreduce path
    must give the set's size everywhere (all inputs are ones): a wrong sum would make the
    timing meaningless."""
    for name, fn in paths.items():
        out = fn()
        if "allreduce" in name and float(np.asarray(out).reshape(-1)[-1]) != hvd.size():
            raise SystemExit("copies: %s gave %s, expected %d" % (
                name, np.asarray(out).reshape(-1)[-1], hvd.size()))
        del out
    seconds = {name: [] for name in paths}
    faults = {name: [] for name in paths}
    for _ in range(args.rounds):
        for name, fn in paths.items():
            for _ in range(args.repeats):
                hvd.barrier()
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.perf_counter()
                out = fn()
                seconds[name].append(time.perf_counter() - start)
                faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
                del out
    everyone = hvd.allgather_object((seconds, faults))
    rows = {}
    memcpy_ms = None
    for name in paths:
        slowest = np.max([s[name] for s, _ in everyone], axis=0)
        ms = median(slowest) * 1e3
        memcpy_ms = memcpy_ms or ms
        rows[name] = {"median_ms": ms, "memcpy_units": ms / memcpy_ms,
                      "minor_faults_per_call": median([median(f[name]) for _, f in everyone])}
    return rows


# --- one TF path in a job of its own -----------------------------------------

def tf_step(path, hvd, tf, grads):
    """The step function of one path; grads are the gradients in backward order."""
    @tf.custom_gradient
    def loss_with_given_gradients(*sources):
        return tf.constant(0.0), lambda upstream: list(grads)

    def tape_step(distributed):
        with tf.GradientTape() as tape:
            tape.watch(grads)
            loss = loss_with_given_gradients(*grads)
        if distributed:
            tape = hvd.DistributedGradientTape(tape, op=hvd.Sum)
        return tape.gradient(loss, grads)

    def grouped_step():
        return hvd.grouped_allreduce(grads, op=hvd.Sum)

    return {"tape_eager": lambda: tape_step(True),
            "tape_function": tf.function(lambda: tape_step(True)),
            "grouped_eager": grouped_step,
            "grouped_function": tf.function(grouped_step),
            "plain_tape": lambda: tape_step(False)}[path]


def keras_fit_step(hvd):
    """One Keras training step of ResNet-50 on synthetic data through kolo's
    DistributedOptimizer; the ranks start from rank 0's weights."""
    import keras
    import kolo.tensorflow.keras as hvd_keras
    model = keras.applications.ResNet50(weights=None, input_shape=(64, 64, 3), classes=10)
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.01)),
                  loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(hvd.rank())
    x = rng.random((32, 64, 64, 3), dtype=np.float32)
    y = rng.integers(0, 10, 32)
    model.train_on_batch(x, y)
    hvd_keras.broadcast_global_variables(0, model)

    def check_equal_weights():
        """The averaged steps keep every rank's trainable weights equal (batch norm's moving
        statistics are each rank's own, as under Horovod): else the timing is moot."""
        checksum = float(sum(np.sum(w.numpy(), dtype=np.float64) for w in model.trainable_weights))
        if len(set(hvd.allgather_object(checksum))) != 1:
            raise SystemExit("keras_fit: the ranks' weights differ after a step")

    return lambda: model.train_on_batch(x, y), check_equal_weights


def alone(args):
    import tensorflow as tf
    import kolo.tensorflow as hvd
    tf.config.threading.set_intra_op_parallelism_threads(1)
    hvd.init()
    if args.path == "keras_fit":
        step, check = keras_fit_step(hvd)
        step()
        check()
        result = time_steps(step, hvd, "tensorflow", args, {"tensorflow": tf.__version__})
        check()
        return hvd, result
    grads = [tf.fill(s, 1.0) for s in reversed(MODELS[args.model]())]
    step = tf_step(args.path, hvd, tf, grads)
    out = step()
    if args.path != "plain_tape":  # a wrong sum would make the timing meaningless
        got = float(tf.reduce_min(out[0])), float(tf.reduce_max(out[-1]))
        if got != (hvd.size(), hvd.size()):
            raise SystemExit("%s: allreduce sum gave %s, expected %d" % (args.path, got,
                                                                        hvd.size()))
    del out
    return hvd, time_steps(step, hvd, "tensorflow", args, {"tensorflow": tf.__version__})


# --- copies: a big allreduce against a memcpy of the same bytes --------------

def copies(args):
    """Times one allreduce of `mbytes` MB per path against a memcpy of the same bytes, in
    alternating rounds, every rank at once (a barrier before each call). An allreduce at
    np=2 has to move the bytes a few times anyway; a path that adds a staging copy is one
    memcpy slower than the zero-copy reference in the same job. Minor page faults per call
    show the cost of allocating fresh output memory, which a copy count does not."""
    count = int(args.mbytes * 1e6) // 4
    src = np.ones(count, dtype=np.float32)
    dst = np.zeros_like(src)
    paths = {"memcpy into a reused buffer": lambda: np.copyto(dst, src),
             "memcpy into fresh memory (np.copy)": lambda: src.copy()}
    if args.framework == "torch":
        import torch
        import kolo.torch as hvd
        torch.set_num_threads(1)
        hvd.init()
        t, inplace = torch.ones(count), torch.ones(count)
        # In place, the sum doubles every call: float32 has room for ~127 calls.
        paths["kolo.torch allreduce_ (in place)"] = lambda: hvd.allreduce_(inplace, op=hvd.Sum,
                                                                         name="copies")
        paths["kolo.torch allreduce (new output)"] = lambda: hvd.allreduce(t, op=hvd.Sum,
                                                                         name="copies_out")
        version = {"torch": torch.__version__}
    else:
        import tensorflow as tf
        import kolo.numpy as kn
        import kolo.tensorflow as hvd
        tf.config.threading.set_intra_op_parallelism_threads(1)
        hvd.init()
        t = tf.ones([count])
        in_function = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum, name="copies_fn"))
        paths["kolo.numpy allreduce (new output)"] = lambda: kn.allreduce(
            src, op=kn.Sum, name="copies_numpy")
        paths["kolo.tensorflow allreduce, eager"] = lambda: hvd.allreduce(t, op=hvd.Sum,
                                                                        name="copies")
        paths["kolo.tensorflow allreduce, tf.function"] = lambda: in_function(t)
        version = {"tensorflow": tf.__version__}
    rows = measure_copies(paths, hvd, args)
    result = {"benchmark": "allreduce_copies", "framework": args.framework, "np": hvd.size(),
              "bytes": count * 4, "calls": args.rounds * args.repeats, "rows": rows}
    result.update(version)
    return hvd, result


# --- the comparison: jobs alternated ------------------------------------------

def compare_with_torch(args, label, python, paths, skip, copies, benchmark, env):
    """The comparison: each of the framework's ``paths`` (this script's `alone --path`,
    labelled "<label> <path>") and each of torch_bench.py's strategies in a kolorun job of
    its own, ``args.jobs`` rounds with the jobs alternated; ``copies`` are
    (framework, extra `copies` arguments, interpreter) jobs run in each round up to
    ``args.copies_jobs``. Paths in ``skip`` get no ratio (they do no allreduce)."""
    kolorun = standalone_jobs.kolorun(args.np)
    for key, value in env.items():
        os.environ.setdefault(key, value)
    python, torch_python = (standalone_jobs.interpreter(p) for p in (python, args.torch_python))
    me = os.path.abspath(sys.argv[0])
    torch_bench = os.path.join(standalone_jobs.ROOT, "bench", "torch_bench.py")
    counts = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--model", args.model]
    medians = {label + " " + p: [] for p in paths}
    medians.update({"torch " + s: [] for s in args.torch_strategies.split(",")})
    faults = {name: [] for name in medians}
    copy_runs = {framework: [] for framework, _, _ in copies}
    versions = {}
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        commands = {}
        for name in medians:
            framework, path = name.split(" ")
            if framework == label:
                commands[name] = kolorun + [python, me, "--out", out, "alone", "--path",
                                            path] + counts
            else:
                commands[name] = kolorun + [torch_python, torch_bench, "--out", out, "alone",
                                            "--strategy", path] + counts
        for framework, extra, interp in copies:
            argv = kolorun + [standalone_jobs.interpreter(interp), me, "--out", out,
                              "copies"] + extra + ["--mbytes", str(args.mbytes)]
            commands[("copies", framework)] = (
                lambda i, argv=argv: argv if args.copies_jobs is None or args.copies_jobs > i
                else None)
        for i, name, job in standalone_jobs.alternate(args.jobs, commands, out):
            if isinstance(name, tuple):
                copy_runs[name[1]].append(job)
                continue
            medians[name].append(job["median_ms"])
            versions.update({k: job[k] for k in (label, "jax_cpu_collectives") if k in job})
            if "minor_faults_per_step" in job:
                faults[name].append(job["minor_faults_per_step"])
            print("job %d %-28s %8.2f ms" % (i + 1, name, medians[name][-1]), file=sys.stderr)
    summary = {name: standalone_jobs.spread(m) for name, m in medians.items()}
    for name, f in faults.items():
        if f:
            summary[name]["minor_faults_per_step"] = statistics.median(f)
    result = {"benchmark": benchmark, "commit": standalone_jobs.commit(), "model": args.model,
              "np": args.np, "jobs": args.jobs, "steps": args.steps, "warmup": args.warmup,
              "load_before": list(load), "versions": versions, "paths": summary,
              "ratios": {}}
    for mine in (n for n in summary if n.startswith(label + " ") and n.split(" ")[1] not in skip):
        for torch in (n for n in summary if n.startswith("torch ")):
            result["ratios"]["%s / %s" % (mine, torch)] = (summary[mine]["median_ms"] /
                                                           summary[torch]["median_ms"])
    if any(copy_runs.values()):
        result["copies"] = {}
        for framework, runs in copy_runs.items():
            if not runs:
                continue
            rows = {}
            for name in runs[0]["rows"]:
                rows[name] = {key: statistics.median(r["rows"][name][key] for r in runs)
                              for key in runs[0]["rows"][name]}
            result["copies"][framework] = {"jobs": len(runs), "bytes": runs[0]["bytes"],
                                           "calls_per_job": runs[0]["calls"], "rows": rows}
    for name, p in summary.items():
        print("%-28s per job: %s  median %.2f ms, slowest/fastest %.2f" % (
            name, " ".join("%.2f" % m for m in p["job_median_ms"]), p["median_ms"],
            p["slowest_over_fastest"]), file=sys.stderr)
    for name, ratio in result["ratios"].items():
        print("%-55s %.2f" % (name, ratio), file=sys.stderr)
    return result


def add_compare_arguments(p, prefix, paths):
    """The `jobs` subcommand's options of compare_with_torch's callers: ``paths`` are the
    framework's, chosen by --<prefix>-paths and run on --<prefix>-python."""
    p.add_argument("--jobs", type=int, default=5)
    p.add_argument("--np", type=int, default=int(os.environ.get("NP", 2)))
    p.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--%s-paths" % prefix, default=",".join(paths))
    p.add_argument("--torch-strategies", default=",".join(TORCH_STRATEGIES))
    p.add_argument("--copies-jobs", type=int, default=None,
                   help="rounds that also run `copies` (default: all)")
    p.add_argument("--mbytes", type=float, default=100)
    p.add_argument("--%s-python" % prefix, default=".venv/bin/python")
    p.add_argument("--torch-python", default="/usr/bin/python3")


def jobs(args):
    copies_jobs = [("tensorflow", ["--framework", "tf"], args.tf_python),
                   ("torch", ["--framework", "torch"], args.torch_python)]
    return None, compare_with_torch(args, "tensorflow", args.tf_python, args.tf_paths.split(","),
                                    {"plain_tape"}, copies_jobs, "tf_vs_torch",
                                    {"TF_CPP_MIN_LOG_LEVEL": "2"})


def ops_vs_numpy_function(args):
    """Each path with kolo's ops and through tf.numpy_function, in jobs of their own,
    alternated job by job; the ops' median step over the fallback's, per path."""
    kolorun = standalone_jobs.kolorun(args.np)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    python, me = standalone_jobs.interpreter(args.tf_python), os.path.abspath(sys.argv[0])
    counts = ["--steps", str(args.steps), "--warmup", str(args.warmup), "--model", args.model]
    load = os.getloadavg()
    medians, placements = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        commands = {}
        for path in args.tf_paths.split(","):
            for label, on in (("ops", "1"), ("numpy_function", "0")):
                commands["%s %s" % (path, label)] = ["env", "KOLO_TF_OPS=" + on] + kolorun + [
                    python, me, "--out", out, "alone", "--path", path] + counts
                medians["%s %s" % (path, label)] = []
        for i, name, job in standalone_jobs.alternate(args.jobs, commands, out):
            medians[name].append(job["median_ms"])
            placements.setdefault(name, []).append(job.get("placement", {}).get("placement"))
            print("job %d %-32s %8.2f ms" % (i + 1, name, medians[name][-1]), file=sys.stderr)
    summary = {name: dict(standalone_jobs.spread(m), placements=placements[name])
               for name, m in medians.items()}
    ratios = {path: summary[path + " ops"]["median_ms"] / summary[path + " numpy_function"][
        "median_ms"] for path in args.tf_paths.split(",")}
    for name, ratio in ratios.items():
        print("%-20s ops / numpy_function %.3f" % (name, ratio), file=sys.stderr)
    return None, {"benchmark": "tf_ops_vs_numpy_function", "commit": standalone_jobs.commit(),
                  "model": args.model, "np": args.np, "jobs": args.jobs, "steps": args.steps,
                  "warmup": args.warmup, "load_before": list(load), "paths": summary,
                  "ratios": ratios}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the JSON here as well as to stdout")
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("alone")
    p.add_argument("--path", choices=TF_PATHS + ("keras_fit",), default="tape_eager")
    p.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p = sub.add_parser("copies")
    p.add_argument("--framework", choices=["tf", "torch"], default="tf")
    p.add_argument("--mbytes", type=float, default=100)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5, help="calls per path and round")
    add_compare_arguments(sub.add_parser("jobs"), "tf", TF_PATHS)
    add_compare_arguments(sub.add_parser("ops"), "tf", ("grouped_function", "tape_function",
                                                        "grouped_eager", "tape_eager",
                                                        "keras_fit"))
    args = parser.parse_args()
    hvd, result = {"alone": alone, "copies": copies, "jobs": jobs,
                   "ops": ops_vs_numpy_function}[args.what](args)
    result["settings"] = {k: v for k, v in os.environ.items() if k.startswith(("KOLO_", "MALLOC_"))}
    if hvd is None or hvd.rank() == 0:
        standalone_jobs.write_result(result, args.out)
    if hvd is not None:
        hvd.shutdown()


if __name__ == "__main__":
    main()
