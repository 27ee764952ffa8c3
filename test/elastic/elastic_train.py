"""An elastic training job whose result can be checked exactly: the jobs of
test_elastic_jobs.py run it under kolorun's elastic mode and compare its final
parameters with reference.py's replay.

A linear model in float64 trained by SGD with momentum through
DistributedOptimizer on integer data, with a learning rate and momentum that
are powers of two: every gradient is an integer sum, its average over 2 or 4
ranks is exact, and so is every update. The parameters therefore depend only
on which samples each step saw and at which size, not on the order of any sum:
a sample repeated or skipped after a restart, a lost commit or a half-loaded
one changes them.

Environment (set by the test):
  ELASTIC_TEST_DIR    where the job leaves its marks
  ELASTIC_PAUSE_STEP  in generation 0, every rank stops after this global step,
                      writes reached.0.<rank> ("<pid> <hostname> <job id>", the job id
                      being kolorun's KOLO_ELASTIC_JOB, which names its commit stores) and waits
                      for the file go.0 (a kill test never writes it)
  ELASTIC_GO_RANKS    (optional) ranks that go on at the pause step without go.0:
                      each writes entering.0.<rank> before its next step's backward
                      pass (whose allreduce waits for the paused ranks)
  ELASTIC_HOLD_STEP   (optional, with ELASTIC_FULL_SIZE) a commit step at which a job
                      smaller than ELASTIC_FULL_SIZE commits again and again until new
                      processes have joined it in place (kolorun offers the free slots
                      at every commit), or the file hold.done exists: the step at which
                      it grows is known
  ELASTIC_NEW_PROCESS_FAILS  (optional) a process started to grow the job in place
                      exits with code 3 before hvd.init()
  ELASTIC_NEW_PROCESS_DIES_JOINING  (optional) a process started to grow the job in
                      place writes new.<pid> before hvd.init(); once the new processes
                      initialized MPI (they wait in hvd.init() to join), rank 0's commit
                      writes "spawned" and waits for the file "killed" before it joins
                      them: the test kills them there
  ELASTIC_NEW_PROCESS_WAITS  (optional) a process started to grow the job in place
                      waits before hvd.init() for the file "trained", which rank 0 writes
                      when its training function ends: the training ends while the new
                      processes are being started
Rank 0 prints "START gen=G size=S step=N pid=P" after each (re)start and
"FINAL size=S step=N params=<float.hex ...>" at the end.
"""
import os
import socket
import sys
import time

import torch

import kolo.torch as hvd
from kolo.common import basics

from elastic_setup import (BATCH, COMMIT_EVERY, EPOCHS, FEATURES, LR, MOMENTUM, SAMPLES, SEED,
                           features)


def wait_for(path):
    """The test's go-ahead: a file it writes once what it waits for has happened."""
    while not os.path.exists(path):
        time.sleep(0.05)


def hold_done(test_dir):
    """Whether the file hold.done exists, as rank 0 sees it: every rank leaves the hold
    loop at the same commit."""
    return hvd.broadcast_object(os.path.exists(os.path.join(test_dir, "hold.done")),
                                root_rank=0, name="hold.done")


def hold_the_join_for_the_test(test_dir):
    """Rank 0, the first time its commit finds the new processes ready (they initialized
    MPI and wait in hvd.init() to join): writes "spawned" and waits for the file "killed"
    (the test kills them there) before the join."""
    ready = basics.replacements

    def held():
        status = ready()
        if status == "ready" and not os.path.exists(os.path.join(test_dir, "spawned")):
            open(os.path.join(test_dir, "spawned"), "w").close()
            wait_for(os.path.join(test_dir, "killed"))
        return status
    basics.replacements = held


def main():
    if os.environ.get("KOLO_ELASTIC_REPLACEMENT") == "1" and \
            os.environ.get("ELASTIC_NEW_PROCESS_FAILS"):
        os._exit(3)
    dies_joining = bool(os.environ.get("ELASTIC_NEW_PROCESS_DIES_JOINING"))
    if os.environ.get("KOLO_ELASTIC_REPLACEMENT") == "1" and dies_joining:
        with open(os.path.join(os.environ["ELASTIC_TEST_DIR"], f"new.{os.getpid()}"), "w") as f:
            f.write("\n")
    waits = bool(os.environ.get("ELASTIC_NEW_PROCESS_WAITS"))
    if os.environ.get("KOLO_ELASTIC_REPLACEMENT") == "1" and waits:
        wait_for(os.path.join(os.environ["ELASTIC_TEST_DIR"], "trained"))
    hvd.init()
    if dies_joining:
        hold_the_join_for_the_test(os.environ["ELASTIC_TEST_DIR"])
    torch.manual_seed(0)
    data = torch.tensor([features(i) for i in range(SAMPLES)], dtype=torch.float64)
    dataset = torch.utils.data.TensorDataset(data)
    model = torch.nn.Linear(FEATURES, 1, dtype=torch.float64)
    torch.nn.init.zeros_(model.weight)
    torch.nn.init.zeros_(model.bias)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(dataset, shuffle=True, seed=SEED)
    test_dir = os.environ["ELASTIC_TEST_DIR"]
    generation = int(os.environ.get("KOLO_ELASTIC_GENERATION", "0"))
    pause_step = int(os.environ.get("ELASTIC_PAUSE_STEP", "-1"))
    go_ranks = {int(r) for r in os.environ.get("ELASTIC_GO_RANKS", "").split(",") if r}
    first_rank = hvd.rank()  # in generation 0 (a reset in place renumbers the ranks)
    hold_step = int(os.environ.get("ELASTIC_HOLD_STEP", "-1"))
    full_size = int(os.environ.get("ELASTIC_FULL_SIZE", "0"))

    @hvd.elastic.run
    def train(state):
        if hvd.rank() == 0:
            print(f"START gen={generation} size={hvd.size()} step={state.step} pid={os.getpid()}",
                  flush=True)
        while state.epoch < EPOCHS:
            loader = torch.utils.data.DataLoader(dataset, batch_size=BATCH,
                                                 sampler=state.train_sampler)
            for idx, (x,) in enumerate(loader):
                state.optimizer.zero_grad()
                if generation == 0 and state.step == pause_step and first_rank in go_ranks:
                    mark = os.path.join(test_dir, f"entering.0.{first_rank}")
                    with open(mark, "w") as f:
                        f.write("\n")
                state.model(x).sum().backward()
                state.optimizer.step()
                state.train_sampler.record_batch(idx, BATCH)
                state.step += 1
                if generation == 0 and state.step == pause_step:
                    with open(os.path.join(test_dir, f"reached.0.{hvd.rank()}"), "w") as f:
                        f.write(f"{os.getpid()} {socket.gethostname()} "
                                f"{os.environ['KOLO_ELASTIC_JOB']}\n")
                    if first_rank not in go_ranks:
                        wait_for(os.path.join(test_dir, "go.0"))
                if state.step % COMMIT_EVERY == 0:
                    state.commit()
                while state.step == hold_step and hvd.size() < full_size and \
                        not hold_done(test_dir):
                    time.sleep(0.05)
                    state.commit()  # raises, on every rank, once new processes are ready
            state.epoch += 1
            state.train_sampler.set_epoch(state.epoch)
            state.commit()
        if waits and hvd.rank() == 0:
            with open(os.path.join(test_dir, "trained"), "w") as f:
                f.write("\n")

    state = hvd.elastic.TorchState(model, optimizer, train_sampler=sampler, epoch=0, step=0)
    train(state)
    if hvd.rank() == 0:
        params = [v.hex() for p in model.parameters() for v in p.detach().flatten().tolist()]
        print(f"FINAL size={hvd.size()} step={state.step} params={' '.join(params)}", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
