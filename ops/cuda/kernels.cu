#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "../copy_split.h"
#include "kernels.h"

namespace kolo {
namespace {

// One job as the kernel runs it: its split (ops/copy_split.h), made on the host.
struct SplitJob {
  const void* src;
  void* dst;
  int64_t head;     // scalar elements before the first vector
  int64_t vectors;  // 16-byte vectors
  int64_t tail;     // scalar elements after them
};

// Passed by value as a kernel parameter (~1.3 KB, under the 4 KB limit), so
// one launch needs no descriptor copy to the device.
struct CopyBatch {
  SplitJob jobs[kMaxJobsPerLaunch];
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

// blockIdx.y picks the job; the x dimension strides over its 16-byte vectors,
// then over its scalar head and tail.
template <typename T, bool kScale>
__global__ void BatchedCopyKernel(CopyBatch batch, double factor) {
  constexpr int kLanes = kCopyVectorBytes / sizeof(T);
  const SplitJob job = batch.jobs[blockIdx.y];
  const T* src = static_cast<const T*>(job.src);
  T* dst = static_cast<T*>(job.dst);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const uint4* vsrc = reinterpret_cast<const uint4*>(src + job.head);
  uint4* vdst = reinterpret_cast<uint4*>(dst + job.head);
  for (int64_t i = first; i < job.vectors; i += stride) {
    uint4 v = vsrc[i];
    if (kScale) {
      T* lanes = reinterpret_cast<T*>(&v);
#pragma unroll
      for (int l = 0; l < kLanes; ++l) lanes[l] = Scaled(lanes[l], factor);
    }
    vdst[i] = v;
  }
  const int64_t tail_start = job.head + job.vectors * kLanes;
  for (int64_t i = first; i < job.head + job.tail; i += stride) {
    const int64_t e = i < job.head ? i : tail_start + (i - job.head);
    dst[e] = kScale ? Scaled(src[e], factor) : src[e];
  }
}

template <typename T>
cudaError_t Launch(const std::vector<CopyJob>& jobs, double factor, cudaStream_t stream) {
  constexpr int kThreads = 256;
  for (size_t first = 0; first < jobs.size(); first += kMaxJobsPerLaunch) {
    const size_t n = std::min<size_t>(kMaxJobsPerLaunch, jobs.size() - first);
    CopyBatch batch{};
    int64_t widest = 0;  // the most steps one job needs: vectors or scalars
    for (size_t i = 0; i < n; ++i) {
      const CopyJob& job = jobs[first + i];
      const CopySplit split = SplitForVectors(reinterpret_cast<uintptr_t>(job.src),
                                              reinterpret_cast<uintptr_t>(job.dst), job.count,
                                              static_cast<int>(sizeof(T)));
      batch.jobs[i] = {job.src, job.dst, split.head, split.vectors, split.tail};
      widest = std::max({widest, split.vectors, split.head + split.tail});
    }
    if (widest == 0) continue;
    const int64_t blocks = std::min<int64_t>((widest + kThreads - 1) / kThreads, 1024);
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
