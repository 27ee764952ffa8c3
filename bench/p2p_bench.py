"""Point-to-point speed (issue 36, item 4): torch.distributed's send/recv on the backend
"kolo" against mpi4py's Send/Recv (raw MPI, the same Open MPI that kolo uses) and against
torch.distributed's send/recv on gloo, a ping-pong between 2 ranks at every size from 4 B
to 64 MiB (powers of 4).

    # one system in a job of its own; rank 0 prints one JSON object
    kolorun -np 2 .venv/bin/python bench/p2p_bench.py alone --system kolo
    kolorun -np 2 .venv/bin/python bench/p2p_bench.py alone --system gloo
    kolorun -np 2 /usr/bin/python3 bench/p2p_bench.py alone --system mpi4py
    # the comparison: each system in jobs of its own, JOBS rounds, alternated job by job
    python3 bench/p2p_bench.py --out bench/results/p2p.json jobs [--jobs 5] [--quick]
    # a change's before and after: "<system>:base" runs the build in $BASE_BUILD
    BASE_BUILD=../wt-base/build python3 bench/p2p_bench.py jobs \
        --systems kolo,kolo:base,kolo_direct,kolo_direct:base,trivial,mpi4py,gloo

Where the time of a small message goes, two more systems: ``kolo_direct`` is kolo's part
alone (the backend's own communicator, kolo._core's isend/irecv and wait, no
torch.distributed call, no Work), ``trivial`` is torch.distributed's part alone
(dist.send/dist.recv on a Python process group whose send and recv do nothing and return
a finished Work: PyTorch's dispatch into a Python backend and back). ``mpi4py_torch`` is
mpi4py's Send/Recv on memory that PyTorch allocated (NumPy views of torch tensors, Debian's
PyTorch): NumPy asks the kernel for huge pages for arrays of 4 MiB and more, PyTorch does
not, and Open MPI's single copy between processes (CMA) runs over the pages.

A round trip: rank 0 sends a float32 tensor (NumPy array for mpi4py) of the size to rank 1,
which receives it into a buffer of its own and sends that buffer back; rank 0 receives it
into a second buffer (checked: the bytes came back). Both ranks run the same number of
round trips (``--budget-mib`` MiB per size, between ``--min-iters`` and ``--max-iters``)
after a few untimed ones; rank 0 times each round trip, and a job's figure for a size is
the median round trip / 2 (the one-way time). `jobs` reports, per system and size, the
median over jobs and the spread (slowest job / fastest), and the ratios kolo / mpi4py and
kolo / gloo of the one-way times (below 1: kolo is faster).

The systems' interpreters: kolo's backend needs PyTorch >= 2.1 (.venv); mpi4py is only in
Debian's /usr/bin/python3 and needs no PyTorch; gloo runs on .venv's PyTorch. kolo and
gloo rendezvous through env:// (kolorun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import standalone_jobs  # noqa: E402

SYSTEMS = ("kolo", "mpi4py", "gloo", "kolo_direct", "trivial", "mpi4py_torch")
WARMUP = 3


def sizes(max_bytes):
    size, out = 4, []
    while size <= max_bytes:
        out.append(size)
        size *= 4
    return out


def iterations(size, args):
    """The same count on both ranks, from the size alone (no agreement needed)."""
    return int(min(args.max_iters, max(args.min_iters, (args.budget_mib << 20) // size)))


# --- one system in a job of its own ------------------------------------------------------

class TorchPeer:
    """send/recv of torch.distributed on the backend ``backend`` (kolo or gloo)."""

    def __init__(self, backend):
        import torch
        import torch.distributed as dist
        if backend == "kolo":
            import kolo.torch.c10d  # noqa: F401  (registers the backend)
        torch.set_num_threads(1)
        dist.init_process_group(backend=backend)
        self.torch, self.dist = torch, dist
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.version = {"torch": torch.__version__}

    def buffers(self, nbytes):
        n = nbytes // 4
        return self.torch.full((n,), 7.0), self.torch.zeros(n)

    def send(self, buf, peer):
        self.dist.send(buf, peer)

    def recv(self, buf, peer):
        self.dist.recv(buf, peer)

    @staticmethod
    def ends(buf):
        return float(buf[0]), float(buf[-1])

    def gather(self, value):
        out = [None] * self.size
        self.dist.all_gather_object(out, value)
        return out

    def close(self):
        self.dist.destroy_process_group()


class KoloDirectPeer(TorchPeer):
    """kolo's part of a message alone: the kolo group's own point-to-point communicator
    (kolo._core.P2PComm) and its requests' wait, without torch.distributed's call."""

    def __init__(self):
        super().__init__("kolo")
        group = self.dist.distributed_c10d._get_default_group()
        self.comm = group._p2p.comm("send")

    def send(self, buf, peer):
        self.comm.isend(buf.data_ptr(), buf.numel() * 4, peer, 0).wait(-1.0)

    def recv(self, buf, peer):
        self.comm.irecv(buf.data_ptr(), buf.numel() * 4, peer, 0).wait(-1.0)


class TrivialPeer(TorchPeer):
    """torch.distributed's part of a message alone: dist.send/dist.recv on a Python process
    group whose send and recv return a finished Work at once (nothing moves)."""

    def __init__(self):
        import torch.distributed as dist

        class Done(dist._Work):
            def wait(self, timeout=None):
                return True

            def _source_rank(self):
                return 0

        class Nothing(dist.ProcessGroup):
            def send(self, tensors, dst, tag=0):
                return Done()

            def recv(self, tensors, src, tag=0):
                return Done()

            def getBackendName(self):
                return "trivial"

        if "TRIVIAL" not in getattr(dist.Backend, "_plugins", {}):
            dist.Backend.register_backend(
                "trivial", lambda opts, _options=None: Nothing(opts.group_rank, opts.group_size),
                extended_api=True, devices=["cpu"])
        super().__init__("trivial")

    @staticmethod
    def ends(buf):
        return 7.0, 7.0  # nothing came back: there is nothing to check

    def gather(self, value):
        return [value] * self.size  # the ranks need not agree: nothing is exchanged

    def close(self):
        pass


class MpiPeer:
    """mpi4py's Send/Recv on NumPy arrays: raw MPI, no PyTorch, no kolo."""

    def __init__(self):
        from mpi4py import MPI
        import mpi4py
        self.comm = MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.version = {"mpi4py": mpi4py.__version__,
                        "mpi": MPI.Get_library_version().rstrip("\x00").strip()}

    @staticmethod
    def buffers(nbytes):
        n = nbytes // 4
        return np.full(n, 7.0, np.float32), np.zeros(n, np.float32)

    def send(self, buf, peer):
        self.comm.Send(buf, dest=peer)

    def recv(self, buf, peer):
        self.comm.Recv(buf, source=peer)

    @staticmethod
    def ends(buf):
        return float(buf[0]), float(buf[-1])

    def gather(self, value):
        return self.comm.allgather(value)

    def close(self):
        pass


class MpiTorchMemoryPeer(MpiPeer):
    """mpi4py's Send/Recv on NumPy views of torch tensors: MPI on PyTorch's memory."""

    @staticmethod
    def buffers(nbytes):
        import torch
        n = nbytes // 4
        return torch.full((n,), 7.0).numpy(), torch.zeros(n).numpy()


def ping_pong(peer, nbytes, iters):
    """Rank 0's round-trip times (s) of ``iters`` timed round trips; rank 1 echoes."""
    out, back = peer.buffers(nbytes)
    times = []
    for i in range(WARMUP + iters):
        if peer.rank == 0:
            start = time.perf_counter()
            peer.send(out, 1)
            peer.recv(back, 1)
            if i >= WARMUP:
                times.append(time.perf_counter() - start)
        elif peer.rank == 1:
            peer.recv(back, 0)
            peer.send(back, 0)
    if peer.rank == 0 and peer.ends(back) != (7.0, 7.0):
        raise SystemExit("p2p_bench: %d B: the round trip brought back %s, not 7.0"
                         % (nbytes, peer.ends(back)))
    return times


def alone(args):
    if args.system == "mpi4py":
        peer = MpiPeer()
    elif args.system == "mpi4py_torch":
        peer = MpiTorchMemoryPeer()
    elif args.system == "kolo_direct":
        peer = KoloDirectPeer()
    elif args.system == "trivial":
        peer = TrivialPeer()
    else:
        peer = TorchPeer(args.system)
    if peer.size != 2:
        raise SystemExit("p2p_bench: a ping-pong needs 2 ranks, this job has %d" % peer.size)
    rows = []
    load = os.getloadavg()
    for nbytes in sizes(args.max_bytes):
        iters = iterations(nbytes, args)
        times = ping_pong(peer, nbytes, iters)
        peer.gather(None)  # both ranks done with this size before the next one starts
        if peer.rank == 0:
            rt = np.asarray(times)
            one_way = float(np.median(rt)) / 2
            rows.append({"bytes": nbytes, "round_trips": iters, "one_way_us": one_way * 1e6,
                         "one_way_p10_us": float(np.percentile(rt, 10)) / 2 * 1e6,
                         "one_way_p90_us": float(np.percentile(rt, 90)) / 2 * 1e6,
                         "gbs": nbytes / one_way / 1e9})
            print("%-6s %10d B  %10.1f us  %8.3f GB/s" % (args.system, nbytes, one_way * 1e6,
                                                         rows[-1]["gbs"]), file=sys.stderr)
    result = {"benchmark": "p2p_pingpong", "system": args.system, "np": peer.size,
              "load_before": list(load), "rows": rows}
    result.update(peer.version)
    rank = peer.rank
    peer.close()
    return rank, result


# --- the comparison: jobs alternated -------------------------------------------------------

def memcpy_us(max_bytes, repeats=50):
    """The physical limit of a one-way message of each size: one copy of its bytes in
    memory (NumPy's copyto, median of ``repeats``, after a warm-up), in µs."""
    out = {}
    for nbytes in sizes(max_bytes):
        src, dst = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
        np.copyto(dst, src)
        times = []
        for _ in range(repeats if nbytes < 1 << 24 else 10):
            start = time.perf_counter()
            np.copyto(dst, src)
            times.append(time.perf_counter() - start)
        out[str(nbytes)] = float(np.median(times)) * 1e6
    return out


def jobs(args):
    if args.quick:
        args.jobs, args.budget_mib, args.max_iters, args.min_iters = 2, 4, 50, 3
    kolorun = standalone_jobs.kolorun(2)
    python = {s: args.torch_python for s in SYSTEMS}
    python["mpi4py"] = python["mpi4py_torch"] = args.mpi_python
    counts = ["--max-bytes", str(args.max_bytes), "--budget-mib", str(args.budget_mib),
              "--max-iters", str(args.max_iters), "--min-iters", str(args.min_iters)]
    systems = args.systems.split(",")
    load = os.getloadavg()
    floor = memcpy_us(args.max_bytes)
    runs = {s: [] for s in systems}
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        commands = {}
        for s in systems:
            system, _, which = s.partition(":")  # "kolo:base": the build in $BASE_BUILD
            run = standalone_jobs.base_kolorun(2) if which == "base" else kolorun
            commands[s] = run + [standalone_jobs.interpreter(python[system]),
                                 os.path.abspath(__file__), "--out", out, "alone",
                                 "--system", system] + counts
        for i, s, job in standalone_jobs.alternate(args.jobs, commands, out):
            runs[s].append(job)
            print("job %d %-6s done" % (i + 1, s), file=sys.stderr)
    per_size = {}
    for s in systems:
        for r, row in enumerate(runs[s][0]["rows"]):
            per_size.setdefault(row["bytes"], {})[s] = standalone_jobs.spread(
                [job["rows"][r]["one_way_us"] for job in runs[s]], unit="us")
    ratios = {}
    for ref in (x for x in systems if x != "kolo"):
        if "kolo" in systems and ref in ("mpi4py", "mpi4py_torch", "gloo", "kolo:base"):
            ratios["kolo / " + ref] = {str(b): p["kolo"]["median_us"] / p[ref]["median_us"]
                                       for b, p in per_size.items()}
    versions = {}
    for s in systems:
        versions.update({k: runs[s][0][k] for k in ("torch", "mpi4py", "mpi")
                         if k in runs[s][0]})
    header = "%10s" % "bytes" + "".join("%14s" % (s + " us") for s in systems) + "".join(
        "%16s" % name for name in ratios)
    print(header, file=sys.stderr)
    for b, p in per_size.items():
        print("%10d" % b + "".join("%14.1f" % p[s]["median_us"] for s in systems) + "".join(
            "%16.2f" % r[str(b)] for r in ratios.values()), file=sys.stderr)
    return 0, {"benchmark": "p2p", "commit": standalone_jobs.commit(), "np": 2,
               "jobs": args.jobs, "quick": args.quick, "budget_mib": args.budget_mib,
               "iterations": [args.min_iters, args.max_iters], "load_before": list(load),
               "versions": versions, "one_way_us": {str(b): p for b, p in per_size.items()},
               "memcpy_us": floor,
               "placements": {s: [job.get("placement", {}).get("placement", "unknown")
                                  for job in runs[s]] for s in systems},
               "ratios": ratios}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write the JSON here as well as to stdout")
    sub = parser.add_subparsers(dest="what", required=True)
    for name in ("alone", "jobs"):
        p = sub.add_parser(name)
        p.add_argument("--max-bytes", type=int, default=64 << 20)
        p.add_argument("--budget-mib", type=int, default=256,
                       help="MiB sent one way per size (sets the round trips per size)")
        p.add_argument("--min-iters", type=int, default=10)
        p.add_argument("--max-iters", type=int, default=1000)
        if name == "alone":
            p.add_argument("--system", choices=SYSTEMS, required=True)
    p.add_argument("--jobs", type=int, default=5)
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--quick", action="store_true",
                   help="a smoke run: 2 jobs each, few round trips per size")
    p.add_argument("--torch-python", default=".venv/bin/python")
    p.add_argument("--mpi-python", default="/usr/bin/python3")
    args = parser.parse_args()
    rank, result = alone(args) if args.what == "alone" else jobs(args)
    if rank == 0:
        standalone_jobs.write_result(result, args.out)


if __name__ == "__main__":
    main()
