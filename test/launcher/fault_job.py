"""A kolo.torch training loop with one fault injected on one rank, for the fault matrix
(test/launcher/test_fault_matrix.py) and the chaos run (bench/chaos.py). Run under kolorun.

Environment:
  FAULT        kill | stop | raise | badinput | exit | stuck | cut | none
  FAULT_RANK   the rank that misbehaves (default: the last)
  FAULT_STEP   the training step at which it does (default 3)
  FAULT_STAMP  a file where that rank writes the wall-clock time of the fault

kill / stop: the rank submits the step's gradients (the collective is in flight on
every other rank), then sends itself SIGKILL / SIGSTOP. raise: it raises between two
steps (uncaught). badinput: it submits a complex64 gradient under the name the others
use (an input kolo refuses on the calling thread), catches the error and carries on.
exit: it shuts kolo down and exits 0 between steps. stuck: it sleeps in user code. cut:
it runs FAULT_CUT_CMD (the test's command that takes its host's link down), then goes on.

Every rank that catches an error from kolo prints one line
    FAULT-SEEN rank=<r> at=<unix time> error=<type>: <message, first line>
and leaves with exit code 3; a rank that finishes every step prints FAULT-NONE."""
import os
import shlex
import signal
import subprocess
import sys
import time

import torch

import kolo.torch as hvd

from fault_setup import FAULT as fault, fault_settings, model_and_data, stamp

hvd.init()
rank, size = hvd.rank(), hvd.size()
fault_rank, fault_step, steps = fault_settings(size)
model, opt, x, y = model_and_data(hvd)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)

try:
    for step in range(steps):
        me = rank == fault_rank and step == fault_step
        if me and fault == "raise":
            stamp()
            raise RuntimeError("a user error on rank %d at step %d" % (rank, step))
        if me and fault == "exit":
            stamp()
            hvd.shutdown()
            sys.exit(0)
        if me and fault == "cut":
            stamp()
            subprocess.run(shlex.split(os.environ["FAULT_CUT_CMD"]), check=True)
        if me and fault == "stuck":
            stamp()
            time.sleep(3600)
        if me and fault == "badinput":
            stamp()
            try:
                hvd.allreduce(torch.zeros(4, dtype=torch.complex64), name="fault.step.%d" % step)
            except Exception:  # refused here; the others must hear of it
                pass
        elif fault == "badinput" and step == fault_step:
            hvd.allreduce(torch.zeros(4), name="fault.step.%d" % step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()  # hooks submit the gradients
        if me and fault in ("kill", "stop"):
            stamp()
            os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        opt.step()
except Exception as e:  # an error from kolo (or the injected one, re-raised below)
    if rank == fault_rank and fault == "raise" and "a user error" in str(e):
        raise
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    print("FAULT-SEEN rank=%d at=%.6f error=%s: %s" % (rank, time.time(), type(e).__name__, first),
          flush=True)
    os._exit(3)
print("FAULT-NONE rank=%d" % rank, flush=True)
hvd.shutdown()
