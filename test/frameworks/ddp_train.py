"""A plain torch.distributed DDP script, as people run them with torchrun (nothing of
kolo in it): the process group from the environment (init_method="env://"), each rank
trains on its shard of a global batch, DistributedDataParallel averages the gradients.

Prints one line per rank, "DDP {json}", with what it read from the environment, what
torch.distributed says, an allgather of every rank's host name, and the parameters after
training (test_frameworks.py checks them). Run by itself with RANK=0, WORLD_SIZE=1 it is
the one-process reference on the whole batch.
"""
import json
import os
import socket

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

GLOBAL_BATCH, STEPS = 24, 4


def main():
    dist.init_process_group("gloo", init_method="env://")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)  # the same start everywhere (DDP also broadcasts rank 0's)
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(), torch.nn.Linear(7, 3))
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    data = torch.Generator().manual_seed(1234)
    per_rank = GLOBAL_BATCH // size
    for _ in range(STEPS):
        x = torch.randn(GLOBAL_BATCH, 5, generator=data)
        y = torch.randn(GLOBAL_BATCH, 3, generator=data)
        shard = slice(rank * per_rank, (rank + 1) * per_rank)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x[shard]), y[shard]).backward()
        opt.step()
    hosts = [None] * size
    dist.all_gather_object(hosts, socket.gethostname())
    env = {k: os.environ.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                          "NODE_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT")}
    params = torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
    print("DDP " + json.dumps({"env": env, "rank": rank, "size": size, "hosts": hosts,
                               "host": socket.gethostname(), "torch": torch.__version__,
                               "params": params}), flush=True)
    # torch 1.13's gloo teardown hangs now and then in destroy_process_group(), also
    # without kolorun and after a barrier (pytorch/pytorch#75097; 2 of 5 runs of 4 plain
    # processes here); exiting without it is clean there.
    if int(torch.__version__.split(".")[0]) >= 2:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
