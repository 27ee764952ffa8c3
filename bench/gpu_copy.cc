// The fusion copy kernel (ops/cuda/kernels.h, BatchedCopy: what packs tensors
// into the fusion buffer and unpacks them) against cudaMemcpyAsync
// device-to-device, on the same bytes: one tensor, and the same bytes as 64
// tensors (one BatchedCopy against 64 cudaMemcpyAsync calls). Timed with CUDA
// events, median of repeats, rotating between four buffer pairs so that no
// size below the L2 measures the cache alone. Prints one JSON object; progress
// on stderr. Built with CUDA only; run by scripts/gpu_check.sh (step speed).
// Exits 77 (skipped) where no CUDA device answers.
//
//   build/bench/gpu_copy [max_bytes]
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "cuda/kernels.h"

namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "gpu_copy: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// Median milliseconds of `once(i)` over `reps` runs, each bracketed by events.
double MedianMs(cudaStream_t stream, int reps, const std::function<void(int)>& once) {
  cudaEvent_t start, stop;
  Check(cudaEventCreate(&start), "cudaEventCreate");
  Check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) once(i);
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    Check(cudaEventRecord(start, stream), "cudaEventRecord");
    once(i);
    Check(cudaEventRecord(stop, stream), "cudaEventRecord");
    Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    Check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_bytes = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 30);
  const int kPairs = 4, kPieces = 64;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gpu_copy: SKIPPED: no CUDA device on this machine\n");
    return 77;
  }
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<char*> src(kPairs), dst(kPairs);
  for (int p = 0; p < kPairs; ++p) {
    Check(cudaMalloc(&src[p], static_cast<size_t>(max_bytes)), "cudaMalloc");
    Check(cudaMalloc(&dst[p], static_cast<size_t>(max_bytes)), "cudaMalloc");
    Check(cudaMemset(src[p], 1, static_cast<size_t>(max_bytes)), "cudaMemset");
  }
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::string json =
      std::string("{\"benchmark\": \"gpu_copy\", \"gpu\": \"") + prop.name + "\", \"rows\": [";
  bool first = true;
  for (int64_t bytes = int64_t{1} << 20; bytes <= max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4;
    const int reps = bytes >= (int64_t{256} << 20) ? 20 : 100;
    auto memcpy_one = [&](int i) {
      Check(cudaMemcpyAsync(dst[i % kPairs], src[i % kPairs], static_cast<size_t>(bytes),
                            cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpyAsync");
    };
    auto kernel_one = [&](int i) {
      Check(kolo::BatchedCopy({{src[i % kPairs], dst[i % kPairs], count}}, kolo::DataType::kFloat32,
                              1.0, stream),
            "BatchedCopy");
    };
    const int64_t piece = count / kPieces;
    auto memcpy_many = [&](int i) {
      for (int k = 0; k < kPieces; ++k) {
        Check(cudaMemcpyAsync(dst[i % kPairs] + k * piece * 4, src[i % kPairs] + k * piece * 4,
                              static_cast<size_t>(piece * 4), cudaMemcpyDeviceToDevice, stream),
              "cudaMemcpyAsync");
      }
    };
    auto kernel_many = [&](int i) {
      std::vector<kolo::CopyJob> jobs;
      for (int k = 0; k < kPieces; ++k) {
        jobs.push_back({src[i % kPairs] + k * piece * 4, dst[i % kPairs] + k * piece * 4, piece});
      }
      Check(kolo::BatchedCopy(jobs, kolo::DataType::kFloat32, 1.0, stream), "BatchedCopy");
    };
    const double m1 = MedianMs(stream, reps, memcpy_one), k1 = MedianMs(stream, reps, kernel_one);
    const double m64 = MedianMs(stream, reps, memcpy_many),
                 k64 = MedianMs(stream, reps, kernel_many);
    // Bytes read plus bytes written, per second.
    auto gbs = [&](double ms) { return 2.0 * static_cast<double>(bytes) / ms / 1e6; };
    char row[320];
    std::snprintf(row, sizeof(row),
                  "%s\n  {\"bytes\": %lld, \"memcpy_ms\": %.4f, \"kernel_ms\": %.4f, "
                  "\"memcpy_64_ms\": %.4f, \"kernel_64_ms\": %.4f, \"kernel_gbs\": %.1f, "
                  "\"memcpy_over_kernel\": %.3f, \"memcpy_64_over_kernel_64\": %.3f}",
                  first ? "" : ",", static_cast<long long>(bytes), m1, k1, m64, k64, gbs(k1),
                  m1 / k1, m64 / k64);
    json += row;
    first = false;
    std::fprintf(stderr,
                 "%11lld B  memcpy %.4f ms  kernel %.4f ms (%.3f)  x64: %.4f vs %.4f (%.3f)\n",
                 static_cast<long long>(bytes), m1, k1, m1 / k1, m64, k64, m64 / k64);
  }
  json += "\n]}\n";
  std::fputs(json.c_str(), stdout);
  for (int p = 0; p < kPairs; ++p) {
    cudaFree(src[p]);
    cudaFree(dst[p]);
  }
  return 0;
}
