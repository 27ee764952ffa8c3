"""A synthetic ResNet-50 training step three ways in one job: with kolo's
DistributedOptimizer, with torch's DistributedDataParallel (NCCL), and without any
distribution, each its own copy of the model on the same data, alternating in rounds
so that the GPU's clocks and the machine's load fall alike on all three. Rank 0
prints images per second (per rank) with their ratios and writes JSON.

    kolorun -np 1 python bench/gpu_resnet_bench.py --json out.json
    kolorun -np 2 python bench/gpu_resnet_bench.py --device cpu --model resnet18 \\
        --image-size 32 --batch-size 4        (the same logic on the CPU, gloo for DDP)

Run by scripts/gpu_check.sh (step resnet); docs/gpu.md. On CUDA it exits 77 (skipped)
without a GPU."""
import argparse
import json
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torchvision.models

import kolo.torch as kolo

WAYS = ("kolo", "ddp", "none")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_step(way, args, device, data, target):
    """One training step of a fresh model (the same seed for each way) set up `way`."""
    torch.manual_seed(42)
    model = getattr(torchvision.models, args.model)().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * kolo.size(), momentum=0.9)
    if way == "kolo":
        optimizer = kolo.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
        kolo.broadcast_parameters(model.state_dict(), root_rank=0)
    elif way == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None)

    def step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(data), target).backward()
        optimizer.step()
        if device.type == "cuda":  # the step's GPU work inside the time
            torch.cuda.synchronize()
    return step


def summarize(rates):
    """Median images per second of each way over the rounds (slowest rank's), with
    the range and each way's ratio to DDP's and to no distribution's median."""
    med = {w: statistics.median(r) for w, r in rates.items()}
    out = {w: {"img_per_sec": med[w], "min": min(r), "max": max(r), "rounds": r}
           for w, r in rates.items()}
    out["kolo_over_ddp"] = med["kolo"] / med["ddp"]
    out["kolo_over_none"] = med["kolo"] / med["none"]
    out["ddp_over_none"] = med["ddp"] / med["none"]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="a torchvision.models name")
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per way and round")
    parser.add_argument("--warmup", type=int, default=5, help="steps per way before the rounds")
    parser.add_argument("--json")
    args = parser.parse_args()

    kolo.init()
    if args.device == "cuda":
        if not torch.cuda.is_available():
            print("gpu_resnet_bench: SKIPPED: no CUDA device on this machine", file=sys.stderr)
            sys.exit(77)
        if not kolo.cuda_built():
            raise SystemExit("gpu_resnet_bench: kolo was built without CUDA: build with "
                             "-DKOLO_WITH_CUDA=ON")
        device = torch.device("cuda", kolo.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    port = kolo.broadcast_object(free_port() if kolo.rank() == 0 else None, root_rank=0)
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo",
                            init_method="tcp://127.0.0.1:%d" % port, rank=kolo.rank(),
                            world_size=kolo.size())

    torch.manual_seed(kolo.rank())
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)
    steps = {w: make_step(w, args, device, data, target) for w in WAYS}
    for w in WAYS:
        for _ in range(args.warmup):
            steps[w]()
    rates = {w: [] for w in WAYS}
    for r in range(args.rounds):
        for w in (WAYS if r % 2 == 0 else tuple(reversed(WAYS))):
            t = time.perf_counter()
            for _ in range(args.steps):
                steps[w]()
            mine = args.batch_size * args.steps / (time.perf_counter() - t)
            # The slowest rank's rate is the job's.
            rates[w].append(kolo.allreduce(torch.tensor([mine], dtype=torch.float64),
                                           op=kolo.Min, name="resnet_bench.rate").item())
    result = summarize(rates)
    if kolo.rank() == 0:
        for w in WAYS:
            print("%-5s %8.1f img/s per rank (%.1f-%.1f over %d rounds)" % (
                w, result[w]["img_per_sec"], result[w]["min"], result[w]["max"], args.rounds))
        print("kolo / DDP %.3f, kolo / none %.3f, DDP / none %.3f" % (
            result["kolo_over_ddp"], result["kolo_over_none"], result["ddp_over_none"]),
            flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"benchmark": "gpu_resnet", "model": args.model, "np": kolo.size(),
                           "batch_size": args.batch_size, "image_size": args.image_size,
                           "device": torch.cuda.get_device_name() if device.type == "cuda"
                           else "cpu", "torch": torch.__version__, **result}, f, indent=1)
    dist.destroy_process_group()
    kolo.shutdown()


if __name__ == "__main__":
    main()
