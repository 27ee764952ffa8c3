"""An unchanged Lightning DDP script (ddp_two_nodes.py: strategy="ddp", num_nodes=2, devices=2,
CPU, no kolo import) under kolorun -np 4 on two loopback hosts, the second one started by the
ssh stand-in test/launcher/fake_ssh.sh in a UTS namespace of its own (hostname
kolo-127.0.0.2).

Lightning computes a DDP process's global rank from the environment; a wrong node rank gives
two processes the same rank and a hang. Asserted from the script's output: four distinct
global ranks 0-3 matching kolorun's, node ranks 0 and 1 on the right hosts, the same number
of steps and the same weights on every rank after training. Once more inside an sbatch-like
environment, where SLURM_PROCID=0 reaches every rank: Lightning must not take its ranks from
Slurm's variables.

Run by CTest with the project's Python (not under kolorun); KOLORUN names kolorun.
"""
import os
import re
import signal
import subprocess
import sys

import pytest

KOLORUN = os.environ["KOLORUN"]
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ddp_two_nodes.py")
FAKE_SSH = os.path.join(HERE, "..", "launcher", "fake_ssh.sh")
TWO_HOSTS = ["-np", "4", "-H", "127.0.0.1:2,127.0.0.2:2",
             "--mpi-args", "--mca plm_rsh_agent " + os.path.abspath(FAKE_SSH)]
# What an sbatch script's environment gives every process of its batch step.
SBATCH = ["-x", "SLURM_JOB_ID=4242", "-x", "SLURM_JOB_NAME=train", "-x", "SLURM_NTASKS=4",
          "-x", "SLURM_NNODES=2", "-x", "SLURM_PROCID=0", "-x", "SLURM_LOCALID=0",
          "-x", "SLURM_NODEID=0", "-x", "SLURM_NTASKS_PER_NODE=2",
          "-x", "SLURM_TASKS_PER_NODE=2(x2)"]
STEPS = 2 * 64 // (4 * 4)  # 2 epochs of 64 samples, 4 ranks, batches of 4
LINE = re.compile(r"\[(\d+)\]<stdout>:DDP global_rank=(\d+) local_rank=(\d+) node_rank=(\d+) "
                  r"world_size=(\d+) host=(\S+) env=(\S+) steps=(\d+) weight_sum=(\S+) done$")


def kolorun(args, timeout=75):
    """Runs kolorun; on a hang stops it with SIGTERM (which ends every rank) and fails."""
    p = subprocess.Popen([KOLORUN, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=20)
        pytest.fail("the job hung: still running after %d s; its output:\n%s\n%s"
                    % (timeout, out, err[-4000:]))
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


@pytest.mark.limit_s(120)
@pytest.mark.parametrize("where", ["two_hosts", "two_hosts_inside_sbatch"])
def test_stock_lightning_ddp_gets_distinct_ranks_on_two_hosts(where):
    extra = SBATCH if where.endswith("sbatch") else []
    r = kolorun(TWO_HOSTS + extra + [sys.executable, SCRIPT])
    output = r.stdout + r.stderr[-6000:]
    assert r.returncode == 0, output
    seen = {}
    for line in r.stdout.splitlines():
        m = LINE.match(line)
        if m:
            seen[int(m.group(1))] = m.groups()[1:]
    assert sorted(seen) == [0, 1, 2, 3], "not one line per rank:\n" + output
    weights = set()
    for tag, (rank, local, node, world, host, env, steps, weight_sum) in seen.items():
        assert int(rank) == tag, "kolorun's rank %d is Lightning's global rank %s" % (tag, rank)
        assert (int(local), int(node), int(world)) == (tag % 2, tag // 2, 4), seen[tag]
        assert (host == "kolo-127.0.0.2") == (tag >= 2), "rank %d on %s" % (tag, host)
        assert env == "TorchElasticEnvironment", "Lightning read its ranks from " + env
        assert int(steps) == STEPS, "rank %d made %s steps" % (tag, steps)
        weights.add(weight_sum)
    assert len(weights) == 1, "DDP ranks ended with different weights: %s" % weights
