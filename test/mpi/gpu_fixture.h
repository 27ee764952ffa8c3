// The fixture of the multi-rank tests on device memory (gpu_test.cc,
// tf_operation_gpu_test.cc): a runtime per test on this rank's GPU, or a
// skip that says why. NCCL needs one GPU per rank unless it lets ranks share
// one (NCCL >= 2.30 with NCCL_MULTI_RANK_GPU_ENABLE=1, ops/shared_gpu.h), so
// where the ranks of a host outnumber its GPUs without that, every rank of it
// reaches the same verdict and skips, as test_torch_cuda.py does; what kolo
// says when two ranks do share a GPU is test_torch_cuda_faults.py's.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>

#include "ops/shared_gpu.h"
#include "test_util.h"

namespace kolo::test {

class OneGpuPerRankTest : public RuntimeTest {
 protected:
  void SetUp() override {
    if (GpuCount() == 0) {
      GTEST_SKIP() << (BuiltWithCuda() ? "no CUDA device on this machine"
                                       : "this build has no GPU support (KOLO_WITH_CUDA)");
    }
    int local = 0, local_size = 1;
    if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) local = std::atoi(v);
    if (const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE")) local_size = std::atoi(v);
    const SharedGpuVerdict sharing =
        NcclSharesGpu(NcclVersion(), std::getenv("NCCL_MULTI_RANK_GPU_ENABLE"));
    if (local_size > GpuCount() && !sharing.allowed) {
      GTEST_SKIP() << local_size << " ranks on this host share " << GpuCount()
                   << " GPU(s): " << sharing.advice;
    }
    device_ = local % GpuCount();
    ASSERT_EQ(cudaSetDevice(device_), cudaSuccess);
    RuntimeTest::SetUp();
  }

  int device_ = 0;  // this rank's GPU
};

}  // namespace kolo::test
