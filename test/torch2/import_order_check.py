"""A kolo binding imported (and a collective run) before PyTorch must leave `import torch`
working: kolo loads NCCL only for a GPU collective (ops/cuda/nccl_api.h). When libkolo
linked NCCL, the NCCL kolo was built against was loaded under the soname libnccl.so.2 and
then served PyTorch's libtorch_cuda.so, which needs its own newer one: `import torch`
failed with "undefined symbol: ncclCommResume" after `import kolo.tensorflow`.

Run under kolorun at np=2; prints "import order: OK" on every rank.
"""
import os

import numpy as np


def nccl_mapped():
    with open("/proc/self/maps") as maps:
        return sorted({line.split()[-1] for line in maps if "libnccl" in line})


import kolo.numpy as kn  # noqa: E402  (the bindings without a framework of their own)
import kolo.tensorflow  # noqa: E402,F401
import kolo.jax  # noqa: E402,F401

kn.init()
out = kn.allreduce(np.full(4, kn.rank() + 1.0), op=kn.Sum, name="before_torch")
assert out.tolist() == [3.0] * 4, out
assert nccl_mapped() == [], "kolo loaded NCCL for a CPU job: %s" % nccl_mapped()

import torch  # noqa: E402  (failed here before)
import kolo.torch as kt  # noqa: E402

x = torch.full((3,), float(kt.rank()))
assert kt.allreduce(x, op=kt.Sum, name="after_torch").tolist() == [1.0] * 3
nccl = nccl_mapped()
# Whatever NCCL the process has now is PyTorch's own (its CUDA wheels bring one, beside torch
# in the same site-packages), never the one kolo was built against.
site = os.path.dirname(os.path.dirname(os.path.realpath(torch.__file__)))
assert all(os.path.realpath(path).startswith(site) for path in nccl), (site, nccl)
print("import order: OK rank %d torch %s nccl %s" % (kt.rank(), torch.__version__, nccl or "-"),
      flush=True)
kn.shutdown()
