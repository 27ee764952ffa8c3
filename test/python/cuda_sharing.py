"""Whether this job's ranks may share a GPU, as kolo decides it (ops/shared_gpu.h): NCCL
from 2.30 on with NCCL_MULTI_RANK_GPU_ENABLE set to a non-zero integer. kolo reads the
version it was built against here; scripts/gpu_check.sh runs the shared-GPU steps with
that same NCCL loaded. For test_torch_cuda.py and test_torch_cuda_faults.py."""
import os

NCCL_SHARED_GPU_VERSION = 23000  # 2.30.0


def multi_rank_gpu_enabled(value):
    """NCCL's reading of NCCL_MULTI_RANK_GPU_ENABLE: an integer (any base) other than 0."""
    try:
        return int(value or "0", 0) != 0
    except ValueError:
        return False


def nccl_shares_gpu(hvd):
    return (hvd.nccl_built() >= NCCL_SHARED_GPU_VERSION and
            multi_rank_gpu_enabled(os.environ.get("NCCL_MULTI_RANK_GPU_ENABLE")))
