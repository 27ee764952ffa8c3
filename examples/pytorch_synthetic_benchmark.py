"""Images per second of a torchvision model on synthetic data, trained data-parallel with
kolo (Horovod's synthetic benchmark, same flags).

    kolorun -np 2 /usr/bin/python3 examples/pytorch_synthetic_benchmark.py --model resnet50
    ... --no-allreduce    the same training without kolo's allreduce (the overhead's baseline)

On CUDA tensors where a GPU is present (each rank on GPU local_rank) unless --no-cuda.
"""
import argparse
import json
import timeit

import torch
import torchvision.models

import kolo.torch as kolo


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50", help="a torchvision.models name")
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--num-warmup-batches", type=int, default=10)
    parser.add_argument("--num-batches-per-iter", type=int, default=10)
    parser.add_argument("--num-iters", type=int, default=10)
    parser.add_argument("--fp16-allreduce", action="store_true")
    parser.add_argument("--no-allreduce", action="store_true",
                        help="train without averaging gradients (baseline for the overhead)")
    parser.add_argument("--no-cuda", action="store_true", help="train on the CPU even with a GPU")
    parser.add_argument("--threads", type=int, default=0, help="torch threads per rank (0: leave)")
    parser.add_argument("--json", help="rank 0 writes the result here as JSON")
    args = parser.parse_args()

    kolo.init()
    cuda = not args.no_cuda and torch.cuda.is_available()
    device = torch.device("cuda", kolo.local_rank() % torch.cuda.device_count()) if cuda else \
        torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    if not hasattr(torchvision.models, args.model):
        raise SystemExit("unknown model '%s'; see torchvision.models" % args.model)
    model = getattr(torchvision.models, args.model)().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * kolo.size())
    if not args.no_allreduce:
        compression = kolo.Compression.fp16 if args.fp16_allreduce else kolo.Compression.none
        optimizer = kolo.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                              compression=compression)
    kolo.broadcast_parameters(model.state_dict(), root_rank=0)
    kolo.broadcast_optimizer_state(optimizer, root_rank=0)

    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    target = torch.randint(0, 1000, (args.batch_size,), device=device)

    def benchmark_step():
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(data), target).backward()
        optimizer.step()
        if cuda:  # the step's GPU work inside the time, not after it
            torch.cuda.synchronize()

    def log(text):
        if kolo.rank() == 0:
            print(text, flush=True)

    log("Model: %s, batch size %d per rank, ranks: %d, device: %s, allreduce: %s" % (
        args.model, args.batch_size, kolo.size(), device.type,
        "off" if args.no_allreduce else ("fp16" if args.fp16_allreduce else "on")))
    timeit.timeit(benchmark_step, number=args.num_warmup_batches)
    rates = []
    for i in range(args.num_iters):
        t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
        rate = args.batch_size * args.num_batches_per_iter / t
        log("Iter #%d: %.1f img/sec per rank" % (i, rate))
        rates.append(rate)
    mean = sum(rates) / len(rates)
    spread = 1.96 * (sum((r - mean) ** 2 for r in rates) / max(len(rates) - 1, 1)) ** 0.5
    log("Img/sec per rank: %.1f +-%.1f" % (mean, spread))
    log("Total img/sec on %d rank(s): %.1f +-%.1f" % (kolo.size(), kolo.size() * mean,
                                                    kolo.size() * spread))
    if args.json and kolo.rank() == 0:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "synthetic_training", "model": args.model, "np": kolo.size(),
                       "batch_size": args.batch_size, "image_size": args.image_size,
                       "device": torch.cuda.get_device_name() if cuda else "cpu",
                       "allreduce": not args.no_allreduce, "img_per_sec_per_rank": mean,
                       "ci95": spread, "iterations": rates}, f, indent=1)
    kolo.shutdown()


if __name__ == "__main__":
    main()
