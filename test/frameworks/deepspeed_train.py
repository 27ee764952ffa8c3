"""A DeepSpeed script as GPT-NeoX-style jobs start it, on the CPU (nothing of kolo in it):
deepspeed.init_distributed() takes the ranks from the environment the launcher gave, then
a few ZeRO stage-1 training steps (optimizer state partitioned over the ranks) with
torch.optim.Adam passed in, on this rank's shard of a global batch.

Prints one line per rank, "DEEPSPEED {json}", with the environment, the ranks that
deepspeed.comm reports, an all_reduce of the ranks, and the parameters after training
(test_frameworks.py checks them). Run by itself with RANK=0, WORLD_SIZE=1 it is the
one-process reference on the whole batch.
"""
import json
import os
import socket

import torch

import deepspeed
import deepspeed.comm as dist

GLOBAL_BATCH, STEPS = 24, 3


def main():
    # On the CPU DeepSpeed picks gloo by itself unless oneCCL's bindings are installed; say it.
    deepspeed.init_distributed(dist_backend="gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    ranks = torch.tensor([float(rank)])
    dist.all_reduce(ranks)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    per_rank = GLOBAL_BATCH // size
    config = {"train_batch_size": GLOBAL_BATCH, "train_micro_batch_size_per_gpu": per_rank,
              "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 1}}
    engine, _, _, _ = deepspeed.initialize(
        model=model, optimizer=torch.optim.Adam(model.parameters(), lr=0.01), config=config)
    data = torch.Generator().manual_seed(1234)
    for _ in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 5, generator=data)
        y = torch.randn(GLOBAL_BATCH, 3, generator=data)
        shard = slice(rank * per_rank, (rank + 1) * per_rank)
        loss = torch.nn.functional.mse_loss(engine(x[shard]), y[shard])
        engine.backward(loss)
        engine.step()
    env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                          "MASTER_PORT")}
    params = torch.cat([p.detach().flatten() for p in engine.module.parameters()]).tolist()
    # ZeRO-1: this rank's optimizer holds its slice of the parameters and of Adam's state.
    partition = sum(p.numel() for p in getattr(engine.optimizer,
                                               "single_partition_of_fp32_groups", []))
    print("DEEPSPEED " + json.dumps({
        "env": env, "rank": rank, "size": size, "local_rank": dist.get_local_rank(),
        "backend": torch.distributed.get_backend(), "rank_sum": ranks.item(),
        "host": socket.gethostname(),
        "zero_stage": engine.zero_optimization_stage(),
        "optimizer": type(engine.optimizer).__name__, "partition": partition,
        "params": params}), flush=True)


if __name__ == "__main__":
    main()
