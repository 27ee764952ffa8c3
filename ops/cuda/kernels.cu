#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels.h"

namespace kolo {
namespace {

// Passed by value as a kernel parameter (~0.8 KB, under the 4 KB limit), so
// one launch needs no descriptor copy to the device.
struct CopyBatch {
  CopyJob jobs[kMaxJobsPerLaunch];
};

template <typename T>
__device__ __forceinline__ T Scaled(T v, double f) {
  return static_cast<T>(static_cast<double>(v) * f);
}
template <>
__device__ __forceinline__ float Scaled<float>(float v, double f) {
  return v * static_cast<float>(f);
}
template <>
__device__ __forceinline__ __half Scaled<__half>(__half v, double f) {
  return __float2half(__half2float(v) * static_cast<float>(f));
}
template <>
__device__ __forceinline__ __nv_bfloat16 Scaled<__nv_bfloat16>(__nv_bfloat16 v, double f) {
  return __float2bfloat16(__bfloat162float(v) * static_cast<float>(f));
}

// blockIdx.y picks the job; the x dimension strides over its elements.
template <typename T, bool kScale>
__global__ void BatchedCopyKernel(CopyBatch batch, double factor) {
  const CopyJob job = batch.jobs[blockIdx.y];
  const T* src = static_cast<const T*>(job.src);
  T* dst = static_cast<T*>(job.dst);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < job.count;
       i += stride) {
    dst[i] = kScale ? Scaled(src[i], factor) : src[i];
  }
}

template <typename T>
cudaError_t Launch(const std::vector<CopyJob>& jobs, double factor, cudaStream_t stream) {
  constexpr int kThreads = 256;
  for (size_t first = 0; first < jobs.size(); first += kMaxJobsPerLaunch) {
    const size_t n = std::min<size_t>(kMaxJobsPerLaunch, jobs.size() - first);
    CopyBatch batch{};
    int64_t longest = 0;
    for (size_t i = 0; i < n; ++i) {
      batch.jobs[i] = jobs[first + i];
      longest = std::max(longest, jobs[first + i].count);
    }
    if (longest == 0) continue;
    const int64_t blocks = std::min<int64_t>((longest + kThreads - 1) / kThreads, 1024);
    dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(n));
    if (factor == 1.0) {
      BatchedCopyKernel<T, false><<<grid, kThreads, 0, stream>>>(batch, factor);
    } else {
      BatchedCopyKernel<T, true><<<grid, kThreads, 0, stream>>>(batch, factor);
    }
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t BatchedCopy(const std::vector<CopyJob>& jobs, DataType dtype, double factor,
                        cudaStream_t stream) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kBool:
      return Launch<uint8_t>(jobs, dtype == DataType::kBool ? 1.0 : factor, stream);
    case DataType::kInt8:
      return Launch<int8_t>(jobs, factor, stream);
    case DataType::kUInt16:
      return Launch<uint16_t>(jobs, factor, stream);
    case DataType::kInt16:
      return Launch<int16_t>(jobs, factor, stream);
    case DataType::kInt32:
      return Launch<int32_t>(jobs, factor, stream);
    case DataType::kInt64:
      return Launch<int64_t>(jobs, factor, stream);
    case DataType::kFloat16:
      return Launch<__half>(jobs, factor, stream);
    case DataType::kBFloat16:
      return Launch<__nv_bfloat16>(jobs, factor, stream);
    case DataType::kFloat32:
      return Launch<float>(jobs, factor, stream);
    case DataType::kFloat64:
      return Launch<double>(jobs, factor, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace kolo
