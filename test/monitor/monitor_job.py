"""A small kolo.torch training job for the monitor's tests (test_monitor.py).

Trains until the test says stop (the file DIR/stall, seen by rank 0 and broadcast, so that
every rank leaves the loop at the same step); rank SLOW_RANK takes longer for each step.
Then rank STALL_RANK calls one more unnamed allreduce (stall_here below) that the other
ranks call only once the test has seen it stalled and created DIR/finish.
"""
import os
import sys
import time

import torch

import kolo.torch as hvd

WORK = sys.argv[1]
SLOW_RANK = int(os.environ.get("SLOW_RANK", "-1"))
SLOW_SECONDS = float(os.environ.get("SLOW_SECONDS", "0.05"))
STALL_RANK = int(os.environ.get("STALL_RANK", "-1"))


def wait_for(name):
    # The test's message: a file it creates (polled; the test bounds the wait).
    while not os.path.exists(os.path.join(WORK, name)):
        time.sleep(0.05)


def stall_here():
    return hvd.allreduce(torch.ones(1))


hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
x, y = torch.randn(32, 16), torch.randn(32, 1)
stop = torch.zeros(1)
while True:
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    if hvd.rank() == SLOW_RANK:
        time.sleep(SLOW_SECONDS)
    optimizer.step()
    stop[0] = 1.0 if hvd.rank() == 0 and os.path.exists(os.path.join(WORK, "stall")) else 0.0
    if hvd.broadcast(stop, root_rank=0, name="stop").item() > 0:
        break
if hvd.rank() != STALL_RANK:
    wait_for("finish")
stall_here()
print("rank", hvd.rank(), "done", flush=True)
