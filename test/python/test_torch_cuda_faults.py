"""GPU faults under kolorun at np >= 2: each must end in a named error on every
surviving rank, never a hang. Skips, saying why, without a GPU or a CUDA build.
Run by scripts/gpu_check.sh (step faults, which also bounds the run with a
timeout); docs/gpu.md."""
import os

import pytest
import torch

import kolo.torch as hvd
from cuda_sharing import nccl_shares_gpu

hvd.init()
R, N = hvd.rank(), hvd.size()
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
SHARED = nccl_shares_gpu(hvd)  # NCCL's multi-rank mode: ranks may share a GPU

pytestmark = [
    pytest.mark.skipif(not hvd.cuda_built(), reason="this kolo build has no GPU support"),
    pytest.mark.skipif(GPUS == 0, reason="no CUDA device on this machine"),
    pytest.mark.skipif(N < 2, reason="needs two ranks or more"),
]


def test_mismatched_devices_fail_every_rank():
    # Rank 0 on the GPU, the others on the CPU: only one rank touches the GPU.
    x = torch.ones(4, device="cuda:0") if R == 0 else torch.ones(4)
    with pytest.raises(Exception, match="Mismatched devices"):
        hvd.allreduce(x, name="cuda.fault.devices")
    # and the job goes on: the next collective works everywhere
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


@pytest.mark.skipif(GPUS >= hvd.local_size(), reason="every rank has its own GPU here")
@pytest.mark.skipif(SHARED, reason="NCCL's multi-rank mode lets ranks share a GPU here")
def test_ranks_sharing_one_gpu_get_a_named_error():
    # More ranks than GPUs on this host: every rank on GPU local_rank % GPUS. NCCL
    # refuses two ranks of one communicator on one device; kolo checks before
    # NCCL does and says so on every rank (docs/architecture.md, "Communicators").
    torch.cuda.set_device(hvd.local_rank() % GPUS)
    with pytest.raises(Exception) as e:
        hvd.allreduce(torch.ones(4, device="cuda"), name="cuda.fault.shared")
    print("rank %d: %s" % (R, e.value))
    assert "both use the GPU at PCI" in str(e.value)


@pytest.mark.skipif(GPUS < hvd.local_size() and not SHARED,
                    reason="a rank killed inside an NCCL collective needs a GPU per rank "
                    "(or NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1)")
def test_a_rank_killed_inside_a_gpu_collective():
    torch.cuda.set_device(hvd.local_rank() % GPUS)
    hvd.allreduce(torch.ones(4, device="cuda"), name="cuda.fault.warmup")
    if R == N - 1:
        os._exit(9)  # dies before joining; the others are inside the NCCL allreduce
    with pytest.raises(Exception) as e:
        hvd.allreduce(torch.ones(1 << 20, device="cuda"), name="cuda.fault.killed")
    print("rank %d: %s" % (R, e.value))
