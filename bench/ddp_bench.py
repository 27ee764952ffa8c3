"""DDP's step time with the torch.distributed backend "kolo" against backend "gloo" (issue
19's goal: kolo >= 4 x faster) and against kolo.torch's DistributedOptimizer on the same
model (goal: DDP on kolo <= 1.1 x DistributedOptimizer), each in kolorun jobs of its own.

    # one path in a job of its own; rank 0 prints one JSON object
    kolorun -np 2 .venv/bin/python bench/ddp_bench.py alone --path ddp_kolo [--model resnet50]
    # the comparison: every path in jobs of its own, JOBS rounds, paths alternated job by job
    .venv/bin/python bench/ddp_bench.py jobs [--jobs 5] [--models resnet50,bert_base]
                                             [--out bench/results/ddp.json]
    # a change's before and after: "<path>:base" runs the build in $BASE_BUILD
    BASE_BUILD=../wt-base/build .venv/bin/python bench/ddp_bench.py jobs --models resnet50 \
        --paths ddp_kolo,ddp_kolo:base,ddp_gloo

The model is a gradient set (bench/tf_bench.py's ResNet-50 shapes, 161 tensors, 97.5 MiB;
BERT-base's, 199 tensors, 417.7 MiB; or "small", 100 x 2 KiB): one parameter per shape and
a loss whose gradient is ones, so a step is the gradients' bookkeeping plus the allreduce,
with no model compute. A step, the same on every path: zero_grad(set_to_none=True), the
loss, backward(), SGD's step (lr 0). Paths:
  ddp_kolo        DistributedDataParallel, init_process_group(backend="kolo"), defaults
                  (25 MB buckets, the first 1 MB; DDP divides by the world size itself)
  ddp_gloo        the same with backend="gloo"
  kolo_optimizer  kolo.torch.DistributedOptimizer (op Average), no DDP, no process group
  ddp_kolo_views, ddp_gloo_views
                  DDP with gradient_as_bucket_view=True (the gradients are views of the
                  buckets: no copies in and out); not in `jobs` unless asked (--paths)
  ddp_floor       DDP (on gloo) with a comm hook that communicates nothing: DDP's own
                  cost (bucket copies, autograd hooks), the floor of any backend
As in tf_bench.py, a step's time is the slowest rank's, a job reports its median step, and
`jobs` reports the median over jobs, the spread (slowest job / fastest) and the ratios.
"""
import argparse
import json
import os
import sys
import tempfile

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standalone_jobs  # noqa: E402
from model_shapes import bert_base_shapes  # noqa: E402
from tf_bench import resnet50_shapes, small_shapes, time_steps  # noqa: E402

PATHS = ("ddp_kolo", "ddp_gloo", "kolo_optimizer", "ddp_kolo_views", "ddp_gloo_views",
         "ddp_floor")


MODELS = {"resnet50": resnet50_shapes, "bert_base": bert_base_shapes, "small": small_shapes}


class GradientModel(torch.nn.Module):
    """One parameter per shape; forward() is a loss whose gradient is ones everywhere."""

    def __init__(self, shapes):
        super().__init__()
        self.weights = torch.nn.ParameterList(torch.nn.Parameter(torch.zeros(s))
                                              for s in shapes)

    def forward(self):
        return sum(w.sum() for w in self.weights)


def _no_communication(state, bucket):
    fut = torch.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def alone(args):
    import kolo.torch as kt
    torch.set_num_threads(1)
    kt.init()  # its barrier and allgather_object time the steps on every path
    model = GradientModel(MODELS[args.model]())
    if args.path == "kolo_optimizer":
        opt = kt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                      named_parameters=model.named_parameters())
        net = model
    else:
        import torch.distributed as dist
        if args.path.startswith("ddp_kolo"):
            import kolo.torch.c10d  # noqa: F401
        dist.init_process_group(backend="gloo" if args.path == "ddp_floor"
                                else args.path.split("_")[1])
        net = torch.nn.parallel.DistributedDataParallel(
            model, gradient_as_bucket_view=args.path.endswith("_views"))
        if args.path == "ddp_floor":
            net.register_comm_hook(None, _no_communication)
        opt = torch.optim.SGD(net.parameters(), lr=0.0)

    def step():
        opt.zero_grad(set_to_none=True)
        net().backward()
        opt.step()

    numel = sum(p.numel() for p in model.parameters())
    result = time_steps(step, kt, "torch", args, {"tensors": len(model.weights),
                                                  "bytes": numel * 4,
                                                  "torch": torch.__version__})
    if args.path != "kolo_optimizer":
        import torch.distributed as dist
        dist.destroy_process_group()
    return result


def goal_ratios(summary):
    """Issue 19's two ratios of median step times, and the same against DDP's floor: the
    time each backend adds to a DDP step that communicates nothing (path - ddp_floor),
    which is the part a backend can change."""
    ms = {p: s["median_ms"] for p, s in summary.items()}
    ratios = {}
    if "ddp_kolo" in ms and "ddp_gloo" in ms:
        ratios["ddp_gloo / ddp_kolo (goal >= 4)"] = ms["ddp_gloo"] / ms["ddp_kolo"]
        if "ddp_floor" in ms and ms["ddp_kolo"] > ms["ddp_floor"]:
            ratios["(ddp_gloo - ddp_floor) / (ddp_kolo - ddp_floor)"] = (
                (ms["ddp_gloo"] - ms["ddp_floor"]) / (ms["ddp_kolo"] - ms["ddp_floor"]))
    if "kolo_optimizer" in ms:
        for path in ("ddp_kolo", "ddp_kolo_views"):
            if path in ms:
                ratios["%s / kolo_optimizer (goal <= 1.1)" % path] = (
                    ms[path] / ms["kolo_optimizer"])
    return ratios


def jobs(args):
    kolorun = standalone_jobs.kolorun(args.np)
    python = standalone_jobs.interpreter(args.python)
    load = os.getloadavg()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        for model in args.models.split(","):
            commands = {}
            for p in args.paths.split(","):
                path, _, which = p.partition(":")  # "ddp_kolo:base": the build in $BASE_BUILD
                run = standalone_jobs.base_kolorun(args.np) if which == "base" else kolorun
                commands[p] = run + [python, os.path.abspath(__file__), "--out", out, "alone",
                                     "--path", path, "--model", model, "--steps",
                                     str(args.steps), "--warmup", str(args.warmup)]
            medians = {p: [] for p in commands}
            placements = {p: [] for p in commands}
            for i, path, job in standalone_jobs.alternate(args.jobs, commands, out):
                medians[path].append(job["median_ms"])
                placements[path].append(job.get("placement", {}).get("placement", "unknown"))
                print("%s job %d %-16s %9.2f ms" % (model, i + 1, path, medians[path][-1]),
                      file=sys.stderr)
            summary = {p: standalone_jobs.spread(m) for p, m in medians.items()}
            ratios = goal_ratios(summary)
            rows[model] = {"paths": summary, "ratios": ratios, "placements": placements}
            for name, ratio in ratios.items():
                print("%s: %-42s %.2f" % (model, name, ratio), file=sys.stderr)
    return {"benchmark": "ddp", "commit": standalone_jobs.commit(), "np": args.np,
            "jobs": args.jobs, "steps": args.steps, "warmup": args.warmup,
            "load_before": list(load), "models": rows}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the JSON here as well as to stdout")
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("alone")
    p.add_argument("--path", choices=PATHS, default="ddp_kolo")
    p.add_argument("--model", default="resnet50", choices=sorted(MODELS))
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p = sub.add_parser("jobs")
    p.add_argument("--models", default="resnet50,bert_base")
    p.add_argument("--paths", default=",".join(PATHS[:3]))
    p.add_argument("--jobs", type=int, default=5)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--python", default=".venv/bin/python")
    args = parser.parse_args()
    result = alone(args) if args.what == "alone" else jobs(args)
    text = json.dumps(result)
    if args.out and (args.what == "jobs" or int(os.environ.get("RANK", "0")) == 0):
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.what == "jobs" or int(os.environ.get("RANK", "0")) == 0:
        print(text)


if __name__ == "__main__":
    main()
