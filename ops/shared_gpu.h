// Whether ranks of one NCCL communicator may share a GPU. NCCL refuses it
// before 2.30; from 2.30 on it allows it where NCCL_MULTI_RANK_GPU_ENABLE is a
// non-zero integer (NCCL's own setting, read here as NCCL reads it: the ranks'
// kernels then time-share the device, a functional mode rather than a fast
// one). Pure functions of the loaded NCCL's version code and that setting, so
// that the check before ncclCommInitRank (ops/cuda/nccl_comm.cc), the GPU
// tests' fixture and the unit tests agree.
#pragma once

#include <cerrno>
#include <cstdlib>
#include <string>

namespace kolo {

// ncclGetVersion's code of NCCL 2.30.0, the first that can share a GPU.
inline constexpr int kNcclSharedGpuVersion = 23000;

// "2.30.7" for 23007 (NCCL ≥ 2.9 codes major*10000 + minor*100 + patch,
// older ones major*1000 + minor*100 + patch).
inline std::string NcclVersionName(int code) {
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code / 100 % 100 : code / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(code % 100);
}

// True where NCCL would read `value` (the variable's text; null when unset)
// as a non-zero integer: its parameters are parsed with strtoll, base 0.
inline bool NcclMultiRankGpuEnabled(const char* value) {
  if (value == nullptr || *value == '\0') return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value, &end, 0);
  return errno == 0 && *end == '\0' && v != 0;
}

struct SharedGpuVerdict {
  bool allowed = false;
  // Where refused: what would allow it, for the error that names the ranks.
  std::string advice;
};

// The verdict for NCCL of `loaded_version` (its ncclGetVersion code) with
// NCCL_MULTI_RANK_GPU_ENABLE set to `multi_rank_gpu_enable` (null: unset).
inline SharedGpuVerdict NcclSharesGpu(int loaded_version, const char* multi_rank_gpu_enable) {
  const std::string loaded = "NCCL " + NcclVersionName(loaded_version);
  if (loaded_version < kNcclSharedGpuVersion) {
    return {false, loaded +
                       " needs one GPU per rank (from NCCL 2.30 on, NCCL_MULTI_RANK_GPU_ENABLE=1 "
                       "lets ranks share one)"};
  }
  if (!NcclMultiRankGpuEnabled(multi_rank_gpu_enable)) {
    return {false, loaded +
                       " needs one GPU per rank unless NCCL_MULTI_RANK_GPU_ENABLE=1 (with "
                       "NCCL_NVLS_ENABLE=0 and a small NCCL_MAX_CTAS) lets ranks share one"};
  }
  return {true, ""};
}

}  // namespace kolo
