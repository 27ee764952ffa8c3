"""kolo.torch's allreduce against torch.distributed with the NCCL backend, on the same
CUDA tensors in the same job (one host), 4 B to 256 MiB, alternating in rounds. Both
timed as a training step sees them: from the call until the result is on the device
(torch.cuda.synchronize). Rank 0 prints a table and writes JSON.

    kolorun -np 1 python bench/gpu_torch_bench.py --json out.json
Run by scripts/gpu_check.sh (step speed); docs/gpu.md. Exits 77 (skipped) without a GPU."""
import argparse
import json
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist

import kolo.torch as kolo


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-bytes", type=int, default=256 << 20)
    parser.add_argument("--seconds", type=float, default=0.5, help="per size and path")
    parser.add_argument("--json")
    args = parser.parse_args()

    kolo.init()
    if not torch.cuda.is_available():
        print("gpu_torch_bench: SKIPPED: no CUDA device on this machine", file=sys.stderr)
        sys.exit(77)
    if not kolo.cuda_built():
        raise SystemExit("gpu_torch_bench: kolo was built without CUDA: build with -DKOLO_WITH_CUDA=ON")
    torch.cuda.set_device(kolo.local_rank() % torch.cuda.device_count())
    port = kolo.broadcast_object(free_port() if kolo.rank() == 0 else None, root_rank=0)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port,
                            rank=kolo.rank(), world_size=kolo.size())

    rows = []
    size = 4
    while size <= args.max_bytes:
        x = torch.ones(size // 4, device="cuda")

        def torch_once():
            dist.all_reduce(x)
            torch.cuda.synchronize()

        def kolo_once():
            kolo.allreduce_(x, op=kolo.Sum, name="gpu_torch_bench")
            torch.cuda.synchronize()

        for f in (torch_once, kolo_once):
            for _ in range(3):
                f()
        t = time.perf_counter()
        torch_once()
        probe = kolo.allreduce(torch.tensor([time.perf_counter() - t]), op=kolo.Max).item()
        n = max(8, min(5000, int(args.seconds / 4 / max(probe, 1e-6))))
        times = {"torch_nccl": [], "kolo": []}
        for _ in range(4):
            for key, f in (("torch_nccl", torch_once), ("kolo", kolo_once)):
                for _ in range(n):
                    t = time.perf_counter()
                    f()
                    times[key].append((time.perf_counter() - t) * 1e6)
        med = {k: statistics.median(v) for k, v in times.items()}
        med = dict(zip(med, kolo.allreduce(torch.tensor(list(med.values()), dtype=torch.float64),
                                           op=kolo.Max).tolist()))
        rows.append({"bytes": size, "torch_nccl_us": med["torch_nccl"], "kolo_us": med["kolo"],
                     "torch_over_kolo": med["torch_nccl"] / med["kolo"]})
        if kolo.rank() == 0:
            print("%11d B  torch.distributed nccl %10.1f us  kolo.torch %10.1f us  (%.3f)" % (
                size, med["torch_nccl"], med["kolo"], med["torch_nccl"] / med["kolo"]), flush=True)
        size *= 4
    if args.json and kolo.rank() == 0:
        with open(args.json, "w") as f:
            json.dump({"benchmark": "gpu_torch", "np": kolo.size(),
                       "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                       "rows": rows}, f, indent=1)
    dist.destroy_process_group()
    kolo.shutdown()


if __name__ == "__main__":
    main()
