// CUDA kernels of the GPU path: the batched fusion copy with scaling.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kolo/types.h"

namespace kolo {

// One tensor's part of a batched copy.
struct CopyJob {
  const void* src;
  void* dst;
  int64_t count;  // elements
};

// Copies every job's `count` elements from src to dst, multiplied by
// `factor` (integers: rounded toward zero, as on the CPU), in as few
// launches as the jobs need (kMaxJobsPerLaunch per launch). src may equal
// dst (scaling in place). Returns the launch error, if any.
constexpr int kMaxJobsPerLaunch = 32;
cudaError_t BatchedCopy(const std::vector<CopyJob>& jobs, DataType dtype, double factor,
                        cudaStream_t stream);

}  // namespace kolo
