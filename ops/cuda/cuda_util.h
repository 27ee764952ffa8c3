// The GPU path's CUDA basics: a Status from a CUDA or NCCL error code (and
// the macros that return it), and owners of CUDA state: the current device
// for a scope, a stream, an event, a device buffer.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <string>

#include "kolo/status.h"
#include "nccl_api.h"

namespace kolo {

inline Status CudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return Status::OK();
  return Status::Internal(std::string(call) + " failed: " + cudaGetErrorString(e));
}

// `comm`, when given, adds NCCL's last error message for it. NCCL is loaded
// (nccl_api.h) before any call that can fail.
inline Status NcclStatus(ncclResult_t r, const char* call, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return Status::OK();
  std::string m = std::string(call) + " failed: " + Nccl().GetErrorString(r);
  const char* last = Nccl().GetLastError(comm);
  if (last != nullptr && *last != '\0') m += " (" + std::string(last) + ")";
  return Status::Internal(m);
}

#define KOLO_CUDA(call) KOLO_RETURN_IF_ERROR(::kolo::CudaStatus((call), #call))
// KOLO_NCCL(comm, AllReduce, args...) calls ncclAllReduce(args...) through
// the loaded library and returns "ncclAllReduce failed: ..." on an error.
#define KOLO_NCCL(comm, function, ...) \
  KOLO_RETURN_IF_ERROR(                \
      ::kolo::NcclStatus(::kolo::Nccl().function(__VA_ARGS__), "nccl" #function, comm))

// Makes `device` current for a scope and restores the caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    cudaGetDevice(&previous_);
    if (previous_ != device_) cudaSetDevice(device_);
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

// An owned CUDA stream or event, destroyed with `Destroy`.
template <typename T, cudaError_t (*Destroy)(T)>
class CudaHandle {
 public:
  CudaHandle() = default;
  ~CudaHandle() {
    if (handle_ != nullptr) Destroy(handle_);
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  T get() const { return handle_; }
  T* out() { return &handle_; }  // for the create call

 private:
  T handle_ = nullptr;
};

using Stream = CudaHandle<cudaStream_t, cudaStreamDestroy>;
using Event = CudaHandle<cudaEvent_t, cudaEventDestroy>;

inline Status CreateEvent(Event* event) {
  return CudaStatus(cudaEventCreateWithFlags(event->out(), cudaEventDisableTiming),
                    "cudaEventCreateWithFlags");
}

// Device memory that grows to the largest size asked for and is kept.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(int device) : device_(device) {}
  ~DeviceBuffer() {
    if (data_ != nullptr) {
      DeviceGuard guard(device_);
      cudaFree(data_);  // waits for work still using it
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  Result<char*> Reserve(size_t bytes) {
    if (bytes <= bytes_) return data_;
    DeviceGuard guard(device_);
    if (data_ != nullptr) cudaFree(data_);
    data_ = nullptr;
    bytes_ = 0;
    void* p = nullptr;
    KOLO_CUDA(cudaMalloc(&p, bytes));
    data_ = static_cast<char*>(p);
    bytes_ = bytes;
    return data_;
  }

 private:
  int device_;
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kolo
