// The GPU path's interface to the runtime, free of CUDA and NCCL headers so
// that the runtime compiles the same with and without them. Built with CUDA
// (ops/cuda/), it runs NCCL collectives on kolo's own stream per device, or
// with stream-ordered completion on the callers' stream (ops/gpu_launch.h);
// without, MakeGpu() returns an implementation whose every call fails with a
// message saying that this build has no GPU support.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

// A device tensor as a GPU collective sees it.
struct GpuTensor {
  const void* input = nullptr;
  void* output = nullptr;  // may alias input
  int64_t count = 0;       // elements
  // From Gpu::MarkReady: kolo's stream waits for it before touching the tensor.
  std::shared_ptr<void> ready;
  // The stream that produces the tensor (null: the legacy default stream).
  void* stream = nullptr;
};

// Device memory a collective allocated for its result (allgather, alltoall,
// reducescatter); freed when the last reference goes.
struct GpuOutput {
  std::shared_ptr<void> data;
  int64_t bytes = 0;
};

// The device communicators of one process set: NCCL's, one group per device,
// made collectively over the set's MPI communicator on first use (Gpu's
// collectives make them). A process set owns its own (Gpu::MakeComms) and
// destroys them with itself, once no work runs on them.
class GpuComms {
 public:
  virtual ~GpuComms() = default;
  // The job lost a rank (issue 47): aborts every device communicator, whose
  // work may wait for the dead forever (ncclCommAbort, not a finalize).
  virtual void Abort() {}
};

class Gpu {
 public:
  // Work in flight on kolo's stream; polled with Poll().
  using Token = std::shared_ptr<void>;

  virtual ~Gpu() = default;

  // CUDA devices this process can use (0 without a GPU, driver or GPU build).
  virtual int DeviceCount() = 0;
  // OK when kolo can run a collective on `device` with `dtype` here, or a
  // message saying why not (no GPU build, no driver, no such device, a dtype
  // NCCL does not have).
  virtual Status CheckDevice(int device, DataType dtype) = 0;
  // On the caller's thread: records an event on `stream` (the framework's
  // current stream; null = the legacy default stream). The collective's
  // stream waits on it, so the host never blocks. Refuses a stream that a
  // CUDA graph is capturing (CheckStream).
  virtual Result<std::shared_ptr<void>> MarkReady(int device, void* stream) = 0;
  // OK unless `stream` is being captured into a CUDA graph (torch.cuda.graph):
  // kolo's collectives are agreed on by the ranks' host threads at every
  // call, so a replayed graph could not run them; the error says so.
  virtual Status CheckStream(int device, void* stream) = 0;

  // The (still empty) communicators of the process set on `comm`, which
  // must outlive them. Not collective: nothing is made before first use.
  virtual std::unique_ptr<GpuComms> MakeComms(MPI_Comm comm) = 0;

  // Collectives over the process set whose communicators are `comms` (from
  // this Gpu's MakeComms); every member calls them in the same order (the
  // negotiation guarantees it). The communicator for `device` is made on
  // first use. Each call enqueues work on kolo's stream for `device` and
  // returns at once.
  // kAverage is native (ncclAvg); prescale is applied before the reduction,
  // postscale after.
  virtual Result<Token> Allreduce(GpuComms& comms, int device,
                                  const std::vector<GpuTensor>& tensors, DataType dtype,
                                  ReduceOp op, double prescale, double postscale) = 0;
  virtual Result<Token> Broadcast(GpuComms& comms, int device, const GpuTensor& tensor,
                                  int64_t bytes, int root) = 0;
  // Rank i's `recv_bytes[i]` land one after the other in `out`.
  virtual Result<Token> Allgatherv(GpuComms& comms, int device, const GpuTensor& tensor,
                                   int64_t send_bytes, const std::vector<int64_t>& recv_bytes,
                                   GpuOutput* out) = 0;
  virtual Result<Token> Alltoallv(GpuComms& comms, int device, const GpuTensor& tensor,
                                  const std::vector<int64_t>& send_bytes,
                                  const std::vector<int64_t>& recv_bytes, GpuOutput* out) = 0;
  // Reduces the input (sum of `counts` elements); this rank keeps block
  // `rank` of counts[rank] elements in `out`.
  virtual Result<Token> ReduceScatter(GpuComms& comms, int device, const GpuTensor& tensor,
                                      const std::vector<int64_t>& counts, DataType dtype,
                                      ReduceOp op, double prescale, double postscale,
                                      GpuOutput* out) = 0;

  // True once the work behind `token` finished. An error once its
  // communicator reported an asynchronous error: the communicator is then
  // aborted and every later call on it fails.
  virtual Result<bool> Poll(const Token& token) = 0;
  // Stream-ordered completion: work queued on `stream` from now on runs
  // after the work behind `token` (cudaStreamWaitEvent; nothing to do where
  // that work ran on `stream` itself). The host does not wait.
  virtual Status OrderAfter(const Token& token, void* stream) = 0;
};

struct GpuOptions {
  // Allreduce on sets across hosts as reduce-scatter within the host,
  // allreduce across hosts, allgather within the host.
  bool hierarchical = false;
  // KOLO_ENABLE_ASYNC_COMPLETION: collectives run on their tensors' stream
  // where they share one (ops/gpu_launch.h), and the ready events are
  // recorded when the collective is launched rather than when it is asked for.
  bool stream_ordered = false;
  // KOLO_NCCL_GROUP_MIN_BYTES: grouped allreduces of tensors this large go as
  // one NCCL group rather than through the fusion buffer (0: never).
  int64_t group_min_bytes = 0;
};

std::unique_ptr<Gpu> MakeGpu(const GpuOptions& options);

// Whether this build has the GPU path (CUDA and NCCL), as it was compiled:
// asks no device and loads nothing.
bool NcclBuilt();
// NCCL's version code this build links (e.g. 21805 for 2.18.5), or 0 without NCCL.
int NcclVersionCode();

// Copies device memory (a GPU collective's output into the caller's tensor).
Status CopyDeviceToDevice(void* dst, const void* src, int64_t bytes, int device);

}  // namespace kolo
