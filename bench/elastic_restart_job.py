"""The job of bench/elastic_restart.py: ResNet-50 (torchvision, untrained) with
SGD + momentum under kolo.torch.elastic, one commit per step: a state of
25.6 M float32 parameters plus as many momentum values (195 MiB).

Environment: ELASTIC_BENCH_DIR (marks), ELASTIC_PAUSE_STEP (generation 0 stops
there, every rank writes reached.<rank> "<pid> <hostname>" and waits for the
file go, which the bench writes once it killed a host), ELASTIC_STEPS (steps in
all; a job below ELASTIC_FULL_SIZE ranks goes on past them until it is back at
that size), ELASTIC_MODEL (resnet50, the default, or small: a 4-layer MLP of
1.1 M parameters). Rank 0 prints, per incarnation, "PHASE gen=G <name>=<unix
time>" for: started (interpreter up), imported (torch, torchvision, kolo), init
(after kolo.init) -- these three only in a new process --, resumed (after run's
load and sync), first_step (after the first step of the incarnation; with
ELASTIC_FULL_SIZE before its commit, which may grow or restart the job), and, with
ELASTIC_FULL_SIZE, commit_began (the start of every commit: where a job that
grew or restarted stopped training). G counts the incarnations whether they
restarted the processes or went on in place; "SIZE gen=G n" gives their sizes.
"""
import os
import socket
import sys
import time

STARTED = time.time()

import torch  # noqa: E402
import torchvision  # noqa: E402

import kolo.torch as hvd  # noqa: E402

IMPORTED = time.time()


def main():
    hvd.init()
    generation = int(os.environ.get("KOLO_ELASTIC_GENERATION", "0"))
    out_dir = os.environ["ELASTIC_BENCH_DIR"]
    pause = int(os.environ.get("ELASTIC_PAUSE_STEP", "3"))
    steps = int(os.environ.get("ELASTIC_STEPS", "6"))
    full_size = int(os.environ.get("ELASTIC_FULL_SIZE", "0"))

    starts = [0]  # train() calls in this process: a reset in place calls it again

    def phase(name, when=None):
        if hvd.rank() == 0:
            incarnation = generation + max(starts[0] - 1, 0)
            print(f"PHASE gen={incarnation} {name}={when or time.time():.3f}", flush=True)

    phase("started", STARTED)
    phase("imported", IMPORTED)
    phase("init")
    torch.set_num_threads(1)
    if os.environ.get("ELASTIC_MODEL", "resnet50") == "small":
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 64 * 64, 64),
                                    torch.nn.ReLU(), torch.nn.Linear(64, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 10))
    else:
        model = torchvision.models.resnet50()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    x = torch.randn(2, 3, 64, 64)  # the smallest input whose last stage has 2x2 per channel

    @hvd.elastic.run
    def train(state):
        starts[0] += 1
        phase("resumed")
        if hvd.rank() == 0:
            print(f"SIZE gen={generation + max(starts[0] - 1, 0)} {hvd.size()}", flush=True)
        first = True
        while state.step < steps or hvd.size() < full_size or (full_size and first):
            state.optimizer.zero_grad()
            state.model(x).sum().backward()
            state.optimizer.step()
            state.step += 1
            if full_size:  # the step before its commit (which may grow or restart the job)
                if first:
                    phase("first_step")
                    first = False
                phase("commit_began")
            state.commit()
            if first:
                phase("first_step")
                first = False
            if generation == 0 and starts[0] == 1 and state.step == pause:
                with open(os.path.join(out_dir, f"reached.{hvd.rank()}"), "w") as f:
                    f.write(f"{os.getpid()} {socket.gethostname()}\n")
                # Until the bench killed a host and says go (restarting, mpirun ends the
                # rest first).
                while not os.path.exists(os.path.join(out_dir, "go")):
                    time.sleep(0.01)

    state = hvd.elastic.TorchState(model, optimizer, step=0)
    train(state)
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())
