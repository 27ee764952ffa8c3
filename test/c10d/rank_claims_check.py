"""Processes that take their ranks from torch.distributed's variables, set wrong on two
hosts, as in the field: kolo's torch.distributed backend (kolo.common.launch_checks) must
fail every process within seconds of the last one's arrival, with one line naming both
hosts and the variables they read, instead of waiting for the init timeout.

- Both processes RANK=0 (a second machine's node rank copied from the first): each starts
  torch.distributed's store on its own host and both meet in the first one's. The second
  host has a network namespace of its own (on one network stack the second store could not
  listen on the port at all).
- WORLD_SIZE 2 on one host and 3 on the other, on two loopback hosts. The other way round
  rank 0 waits inside torch.distributed's store for a third process, where kolo cannot
  see it: both end at the init timeout, rank 1 saying where rank 0 waits.
- RANK=2 of WORLD_SIZE=2: both processes fail naming it.

A pytest file run directly, not under kolorun, with --noconftest (this folder's conftest.py
starts a process group under kolorun); PYTHONPATH has the built package. As root (the
network namespace). ``rank_claims_check.py worker`` is one process of the job.
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import hosts  # noqa: E402

# After the last process called init_process_group, every one must have failed within:
WITHIN = 10.0
# Importing torch in two processes on a loaded machine, and failing.
SECONDS = 90
# The init timeout the processes would otherwise wait for.
INIT_TIMEOUT = 60
DUPLICATE = (
    "RuntimeError: kolo: rank 0 of this torch.distributed job is claimed by two processes: "
    "pid {0} on host {1} (RANK=0, WORLD_SIZE=2) and pid {2} on host {3} (RANK=0, "
    "WORLD_SIZE=2); every process needs a rank of its own, 0 to 1: check how the rank "
    "variables are set on each host (torchrun --node_rank, NODE_RANK, RANK)")
SIZES = (
    "RuntimeError: kolo: the processes of this torch.distributed job disagree on its size: "
    "pid {0} on host {1} (RANK={4}, WORLD_SIZE={5}) has world size {5}, pid {2} on host {3} "
    "(RANK={6}, WORLD_SIZE={7}) has {7}; start every process with the same world size "
    "(WORLD_SIZE, torchrun --nnodes and --nproc_per_node, Lightning's num_nodes and devices)")

OUTSIDE = ("RuntimeError: kolo: pid {0} on host {1} (RANK=2, WORLD_SIZE=2) was given rank 2, "
           "outside the world size 2: ranks run from 0 to 1")
RANK_0_WAITS = (
    "RuntimeError: kolo could not join the ranks of this torch.distributed job (rank 1 of 2): "
    "rank(s) 0 never called init_process_group(backend=\"kolo\") within the init timeout "
    "(5 s): did they start, and do they use backend \"kolo\"? (if rank 0 holds "
    "torch.distributed's store, it started and waits there for more processes than came: is "
    "its world size larger than 2?)")


def worker(init_timeout):
    """One process: init_process_group(backend="kolo") from torch.distributed's variables."""
    import datetime
    hosts.say_who()
    import torch.distributed as dist
    import kolo.torch.c10d  # noqa: F401  (registers backend "kolo")
    hosts.say_calling("init_process_group")
    try:
        dist.init_process_group("kolo", timeout=datetime.timedelta(seconds=init_timeout))
    except BaseException:
        hosts.say_failed()
        raise
    print("init_process_group: rank %d of %d" % (dist.get_rank(), dist.get_world_size()))


def run_two(envs, second_host, init_timeout=INIT_TIMEOUT, within=WITHIN):
    """The worker here and on ``second_host`` at once: [(pid, host, stderr)] after checking
    that both failed within ``within`` seconds of the later one's call."""
    argv = [sys.executable, os.path.abspath(__file__), "worker", str(init_timeout)]
    processes = [hosts.start(argv, env, host) for env, host in zip(envs, [None, second_host])]
    return hosts.all_failed_together(processes, SECONDS, within)


def test_two_processes_with_rank_0_on_two_hosts_both_fail_naming_both():
    port = hosts.free_port()
    env = hosts.environment(RANK=0, WORLD_SIZE=2, MASTER_ADDR="10.233.58.1", MASTER_PORT=port)
    with hosts.network_host("10.233.58.2", "10.233.58.1", "kolo58v"):
        (pid_a, host_a, err_a), (pid_b, host_b, err_b) = run_two([env, env], "10.233.58.2")
    assert host_b == "kolo-10.233.58.2" and host_a != host_b
    # The first process to claim rank 0 is named first.
    wanted = {DUPLICATE.format(pid_a, host_a, pid_b, host_b),
              DUPLICATE.format(pid_b, host_b, pid_a, host_a)}
    hosts.assert_last_lines_in((err_a, err_b), wanted)
    assert hosts.last_line(err_a) == hosts.last_line(err_b)


def test_world_sizes_that_disagree_fail_both_naming_both():
    port = hosts.free_port()
    envs = [hosts.environment(RANK=r, WORLD_SIZE=n, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            for r, n in ((0, 2), (1, 3))]
    (pid_a, host_a, err_a), (pid_b, host_b, err_b) = run_two(envs, "127.0.0.2")
    assert host_b == "kolo-127.0.0.2" and host_a != host_b
    wanted = {SIZES.format(pid_a, host_a, pid_b, host_b, 0, 2, 1, 3),
              SIZES.format(pid_b, host_b, pid_a, host_a, 1, 3, 0, 2)}
    hosts.assert_last_lines_in((err_a, err_b), wanted)
    assert hosts.last_line(err_a) == hosts.last_line(err_b)


def test_a_rank_outside_the_world_size_fails_both():
    port = hosts.free_port()
    envs = [hosts.environment(RANK=r, WORLD_SIZE=2, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            for r in (0, 2)]
    (_, _, err_a), (pid_b, host_b, err_b) = run_two(envs, "127.0.0.2")
    wanted = OUTSIDE.format(pid_b, host_b)
    assert hosts.last_line(err_a) == wanted and hosts.last_line(err_b) == wanted, (
        "wanted on both:\n%s\ngot:\n%s\n%s" % (wanted, err_a, err_b))


def test_rank_0_with_the_larger_world_size_ends_at_the_init_timeout():
    """Rank 0 waits inside torch.distributed's store for the clients its world size says,
    before kolo can check anything; rank 1 waits for rank 0 in kolo's claims. Both end at
    the init timeout, rank 1 saying where rank 0 waits."""
    port = hosts.free_port()
    envs = [hosts.environment(RANK=r, WORLD_SIZE=n, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            for r, n in ((0, 3), (1, 2))]
    (_, _, err_0), (_, _, err_1) = run_two(envs, "127.0.0.2", init_timeout=5, within=20)
    assert re.search(r"^torch\.distributed\.DistStoreError: Timed out after \d+ seconds "
                     r"waiting for clients\. 2/3 clients joined\.$", hosts.last_line(err_0)), err_0
    assert hosts.last_line(err_1) == RANK_0_WAITS, err_1


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "worker":
        sys.exit("usage: rank_claims_check.py worker INIT_TIMEOUT (the tests run under pytest)")
    worker(float(sys.argv[2]))
