// Where a kernel of kolo's TensorFlow ops finds its tensors: in host memory (the
// CPU kernels, and the host-memory arguments of the GPU kernels), or in the
// memory of the GPU that runs the op, ordered by TensorFlow's stream for it.
//
// The GPU part is compiled with KOLO_TF_GPU, which the build and
// kolo.tensorflow's loader set when kolo's core has its GPU path. It uses only
// TensorFlow's StreamExecutor interface (the stream's CUDA handle, its device
// ordinal, a copy and a wait on it), not CUDA's headers, so TensorFlow's CPU
// wheel compiles it too.
#ifndef KOLO_BINDINGS_TENSORFLOW_KOLO_TF_DEVICE_H_
#define KOLO_BINDINGS_TENSORFLOW_KOLO_TF_DEVICE_H_

#include <cstddef>
#include <cstdint>

#include "kolo_tf_abi.h"
#include "tensorflow/core/framework/op_kernel.h"

#if KOLO_TF_GPU
#include "xla/stream_executor/stream.h"
#include "xla/stream_executor/stream_executor.h"
#endif

namespace kolo_tf {

#if KOLO_TF_GPU
// StreamExecutor's untyped device pointer: DeviceAddressBase since TensorFlow
// 2.21, DeviceMemoryBase before.
#if __has_include("xla/stream_executor/device_address.h")
using DeviceBytes = ::stream_executor::DeviceAddressBase;
#else
using DeviceBytes = ::stream_executor::DeviceMemoryBase;
#endif
#endif

class OpDevice {
 public:
  // The device of the kernel that `ctx` runs: a GPU when TensorFlow gives the
  // op a stream, else the host.
  explicit OpDevice(::tensorflow::OpKernelContext* ctx) {
#if KOLO_TF_GPU
    const ::tensorflow::DeviceContext* context = ctx->op_device_context();
    if (context != nullptr && context->stream() != nullptr) {
      stream_ = context->stream();
      ordinal_ = stream_->parent()->device_ordinal();
    }
#else
    (void)ctx;
#endif
  }

  bool on_gpu() const { return ordinal_ != KOLO_TF_HOST; }
  // The CUDA device ordinal of the op, or KOLO_TF_HOST.
  int32_t ordinal() const { return ordinal_; }
  // TensorFlow's stream for the op, as a cudaStream_t; null for the host.
  void* cuda_stream() const {
#if KOLO_TF_GPU
    if (stream_ != nullptr) return stream_->platform_specific_handle().stream;
#endif
    return nullptr;
  }

  // Where the kernel's input or output `i` lives: a GPU kernel's arguments
  // are in the GPU's memory unless registered as HostMemory.
  int32_t InputDevice(::tensorflow::OpKernelContext* ctx, int i) const {
    return on_gpu() && ctx->input_memory_type(i) == ::tensorflow::DEVICE_MEMORY ? ordinal_
                                                                                : KOLO_TF_HOST;
  }
  int32_t OutputDevice(::tensorflow::OpKernelContext* ctx, int i) const {
    return on_gpu() && ctx->output_memory_type(i) == ::tensorflow::DEVICE_MEMORY ? ordinal_
                                                                                 : KOLO_TF_HOST;
  }

  // Copies `bytes` between two buffers of this GPU on TensorFlow's stream,
  // after the work already enqueued there.
  absl::Status CopyOnDevice(void* dst, const void* src, size_t bytes) const {
#if KOLO_TF_GPU
    if (stream_ != nullptr) {
      DeviceBytes to(dst, bytes);
      return stream_->Memcpy(&to, DeviceBytes(const_cast<void*>(src), bytes), bytes);
    }
#endif
    (void)dst, (void)src, (void)bytes;
    return absl::InternalError("kolo's op has device memory to copy but runs on no GPU");
  }

  // Returns once the work enqueued on TensorFlow's stream so far has finished.
  absl::Status Synchronize() const {
#if KOLO_TF_GPU
    if (stream_ != nullptr) return stream_->BlockHostUntilDone();
#endif
    return absl::OkStatus();
  }

 private:
#if KOLO_TF_GPU
  ::stream_executor::Stream* stream_ = nullptr;
#endif
  int32_t ordinal_ = KOLO_TF_HOST;
};

}  // namespace kolo_tf

#endif  // KOLO_BINDINGS_TENSORFLOW_KOLO_TF_DEVICE_H_
