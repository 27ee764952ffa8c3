"""fault_job.py's faults inside an elastic training loop (``hvd.elastic.run``, a commit
per step), for the chaos run on the in-place path (bench/chaos.py --in-place: elastic
kolorun on Open MPI 5, where the survivors of a lost rank shrink and go on).

Environment: FAULT, FAULT_RANK, FAULT_STEP, FAULT_STAMP and FAULT_STEPS as for
fault_job.py; the fault fires once, in the process that was rank FAULT_RANK at the start
(a reset in place renumbers the ranks, and repeats the steps since the last commit,
which are then run without the fault; a restarted job runs without it).

kill / stop: the rank submits the step's gradients, then sends itself SIGKILL / SIGSTOP.
raise: it raises between two steps (uncaught). badinput: it submits a complex64 gradient
under the name the others use, catches the error and carries on. exit: it shuts kolo
down and exits 0. stuck: it sleeps in user code.

Rank 0 prints "ELASTIC-DONE size=<n> step=<s>" when the training ends; a rank that
catches an error from kolo outside run's recovery prints "FAULT-SEEN rank=<r> ..." and
leaves with exit code 3."""
import os
import signal
import sys
import time

import torch

import kolo.torch as hvd

from fault_setup import FAULT as fault, fault_settings, model_and_data, stamp

hvd.init()
first_rank, first_size = hvd.rank(), hvd.size()
fault_rank, fault_step, steps = fault_settings(first_size)
# Once per job: not again in a process that a restart started (generation 1, 2, ...).
fired = [os.environ.get("KOLO_ELASTIC_GENERATION", "0") != "0"]
model, opt, x, y = model_and_data(hvd)


@hvd.elastic.run
def train(state):
    while state.step < steps:
        at_fault = state.step == fault_step and not fired[0]
        if at_fault:
            fired[0] = True  # in every process: the step is not faulty when it is redone
        me = at_fault and first_rank == fault_rank
        if me and fault == "raise":
            stamp()
            raise RuntimeError("a user error on rank %d at step %d" % (first_rank, state.step))
        if me and fault == "exit":
            stamp()
            hvd.shutdown()
            sys.exit(0)
        if me and fault == "stuck":
            stamp()
            time.sleep(3600)
        if me and fault == "badinput":
            stamp()
            try:
                hvd.allreduce(torch.zeros(4, dtype=torch.complex64),
                              name="fault.step.%d" % state.step)
            except Exception:  # refused here; the others must hear of it
                pass
        elif fault == "badinput" and at_fault:
            hvd.allreduce(torch.zeros(4), name="fault.step.%d" % state.step)
        state.optimizer.zero_grad()
        torch.nn.functional.mse_loss(state.model(x), y).backward()
        if me and fault in ("kill", "stop"):
            stamp()
            os.kill(os.getpid(), signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
        state.optimizer.step()
        state.step += 1
        state.commit()


state = hvd.elastic.TorchState(model, opt, step=0)
try:
    train(state)
except Exception as e:  # an error that run did not recover from
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    print("FAULT-SEEN rank=%d at=%.6f error=%s: %s" % (first_rank, time.time(),
                                                       type(e).__name__, first), flush=True)
    os._exit(3)
if hvd.rank() == 0:
    print("ELASTIC-DONE size=%d step=%d" % (hvd.size(), state.step), flush=True)
hvd.shutdown()
