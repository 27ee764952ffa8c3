"""kolo's torch.distributed backend in processes that kolo did not launch (issue 36): the
ranks of `torchrun --nproc_per_node N` and of `torch.multiprocessing.spawn` join into one
kolo job through the store (kolo/common/join.py). Not a pytest file: pytest runs
test/c10d under kolorun, and this starts its own processes.

  start_check.py torchrun N   torchrun --standalone --nproc_per_node N this --worker
  start_check.py spawn N      torch.multiprocessing.spawn, N processes, a TCPStore
  start_check.py missing      rank 1 holds the store but never initializes: rank 0's
                              init_process_group(timeout=5 s) fails naming rank 1
  start_check.py no-server    no ompi-server on PATH: rank 0 says so and names the
                              kolorun command, rank 1 fails by the timeout
  start_check.py peer-exit    rank 1 ends by os._exit (no MPI_Finalize, as PyTorch's test
                              harness ends a skipped test's processes): rank 0 still exits,
                              after its bounded MPI_Finalize, saying so

Every worker checks its rank against kolo's, an all_reduce, a broadcast, a new_group and a
send/recv, and prints "rank R of N: ok (init X s)". Every mode ends within LIMIT seconds
with a message; exit status 0 when everything held.
"""
import datetime
import os
import re
import socket
import subprocess
import sys
import time

LIMIT = 150  # seconds for a whole mode (importing torch in N processes on 2 cores)
HERE = os.path.abspath(__file__)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_ranks(rank, size, init_seconds):
    """Collectives on the joined job; raises AssertionError naming what differs."""
    import torch
    import torch.distributed as dist
    from kolo import _core
    assert dist.get_rank() == rank and dist.get_world_size() == size, \
        "torch.distributed says rank %d of %d, wanted %d of %d" % (
            dist.get_rank(), dist.get_world_size(), rank, size)
    assert (_core.rank(), _core.size()) == (rank, size), \
        "kolo says rank %d of %d, torch.distributed %d of %d" % (
            _core.rank(), _core.size(), rank, size)
    assert _core.local_size() == size, \
        "kolo says local_size %d: the %d joined ranks of this host do not see each other" % (
            _core.local_size(), size)
    x = torch.full((5,), float(rank + 1))
    dist.all_reduce(x)
    want = size * (size + 1) / 2
    assert x.tolist() == [want] * 5, "rank %d: all_reduce gave %s, wanted %s" % (
        rank, x.tolist(), want)
    big = torch.full((1 << 20,), float(rank + 1))  # 4 MiB: kolo's shared-memory path
    dist.all_reduce(big)
    assert bool((big == want).all()), "rank %d: a 4 MiB all_reduce gave %s" % (rank, big[:4])
    b = torch.arange(3.0) if rank == size - 1 else torch.zeros(3)
    dist.broadcast(b, src=size - 1)
    assert b.tolist() == [0.0, 1.0, 2.0], "rank %d: broadcast gave %s" % (rank, b.tolist())
    group = dist.new_group([0, size - 1])
    if rank in (0, size - 1):
        g = torch.ones(2)
        dist.all_reduce(g, group=group)
        assert g.tolist() == [2.0, 2.0], "rank %d: all_reduce on [0, %d] gave %s" % (
            rank, size - 1, g.tolist())
    t = torch.tensor([float(rank)])
    if rank == 0:
        dist.send(torch.tensor([42.0]), dst=1)
    elif rank == 1:
        dist.recv(t, src=0)
        assert t.item() == 42.0, "rank 1: recv gave %s" % t.item()
    dist.barrier()
    print("rank %d of %d: ok (init %.2f s)" % (rank, size, init_seconds), flush=True)


def init(rank=None, size=None, store=None, timeout=60):
    import torch
    import torch.distributed as dist
    import kolo.torch.c10d  # noqa: F401  (registers backend "kolo")
    torch.set_num_threads(1)
    start = time.monotonic()
    kwargs = {} if store is None else dict(store=store, rank=rank, world_size=size)
    dist.init_process_group(backend="kolo", timeout=datetime.timedelta(seconds=timeout),
                            **kwargs)
    return time.monotonic() - start


def torchrun_worker():
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    seconds = init()
    check_ranks(rank, size, seconds)
    import torch.distributed as dist
    dist.destroy_process_group()


def spawn_worker(rank, size, port):
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, size, rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    seconds = init(rank, size, store)
    check_ranks(rank, size, seconds)
    dist.destroy_process_group()


def expect_lines(out, size):
    missing = [r for r in range(size) if "rank %d of %d: ok" % (r, size) not in out]
    if missing:
        print("FAILED: no \"ok\" from rank(s) %s" % missing)
        return 1
    print("PASSED: %d ranks joined and agreed" % size)
    return 0


def run(cmd, env=None):
    """Runs `cmd` within LIMIT; its output, or None when it ran past (after saying so)."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                           timeout=LIMIT)
    except subprocess.TimeoutExpired as e:
        print((e.stdout or b"").decode(errors="replace"))
        print("FAILED: %s did not finish within %d s" % (" ".join(cmd), LIMIT))
        return None
    out = p.stdout.decode(errors="replace")
    print(out)
    print("exit status %d" % p.returncode)
    return out if p.returncode == 0 else out + "\nexit status %d" % p.returncode


def mode_torchrun(size):
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    out = run([torchrun, "--standalone", "--nproc_per_node", str(size), HERE, "--worker"])
    return 1 if out is None or "exit status" in out else expect_lines(out, size)


def mode_spawn(size):
    out = run([sys.executable, HERE, "--spawn-parent", str(size)])
    return 1 if out is None or "exit status" in out else expect_lines(out, size)


def spawn_parent(size):
    import torch.multiprocessing as mp
    mp.spawn(spawn_worker, args=(size, free_port()), nprocs=size, join=True)


def failing_worker(rank, size, port, timeout):
    """Rank 0 initializes; rank 1 only serves as the store's other end (mode missing), or
    both initialize without an ompi-server (mode no-server)."""
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, size, rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    if rank == 1 and os.environ.get("START_CHECK_MODE") == "missing":
        time.sleep(timeout + 2)
        return
    start = time.monotonic()
    try:
        init(rank, size, store, timeout=timeout)
    except RuntimeError as e:
        print("rank %d: error after %.1f s: %s" % (rank, time.monotonic() - start, e),
              flush=True)
        return
    print("rank %d: init_process_group did not fail" % rank, flush=True)


def failing_parent(timeout):
    import torch.multiprocessing as mp
    mp.spawn(failing_worker, args=(2, free_port(), timeout), nprocs=2, join=True)


def mode_failing(mode):
    timeout = 5
    env = dict(os.environ, START_CHECK_MODE=mode)
    if mode == "no-server":
        env["PATH"] = "/nonexistent"
    out = run([sys.executable, HERE, "--failing-parent", str(timeout)], env=env)
    if out is None:
        return 1
    wanted = {
        "missing": [(0, r"rank\(s\) 1 never called init_process_group\(backend=\"kolo\"\) "
                        r"within the init timeout \(5 s\)")],
        "no-server": [(0, r"ompi-server is not on PATH.*kolorun -np 2 python script\.py"),
                      (1, r"rank 0's ompi-server address never came")],
    }[mode]
    failed = 0
    for rank, pattern in wanted:
        m = re.search(r"rank %d: error after ([0-9.]+) s: .*%s" % (rank, pattern), out)
        if not m:
            print("FAILED: rank %d did not fail with /%s/" % (rank, pattern))
            failed = 1
        elif float(m.group(1)) > timeout + 5:
            print("FAILED: rank %d failed after %s s, the timeout is %d s"
                  % (rank, m.group(1), timeout))
            failed = 1
    if not failed:
        print("PASSED: %s fails with a message naming the problem within the timeout" % mode)
    return failed


def peer_exit_worker(rank, size, port):
    import torch.distributed as dist
    store = dist.TCPStore("127.0.0.1", port, size, rank == 0,
                          timeout=datetime.timedelta(seconds=60))
    # The timeout is also kolo's stall shutdown time: rank 0's shutdown at exit waits that
    # long for rank 1's answer before it stops alone.
    check_ranks(rank, size, init(rank, size, store, timeout=10))
    if rank == 1:
        os._exit(0)  # no atexit, no MPI_Finalize
    print("rank 0: returning, %d at exit" % os.getpid(), flush=True)


def peer_exit_parent(size):
    import torch.multiprocessing as mp
    mp.spawn(peer_exit_worker, args=(size, free_port()), nprocs=size, join=True)


def mode_peer_exit():
    start = time.monotonic()
    out = run([sys.executable, HERE, "--peer-exit-parent", "2"])
    seconds = time.monotonic() - start
    if out is None or "exit status" in out:
        return 1
    # Rank 0 either finds rank 1's process gone in a negotiation round through shared
    # memory (the ranks share this host), so that nothing of MPI waits for it at exit, or
    # (rounds over MPI) cuts its MPI_Finalize short.
    if ("MPI_Finalize did not return within" not in out
            and "died during a negotiation round" not in out):
        print("FAILED: rank 0 said neither that rank 1 died nor that its MPI_Finalize was "
              "cut short")
        return 1
    print("PASSED: peer-exit: rank 0 exited (the whole job in %.1f s) though rank 1 ended "
          "without MPI_Finalize" % seconds)
    return 0


# argv[0] -> (what to run, how to read argv[1]); None: it takes no argument.
MODES = {
    "--worker": (torchrun_worker, None),
    "--spawn-parent": (spawn_parent, int),
    "--peer-exit-parent": (peer_exit_parent, int),
    "--failing-parent": (failing_parent, float),
    "torchrun": (mode_torchrun, int),
    "spawn": (mode_spawn, int),
    "peer-exit": (mode_peer_exit, None),
    "missing": (lambda: mode_failing("missing"), None),
    "no-server": (lambda: mode_failing("no-server"), None),
}


def main(argv):
    if not argv or argv[0] not in MODES:
        print(__doc__)
        return 2
    run_mode, parse = MODES[argv[0]]
    return run_mode() if parse is None else run_mode(parse(argv[1]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
