"""The cost of an elastic ``state.commit()`` per MiB of tensor state (issue 34's goal:
within 2 x a memcpy of the same bytes), for a ResNet-50-sized TorchState: the model's
state_dict (conv and BatchNorm layers of ResNet-50's shapes: 25.6 M parameters plus the
BatchNorm buffers, ~98 MiB) and, with --momentum, SGD's momentum buffers (twice that).

Times the save half of commit() (the host check is one TCP round trip to kolorun), into
the store of elastic kolorun (two slot files on /dev/shm, KOLO_ELASTIC_DIR to change it)
and into the in-memory store of plain kolorun, against NumPy copying the same number of
bytes between two buffers that were touched before (a memcpy without page faults). The
first commit of each is also shown: it faults in the mapping's pages.

    PYTHONPATH=build/python .venv/bin/python bench/elastic_commit.py [--repeats 15]
"""
import argparse
import os
import statistics
import tempfile
import time

import numpy as np
import torch

import kolo.torch as hvd


def resnet50_like():
    """ResNet-50's convolution, BatchNorm and fc layers (their parameters and buffers:
    the state_dict of torchvision's resnet50, without its forward)."""
    layers = [torch.nn.Conv2d(3, 64, 7, bias=False), torch.nn.BatchNorm2d(64)]
    width_in = 64
    for blocks, width in zip([3, 4, 6, 3], [64, 128, 256, 512]):
        for b in range(blocks):
            layers += [torch.nn.Conv2d(width_in, width, 1, bias=False),
                       torch.nn.BatchNorm2d(width),
                       torch.nn.Conv2d(width, width, 3, bias=False), torch.nn.BatchNorm2d(width),
                       torch.nn.Conv2d(width, width * 4, 1, bias=False),
                       torch.nn.BatchNorm2d(width * 4)]
            if b == 0:
                layers += [torch.nn.Conv2d(width_in, width * 4, 1, bias=False),
                           torch.nn.BatchNorm2d(width * 4)]
            width_in = width * 4
    layers.append(torch.nn.Linear(2048, 1000))
    return torch.nn.Sequential(*layers)


def median_seconds(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), min(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--momentum", action="store_true")
    parser.add_argument("--threads", type=int, default=1, help="torch's threads (1: as "
                        "a rank of a multi-rank job on few cores)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    hvd.init()
    model = resnet50_like()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9 if args.momentum
                                else 0)
    if args.momentum:
        hvd.broadcast_optimizer_state(optimizer, 0)  # makes the momentum buffers
    tensors = list(model.state_dict().values()) + [
        v for s in optimizer.state_dict()["state"].values() for v in s.values()
        if isinstance(v, torch.Tensor)]
    nbytes = sum(t.numel() * t.element_size() for t in tensors)
    mib = nbytes / 2**20
    print("state: %d tensors, %.1f MiB; torch threads %d" % (len(tensors), mib,
                                                             args.threads))

    src, dst = np.ones(nbytes, np.uint8), np.zeros(nbytes, np.uint8)
    copy_s, copy_min = median_seconds(lambda: np.copyto(dst, src), args.repeats)
    print("memcpy (NumPy, one buffer):   median %7.1f ms  %6.0f MiB/s  (best %.1f ms)"
          % (copy_s * 1e3, mib / copy_s, copy_min * 1e3))
    # The same bytes from the state's own tensors (each its own allocation, on 4 KiB
    # pages, where NumPy's one large buffer gets transparent huge pages): what copying
    # the state costs at the least, e.g. Horovod's deepcopy without its allocations.
    views = [t.detach().reshape(-1).view(torch.uint8).numpy() for t in tensors]

    def copy_tensors():
        offset = 0
        for v in views:
            np.copyto(dst[offset:offset + v.size], v)
            offset += v.size
    tensors_s, tensors_min = median_seconds(copy_tensors, args.repeats)
    print("memcpy of the state's tensors: median %7.1f ms  %6.0f MiB/s  (best %.1f ms)"
          % (tensors_s * 1e3, mib / tensors_s, tensors_min * 1e3))

    base = os.environ.get("KOLO_ELASTIC_DIR", "/dev/shm")
    for where in ["in memory (plain kolorun)", "files in %s (elastic)" % base]:
        state = hvd.elastic.TorchState(model, optimizer, epoch=0)
        directory = None
        if where.startswith("files"):
            directory = tempfile.mkdtemp(prefix="kolo-elastic-bench-", dir=base)
            state._store.attach(directory, 0, 0)
        start = time.perf_counter()
        state.save()
        first = time.perf_counter() - start
        state.save()  # the second slot's first use
        s, best = median_seconds(state.save, args.repeats)
        print("commit, %-27s median %7.1f ms  %6.0f MiB/s  (best %.1f ms; first %.1f ms)"
              "  = %.2f x memcpy, %.2f x the tensors' memcpy"
              % (where + ":", s * 1e3, mib / s, best * 1e3, first * 1e3, s / copy_s,
                 s / tensors_s))
        state._store.close(remove=True)
        if directory and os.path.isdir(directory):
            os.rmdir(directory)


main()
