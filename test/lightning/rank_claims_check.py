"""A Lightning job on two hosts started by hand (no kolorun, no torchrun) with its rank
variables set wrong, as in the field report: NODE_RANK=0 on both hosts, so both processes
compute GLOBAL_RANK 0.

- Lightning's DDP on kolo's torch.distributed backend (``process_group_backend="kolo"``):
  both processes start torch.distributed's store (the second host has a network namespace
  of its own, as a second machine has) and meet in the first one's; kolo's backend must
  fail both within seconds, naming both hosts and their NODE_RANK and LOCAL_RANK, instead
  of waiting for the missing rank until the init timeout.
- ``strategy="kolo"`` takes its ranks from kolo, which only kolorun (MPI) gives: started by
  hand with WORLD_SIZE=2, kolo's init() must refuse on both hosts rather than train two
  separate copies.

A pytest file run directly, not under kolorun; PYTHONPATH has the built package. As root
(the network namespace). ``rank_claims_check.py ddp|kolo`` is one process of the job.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import hosts  # noqa: E402

# After the later process reached kolo, both must have failed within:
WITHIN = 10.0
# Importing Lightning in two processes on a loaded machine, and failing.
SECONDS = 120
INIT_TIMEOUT = 60  # what the processes would otherwise wait for
DUPLICATE = (
    "RuntimeError: kolo: rank 0 of this torch.distributed job is claimed by two processes: "
    "pid {0} on host {1} (NODE_RANK=0, LOCAL_RANK=0, WORLD_SIZE=2) and pid {2} on host {3} "
    "(NODE_RANK=0, LOCAL_RANK=0, WORLD_SIZE=2); every process needs a rank of its own, 0 to 1: "
    "check how the rank variables are set on each host (torchrun --node_rank, NODE_RANK, "
    "RANK)")
SEPARATE_COPIES = (
    "RuntimeError: kolo: WORLD_SIZE=2 says this process is one of 2, but no MPI launcher "
    "started it (neither kolorun nor mpirun), so kolo would run it alone and the 2 processes "
    "would train 2 separate copies of the model; start them with kolorun (kolorun -np 2 "
    "python script.py), or, with PyTorch, join them with "
    "dist.init_process_group(backend=\"kolo\") instead of kolo's init()")


def worker(strategy):
    """One process of a two-node Lightning job, one device per node."""
    import datetime
    hosts.say_who()
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    import kolo.lightning  # noqa: F401  (strategy "kolo")
    import kolo.torch.c10d  # noqa: F401  (backend "kolo")

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    hosts.say_calling("fit")
    try:
        if strategy == "ddp":
            strategy = pl.strategies.DDPStrategy(
                process_group_backend="kolo", timeout=datetime.timedelta(seconds=INIT_TIMEOUT))
        trainer = pl.Trainer(strategy=strategy, accelerator="cpu", devices=1, num_nodes=2,
                             max_steps=1, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)
        x = torch.randn(8, 4)
        trainer.fit(Regression(), DataLoader(TensorDataset(x, x.sum(1, keepdim=True))))
    except BaseException:
        hosts.say_failed()
        raise
    print("fit: global rank %d of %d" % (trainer.global_rank, trainer.world_size))


def run_two(strategy, port, address, second_host):
    """The worker here and on ``second_host`` at once, both with NODE_RANK=0:
    [(pid, host, stderr)] after checking that both failed within WITHIN seconds of the
    later one's call."""
    env = hosts.environment(NODE_RANK=0, LOCAL_RANK=0, WORLD_SIZE=2, MASTER_ADDR=address,
                            MASTER_PORT=port)
    argv = [sys.executable, os.path.abspath(__file__), strategy]
    processes = [hosts.start(argv, env, host) for host in (None, second_host)]
    return hosts.all_failed_together(processes, SECONDS, WITHIN)


def test_ddp_on_kolo_with_one_global_rank_twice_fails_both_naming_both():
    with hosts.network_host("10.233.59.2", "10.233.59.1", "kolo59v"):
        (pid_a, host_a, err_a), (pid_b, host_b, err_b) = run_two(
            "ddp", hosts.free_port(), "10.233.59.1", "10.233.59.2")
    assert host_b == "kolo-10.233.59.2" and host_a != host_b
    wanted = {DUPLICATE.format(pid_a, host_a, pid_b, host_b),
              DUPLICATE.format(pid_b, host_b, pid_a, host_a)}
    hosts.assert_last_lines_in((err_a, err_b), wanted)


def test_kolo_strategy_started_by_hand_refuses_on_both_hosts():
    for _, _, err in run_two("kolo", hosts.free_port(), "127.0.0.1", "127.0.0.2"):
        assert hosts.last_line(err) == SEPARATE_COPIES, err


if __name__ == "__main__":
    if sys.argv[1:] not in (["ddp"], ["kolo"]):
        sys.exit("usage: rank_claims_check.py ddp|kolo (the tests run under pytest)")
    worker(sys.argv[1])
