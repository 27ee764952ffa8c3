"""What fault_job.py and fault_job_elastic.py share: the fault's settings, the stamp of its
time, and the small model both train (their docstrings say what each fault does)."""
import os
import time

import torch

FAULT = os.environ.get("FAULT", "none")


def fault_settings(size):
    """(fault rank, fault step, steps) from FAULT_RANK (default: the last of ``size``),
    FAULT_STEP (3) and FAULT_STEPS (10)."""
    return (int(os.environ.get("FAULT_RANK", size - 1)), int(os.environ.get("FAULT_STEP", 3)),
            int(os.environ.get("FAULT_STEPS", 10)))


def stamp():
    """Writes the fault's wall-clock time to FAULT_STAMP."""
    with open(os.environ["FAULT_STAMP"], "w") as f:
        f.write("%.6f\n" % time.time())


def model_and_data(hvd):
    """A seeded two-layer model, its DistributedOptimizer, and one batch (x, y)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 8))
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                   named_parameters=model.named_parameters())
    return model, opt, torch.randn(32, 64), torch.randn(32, 8)
