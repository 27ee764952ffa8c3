"""PyTorch's own torch.distributed test base (DistributedTest._DistTestBase, shipped in the
torch wheel) through PyTorch's own spawning harness, as PyTorch's
test/distributed/test_distributed_spawn.py runs it for gloo: TestDistBackend (a
MultiProcessTestCase) starts WORLD_SIZE fresh processes per test with
torch.multiprocessing's spawn, and each calls init_process_group(init_method=file://...,
rank, world_size). For backend "kolo" those processes were not started by kolorun: kolo
joins them through the file store (kolo/common/join.py). This is our driver, not a copy
of PyTorch's file: the same class, plus the declarations an out-of-tree backend needs.

usage: BACKEND=kolo|gloo WORLD_SIZE=2 PYTHONPATH=build/python .venv/bin/python -m pytest \
           --noconftest -p no:cacheprovider test/c10d/run_spawn_suite.py
       (--noconftest: test/c10d/conftest.py starts a kolorun job's process group, which
       these tests' spawned processes make for themselves)
Env: BACKEND (default kolo), WORLD_SIZE (default 2), SUITE_FEATURES (comma list of
DistTestCases.backend_feature sets to declare kolo in; default ddp,subgroup,gpu, as
../shared/peer-suites/pytorch-distributed/run_c10d.sh declares it).
"""
import os
import tempfile

os.environ.setdefault("BACKEND", "kolo")
os.environ.setdefault("WORLD_SIZE", "2")
# The suite reads TEMP_DIR at import; TestDistBackend.setUp makes a fresh one per test.
os.environ.setdefault("TEMP_DIR", tempfile.gettempdir())
BACKEND = os.environ["BACKEND"]

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if BACKEND == "kolo":
    import kolo.torch.c10d  # noqa: F401,E402  (registers "kolo"; spawned children import this too)

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

# An out-of-tree backend is declared through the suite's own hook for plugin backends, and
# in the feature sets that gloo is in except "cuda" (CPU only); before importing the suite,
# whose decorators read these sets at class-definition time.
if BACKEND not in ("gloo", "nccl", "mpi", "ucc"):
    DistTestCases.backend_feature["plugin"].add(BACKEND)
    for feature in os.environ.get("SUITE_FEATURES", "ddp,subgroup,gpu").split(","):
        if feature:
            DistTestCases.backend_feature[feature].add(BACKEND)

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

torch.backends.cuda.matmul.allow_tf32 = False


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


if __name__ == "__main__":
    assert dist.is_available()
    run_tests()
