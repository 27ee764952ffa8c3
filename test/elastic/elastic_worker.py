"""An elastic training job for fake_driver_check.py: a float64 model trained on data that
depends on the step only (so every size computes the same averages, exactly), committed
after every step. Prints "rank R final <weights as hex>" when training ends.

--die-in-commit K: rank 1 is SIGKILLed in the middle of copying commit K.
--fail-at-step S: every rank raises HorovodInternalError at step S."""
import argparse
import os
import signal

import torch

import kolo.torch as hvd
from kolo.torch.elastic.state import TorchCodec

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--die-in-commit", type=int)
parser.add_argument("--fail-at-step", type=int)
args = parser.parse_args()

hvd.init()
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Linear(4, 2).double()
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9),
                                     named_parameters=model.named_parameters())
state = hvd.elastic.TorchState(model, optimizer, step=0)

if args.die_in_commit is not None and hvd.rank() == 1:
    real_leaf = TorchCodec.leaf

    def dying_leaf(self, obj):
        found = real_leaf(self, obj)
        if found is None or state._commit + 1 != args.die_in_commit or found[2] < 64:
            return found
        tag, shape, nbytes, write = found

        def half_then_die(dst):
            write(dst[:nbytes // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return tag, shape, nbytes, half_then_die
    TorchCodec.leaf = dying_leaf


@hvd.elastic.run
def train(state):
    while state.step < args.steps:
        if state.step == args.fail_at_step:
            raise hvd.HorovodInternalError("step %d failed on purpose" % state.step)
        x = torch.arange(8, dtype=torch.float64).reshape(2, 4) * (state.step % 5 + 1) / 10
        optimizer.zero_grad()
        model(x).pow(2).sum().backward()
        optimizer.step()
        state.step += 1
        state.commit()


train(state)
weights = [v.hex() for p in model.parameters() for v in p.detach().reshape(-1).tolist()]
print("rank %d final %s" % (hvd.rank(), " ".join(weights)), flush=True)
