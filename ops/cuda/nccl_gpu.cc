// The GPU path: NCCL collectives on kolo's own stream per device, or on the
// callers' stream with stream-ordered completion (ops/gpu_launch.h), with the
// fusion buffer and the batched copy kernel or, for large grouped tensors, one
// NCCL group; a collective is done when its event fires, failed when its
// communicators (nccl_comm.h) report an error.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../adasum.h"
#include "../gpu.h"
#include "../gpu_launch.h"
#include "../object_pool.h"
#include "cuda_util.h"
#include "kernels.h"
#include "nccl_comm.h"

namespace kolo {
namespace {

struct DeviceState {
  explicit DeviceState(int device) : device(device), fusion(device) {}
  int device;
  Stream stream;
  DeviceBuffer fusion;
  // The last launch's end and stream: a launch on another stream waits for
  // it (WaitsForPreviousLaunch), the fusion buffer and the communicators
  // being shared.
  std::shared_ptr<Event> last_done;
  cudaStream_t last_stream = nullptr;
};

// Work in flight: done when `event` (from the device's pool) fires, failed
// when a communicator reports an asynchronous error first.
struct Pending {
  std::shared_ptr<Event> event;
  std::shared_ptr<CommState> comm;
  cudaStream_t stream = nullptr;  // where it ran
  int device = 0;                 // the null stream is the current device's
};

Result<ncclDataType_t> NcclType(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kBool:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kUInt16:
    case DataType::kInt16:
      break;
  }
  return Status::InvalidArgument(std::string(DataTypeName(dtype)) +
                                 " tensors cannot be reduced on the GPU: NCCL has no 16-bit "
                                 "integer type; cast to int32 first");
}

ncclRedOp_t NcclOp(DataType dtype, ReduceOp op) {
  if (dtype == DataType::kBool) {  // logical: or = max, and = min
    return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? ncclMin : ncclMax;
  }
  switch (op) {
    case ReduceOp::kAverage:
      return ncclAvg;
    case ReduceOp::kSum:
    case ReduceOp::kAdasum:  // within a host, Adasum's first step is a sum
      return ncclSum;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

std::vector<int64_t> Offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> off(sizes.size(), 0);
  for (size_t i = 1; i < sizes.size(); ++i) off[i] = off[i - 1] + sizes[i - 1];
  return off;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// Where an allreduce reduces: one tensor in its own output (copied there
// from its input), or else every tensor in the fusion buffer, a joined rank's
// parts as zeros, padded to a multiple of the host's ranks for a
// reduce-scatter within the host. `in` and `out` copy into and out of it.
struct AllreduceBuffer {
  char* data = nullptr;
  int64_t count = 0;  // elements reduced, padding included
  bool fused = false;
  std::vector<CopyJob> in, out;
};

// `host_ranks` > 0: fused, padded to a multiple of it (the hierarchical
// allreduce, Adasum).
Result<AllreduceBuffer> StageAllreduce(DeviceState& d, int host_ranks,
                                       const std::vector<GpuTensor>& tensors, size_t elem,
                                       cudaStream_t s) {
  AllreduceBuffer b;
  int64_t total = 0;
  bool joined = false;  // a joined rank takes part with zeros and has no tensor
  for (const GpuTensor& t : tensors) {
    total += t.count;
    joined |= t.input == nullptr;
  }
  b.fused = tensors.size() > 1 || joined || host_ranks > 0;
  if (!b.fused) {
    const GpuTensor& t = tensors[0];
    b.data = static_cast<char*>(t.output);
    b.count = total;
    if (t.output != t.input && total > 0) {
      KOLO_CUDA(cudaMemcpyAsync(t.output, t.input, total * elem, cudaMemcpyDeviceToDevice, s));
    }
    b.in = b.out = {CopyJob{b.data, b.data, total}};
    return b;
  }
  b.count = host_ranks > 0 ? (total + host_ranks - 1) / host_ranks * host_ranks : total;
  KOLO_ASSIGN_OR_RETURN(b.data, d.fusion.Reserve(std::max<int64_t>(b.count, 1) * elem));
  int64_t offset = 0;
  for (const GpuTensor& t : tensors) {
    char* slot = b.data + offset * elem;
    if (t.input != nullptr) {
      b.in.push_back(CopyJob{t.input, slot, t.count});
      b.out.push_back(CopyJob{slot, t.output, t.count});
    } else if (t.count > 0) {
      KOLO_CUDA(cudaMemsetAsync(slot, 0, t.count * elem, s));
    }
    offset += t.count;
  }
  if (b.count > total) {
    KOLO_CUDA(cudaMemsetAsync(b.data + total * elem, 0, (b.count - total) * elem, s));
  }
  return b;
}

// Reduces `count` elements of `buffer` in place: one allreduce, or with a
// hierarchy a reduce-scatter within the host, an allreduce of this rank's
// block across hosts and an allgather within the host.
Status AllreduceInPlace(const CommState& c, char* buffer, int64_t count, ncclDataType_t type,
                        ncclRedOp_t op, size_t elem, cudaStream_t s) {
  if (!c.hierarchical()) {
    KOLO_NCCL(c.flat.get(), AllReduce, buffer, buffer, count, type, op, c.flat.get(), s);
    return Status::OK();
  }
  const int64_t block = count / c.local_size;
  char* mine = buffer + c.local_rank * block * elem;
  KOLO_NCCL(c.local.get(), ReduceScatter, buffer, mine, block, type, op, c.local.get(), s);
  KOLO_NCCL(c.cross.get(), AllReduce, mine, mine, block, type, op, c.cross.get(), s);
  KOLO_NCCL(c.local.get(), AllGather, mine, buffer, block, type, c.local.get(), s);
  return Status::OK();
}

class NcclGpu : public Gpu {
 public:
  // The process sets' communicators (MakeComms) go before this, and so
  // before the streams their work runs on: the runtime destroys its sets
  // first.
  explicit NcclGpu(const GpuOptions& options) : options_(options) {}

  int DeviceCount() override {
    std::call_once(count_once_, [this] {
      cudaError_t e = cudaGetDeviceCount(&device_count_);
      if (e != cudaSuccess) {
        device_count_ = 0;
        no_device_why_ = cudaGetErrorString(e);
        cudaGetLastError();  // clear the sticky error state of the runtime API
      }
    });
    return device_count_;
  }

  Status CheckDevice(int device, DataType dtype) override {
    if (DeviceCount() == 0) {
      return Status::InvalidArgument(
          "the tensor is on " + DeviceName(device) +
          ", but this process has no usable CUDA device (" +
          (no_device_why_.empty() ? std::string("none found") : no_device_why_) +
          "); move the tensor to the CPU or run on a machine with a GPU and its driver");
    }
    if (device < 0 || device >= device_count_) {
      return Status::InvalidArgument("the tensor is on " + DeviceName(device) +
                                     ", but this process sees " + std::to_string(device_count_) +
                                     " CUDA device(s) (check CUDA_VISIBLE_DEVICES)");
    }
    Result<ncclDataType_t> type = NcclType(dtype);
    return type.ok() ? Status::OK() : type.status();
  }

  Result<std::shared_ptr<void>> MarkReady(int device, void* stream) override {
    DeviceGuard guard(device);
    KOLO_RETURN_IF_ERROR(NotCapturing(stream));
    KOLO_ASSIGN_OR_RETURN(std::shared_ptr<Event> event, Events(device).Take());
    KOLO_CUDA(cudaEventRecord(event->get(), static_cast<cudaStream_t>(stream)));
    return std::shared_ptr<void>(std::move(event));
  }

  Status CheckStream(int device, void* stream) override {
    DeviceGuard guard(device);
    return NotCapturing(stream);
  }

  // CheckStream's test, for a caller that made the stream's device current.
  static Status NotCapturing(void* stream) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    KOLO_CUDA(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &capture));
    if (capture == cudaStreamCaptureStatusNone) return Status::OK();
    return Status::InvalidArgument(
        "a kolo collective was called while its CUDA stream is being captured into a CUDA graph "
        "(torch.cuda.graph / make_graphed_callables): kolo's ranks agree on every collective "
        "on the host at each call, which a replayed graph would skip; call the collective "
        "outside the captured region (the gradients' allreduce after the graph's replay)");
  }

  std::unique_ptr<GpuComms> MakeComms(MPI_Comm mpi) override {
    return std::make_unique<NcclSetComms>(mpi, options_.hierarchical);
  }

  Result<Token> Allreduce(GpuComms& comms, int device, const std::vector<GpuTensor>& tensors,
                          DataType dtype, ReduceOp op, double prescale, double postscale) override {
    if (op == ReduceOp::kAdasum) return Adasum(comms, device, tensors, dtype, prescale, postscale);
    KOLO_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(comms, device, tensors));
    auto& [d, c, s] = l;
    const size_t elem = DataTypeSize(dtype);
    if (AsGroup(*c, tensors, elem)) {
      KOLO_RETURN_IF_ERROR(
          AllreduceGroup(*c, tensors, dtype, type, NcclOp(dtype, op), prescale, postscale, s));
      return Finish(*d, std::move(c), s);
    }
    KOLO_ASSIGN_OR_RETURN(
        AllreduceBuffer b,
        StageAllreduce(*d, c->hierarchical() ? c->local_size : 0, tensors, elem, s));
    // A tensor reduced in its own output is scaled in place only when asked;
    // fused tensors are copied in and out, scaled on the way, in any case.
    if (b.fused || prescale != 1.0) KOLO_CUDA(BatchedCopy(b.in, dtype, prescale, s));
    KOLO_RETURN_IF_ERROR(AllreduceInPlace(*c, b.data, b.count, type, NcclOp(dtype, op), elem, s));
    if (b.fused || postscale != 1.0) KOLO_CUDA(BatchedCopy(b.out, dtype, postscale, s));
    return Finish(*d, std::move(c), s);
  }

  Result<Token> Broadcast(GpuComms& comms, int device, const GpuTensor& tensor, int64_t bytes,
                          int root) override {
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(comms, device, {tensor}));
    auto& [d, c, s] = l;
    KOLO_NCCL(c->flat.get(), Broadcast, tensor.output, tensor.output, bytes, ncclUint8, root,
              c->flat.get(), s);
    return Finish(*d, std::move(c), s);
  }

  Result<Token> Allgatherv(GpuComms& comms, int device, const GpuTensor& tensor, int64_t send_bytes,
                           const std::vector<int64_t>& recv_bytes, GpuOutput* out) override {
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(comms, device, {tensor}));
    auto& [d, c, s] = l;
    KOLO_ASSIGN_OR_RETURN(*out, Allocate(device, Sum(recv_bytes)));
    char* dst = static_cast<char*>(out->data.get());
    const bool even = std::all_of(recv_bytes.begin(), recv_bytes.end(),
                                  [&](int64_t b) { return b == recv_bytes[0]; });
    if (even) {
      KOLO_NCCL(c->flat.get(), AllGather, tensor.input, dst, send_bytes, ncclUint8, c->flat.get(),
                s);
    } else {
      // Different first dimensions: one broadcast per rank, in one group.
      const std::vector<int64_t> off = Offsets(recv_bytes);
      KOLO_NCCL(nullptr, GroupStart);
      for (int r = 0; r < c->size; ++r) {
        if (recv_bytes[r] == 0) continue;
        const void* src = r == c->rank ? tensor.input : dst + off[r];
        ncclResult_t res =
            Nccl().Broadcast(src, dst + off[r], recv_bytes[r], ncclUint8, r, c->flat.get(), s);
        if (res != ncclSuccess) {
          Nccl().GroupEnd();
          return NcclStatus(res, "ncclBroadcast", c->flat.get());
        }
      }
      KOLO_NCCL(c->flat.get(), GroupEnd);
    }
    return Finish(*d, std::move(c), s);
  }

  Result<Token> Alltoallv(GpuComms& comms, int device, const GpuTensor& tensor,
                          const std::vector<int64_t>& send_bytes,
                          const std::vector<int64_t>& recv_bytes, GpuOutput* out) override {
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(comms, device, {tensor}));
    auto& [d, c, s] = l;
    KOLO_ASSIGN_OR_RETURN(*out, Allocate(device, Sum(recv_bytes)));
    const char* src = static_cast<const char*>(tensor.input);
    char* dst = static_cast<char*>(out->data.get());
    const std::vector<int64_t> soff = Offsets(send_bytes), roff = Offsets(recv_bytes);
    KOLO_NCCL(nullptr, GroupStart);
    for (int p = 0; p < c->size; ++p) {
      ncclResult_t res = ncclSuccess;
      if (send_bytes[p] > 0) {
        res = Nccl().Send(src + soff[p], send_bytes[p], ncclUint8, p, c->flat.get(), s);
      }
      if (res == ncclSuccess && recv_bytes[p] > 0) {
        res = Nccl().Recv(dst + roff[p], recv_bytes[p], ncclUint8, p, c->flat.get(), s);
      }
      if (res != ncclSuccess) {
        Nccl().GroupEnd();
        return NcclStatus(res, "ncclSend/ncclRecv", c->flat.get());
      }
    }
    KOLO_NCCL(c->flat.get(), GroupEnd);
    return Finish(*d, std::move(c), s);
  }

  Result<Token> ReduceScatter(GpuComms& comms, int device, const GpuTensor& tensor,
                              const std::vector<int64_t>& counts, DataType dtype, ReduceOp op,
                              double prescale, double postscale, GpuOutput* out) override {
    KOLO_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(comms, device, {tensor}));
    auto& [d, c, s] = l;
    const size_t elem = DataTypeSize(dtype);
    const int64_t total = Sum(counts);
    // The input stays untouched: reduce a scaled copy.
    KOLO_ASSIGN_OR_RETURN(char* send, d->fusion.Reserve(std::max<int64_t>(total, 1) * elem));
    KOLO_CUDA(BatchedCopy({CopyJob{tensor.input, send, total}}, dtype, prescale, s));
    const int64_t mine = counts[c->rank];
    KOLO_ASSIGN_OR_RETURN(*out, Allocate(device, mine * static_cast<int64_t>(elem)));
    char* dst = static_cast<char*>(out->data.get());
    const ncclRedOp_t nccl_op = NcclOp(dtype, op);
    const bool even =
        std::all_of(counts.begin(), counts.end(), [&](int64_t n) { return n == counts[0]; });
    if (even) {
      KOLO_NCCL(c->flat.get(), ReduceScatter, send, dst, mine, type, nccl_op, c->flat.get(), s);
    } else {
      // Uneven blocks: one reduce per block to its owner, in one group.
      const std::vector<int64_t> off = Offsets(counts);
      KOLO_NCCL(nullptr, GroupStart);
      for (int r = 0; r < c->size; ++r) {
        if (counts[r] == 0) continue;
        char* block = send + off[r] * elem;
        ncclResult_t res = Nccl().Reduce(block, r == c->rank ? dst : block, counts[r], type,
                                         nccl_op, r, c->flat.get(), s);
        if (res != ncclSuccess) {
          Nccl().GroupEnd();
          return NcclStatus(res, "ncclReduce", c->flat.get());
        }
      }
      KOLO_NCCL(c->flat.get(), GroupEnd);
    }
    if (postscale != 1.0) KOLO_CUDA(BatchedCopy({CopyJob{dst, dst, mine}}, dtype, postscale, s));
    return Finish(*d, std::move(c), s);
  }

  Result<bool> Poll(const Token& token) override {
    auto* p = static_cast<Pending*>(token.get());
    cudaError_t e = cudaEventQuery(p->event->get());
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return CudaStatus(e, "cudaEventQuery");
    KOLO_RETURN_IF_ERROR(p->comm->CheckAsyncErrors());
    return false;
  }

  Status OrderAfter(const Token& token, void* stream) override {
    auto* p = static_cast<Pending*>(token.get());
    const auto s = static_cast<cudaStream_t>(stream);
    if (s == p->stream) return Status::OK();
    DeviceGuard guard(p->device);
    return CudaStatus(cudaStreamWaitEvent(s, p->event->get(), 0), "cudaStreamWaitEvent");
  }

 private:
  // Adasum as Horovod runs it on GPUs: the tensors of the host's ranks summed
  // (ncclReduceScatter: each rank a block of the fused buffer), Adasum of
  // each block across hosts on host memory (ops/adasum.h: its partners are
  // the ranks with this local rank, and the dot products of a tensor are
  // summed over the host's blocks too), then ncclAllGather within the host.
  // The host's sum is divided by its number of ranks, as Horovod's
  // postscale_factor / local_size: Adasum combines the hosts' averages.
  Result<Token> Adasum(GpuComms& comms, int device, const std::vector<GpuTensor>& tensors,
                       DataType dtype, double prescale, double postscale) {
    KOLO_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(comms, device, tensors));
    auto& [d, c, s] = l;
    KOLO_RETURN_IF_ERROR(static_cast<NcclSetComms&>(comms).PrepareAdasum(*c, device));
    const Hierarchy* hosts = c->host_mpi.get();
    ncclComm_t host = hosts != nullptr ? c->host.get() : c->flat.get();
    const int host_ranks = hosts != nullptr ? hosts->local_size : c->size;
    const int host_rank = hosts != nullptr ? hosts->local_rank : c->rank;
    const size_t elem = DataTypeSize(dtype);
    KOLO_ASSIGN_OR_RETURN(AllreduceBuffer b, StageAllreduce(*d, host_ranks, tensors, elem, s));
    KOLO_CUDA(BatchedCopy(b.in, dtype, prescale, s));
    const int64_t block = b.count / host_ranks;
    char* mine = b.data + host_rank * block * elem;
    KOLO_NCCL(host, ReduceScatter, b.data, mine, block, type, ncclSum, host, s);
    if (hosts != nullptr) {
      staging_.resize(static_cast<size_t>(block) * elem);
      KOLO_CUDA(cudaMemcpyAsync(staging_.data(), mine, block * elem, cudaMemcpyDeviceToHost, s));
      KOLO_CUDA(cudaStreamSynchronize(s));
      adasum::Comms across;
      across.pairs = hosts->cross.get();
      across.slices = hosts->local.get();
      KOLO_RETURN_IF_ERROR(adasum::Allreduce(across, staging_.data(),
                                             TensorCountsIn(tensors, host_rank * block, block),
                                             dtype, &scratch_));
      KOLO_CUDA(cudaMemcpyAsync(mine, staging_.data(), block * elem, cudaMemcpyHostToDevice, s));
    }
    KOLO_NCCL(host, AllGather, mine, b.data, block, type, host, s);
    KOLO_CUDA(BatchedCopy(b.out, dtype, postscale / host_ranks, s));
    return Finish(*d, std::move(c), s);
  }

  // Elements of each tensor (laid out one after the other) in [begin, begin + count).
  static std::vector<int64_t> TensorCountsIn(const std::vector<GpuTensor>& tensors, int64_t begin,
                                             int64_t count) {
    std::vector<int64_t> out;
    int64_t start = 0;
    for (const GpuTensor& t : tensors) {
      const int64_t lo = std::max(start, begin), hi = std::min(start + t.count, begin + count);
      out.push_back(std::max<int64_t>(hi - lo, 0));
      start += t.count;
    }
    return out;
  }

  Result<DeviceState*> Device(int device) {
    auto it = devices_.find(device);
    if (it != devices_.end()) return it->second.get();
    DeviceGuard guard(device);
    auto state = std::make_unique<DeviceState>(device);
    KOLO_CUDA(cudaStreamCreateWithFlags(state->stream.out(), cudaStreamNonBlocking));
    DeviceState* raw = state.get();
    devices_[device] = std::move(state);
    return raw;
  }

  static Result<GpuOutput> Allocate(int device, int64_t bytes) {
    DeviceGuard guard(device);
    void* p = nullptr;
    KOLO_CUDA(cudaMalloc(&p, static_cast<size_t>(std::max<int64_t>(bytes, 1))));
    GpuOutput out;
    out.bytes = bytes;
    out.data = std::shared_ptr<void>(p, [device](void* q) {
      DeviceGuard g(device);
      cudaFree(q);
    });
    return out;
  }

  // What every collective starts from: the device's state, the set's
  // communicators, and the stream it runs on (ChooseLaunchStream), which now
  // comes after the device's previous launch and the tensors' producers. The
  // caller holds a DeviceGuard for `device`.
  struct Launch {
    DeviceState* device;
    std::shared_ptr<CommState> comm;
    cudaStream_t stream;
  };
  Result<Launch> Begin(GpuComms& comms, int device, const std::vector<GpuTensor>& tensors) {
    KOLO_ASSIGN_OR_RETURN(DeviceState * d, Device(device));
    // `comms` came from MakeComms above: this Gpu's own kind.
    KOLO_ASSIGN_OR_RETURN(std::shared_ptr<CommState> c,
                          static_cast<NcclSetComms&>(comms).Get(device));
    std::vector<void*> streams;  // of the tensors with data (a joined rank's have none)
    for (const GpuTensor& t : tensors) {
      if (t.input != nullptr) streams.push_back(t.stream);
    }
    const LaunchStream where = ChooseLaunchStream(options_.stream_ordered, streams);
    const cudaStream_t s =
        where.callers ? static_cast<cudaStream_t>(where.stream) : d->stream.get();
    if (WaitsForPreviousLaunch(d->last_done != nullptr, d->last_stream, s)) {
      KOLO_CUDA(cudaStreamWaitEvent(s, d->last_done->get(), 0));
    }
    if (!where.callers) {
      // After the producers: their ready events, or with stream-ordered
      // completion (which records none when asked) an event per stream now.
      std::vector<void*> recorded;
      for (const GpuTensor& t : tensors) {
        if (t.ready) {
          KOLO_CUDA(cudaStreamWaitEvent(s, static_cast<Event*>(t.ready.get())->get(), 0));
          continue;
        }
        if (t.input == nullptr ||
            std::find(recorded.begin(), recorded.end(), t.stream) != recorded.end()) {
          continue;
        }
        recorded.push_back(t.stream);
        KOLO_ASSIGN_OR_RETURN(std::shared_ptr<Event> now, Events(device).Take());
        KOLO_CUDA(cudaEventRecord(now->get(), static_cast<cudaStream_t>(t.stream)));
        KOLO_CUDA(cudaStreamWaitEvent(s, now->get(), 0));
      }
    }
    return Launch{d, std::move(c), s};
  }

  Result<Token> Finish(DeviceState& d, std::shared_ptr<CommState> comm, cudaStream_t s) {
    auto p = std::make_shared<Pending>();
    KOLO_ASSIGN_OR_RETURN(p->event, Events(d.device).Take());
    KOLO_CUDA(cudaEventRecord(p->event->get(), s));
    p->comm = std::move(comm);
    p->stream = s;
    p->device = d.device;
    d.last_done = p->event;
    d.last_stream = s;
    return Token(p);
  }

  // Whether this allreduce goes as one NCCL group (AllreduceAsNcclGroup).
  bool AsGroup(const CommState& c, const std::vector<GpuTensor>& tensors, size_t elem) const {
    std::vector<int64_t> counts;
    bool joined = false;
    for (const GpuTensor& t : tensors) {
      counts.push_back(t.count);
      joined |= t.input == nullptr;
    }
    return AllreduceAsNcclGroup(counts, elem, options_.group_min_bytes, c.hierarchical(), joined);
  }

  // Each tensor reduced from its input into its output, the allreduces in one
  // NCCL group (one launch): no fusion buffer. A prescale is applied on a copy
  // into the output first, a postscale to the output after.
  static Status AllreduceGroup(const CommState& c, const std::vector<GpuTensor>& tensors,
                               DataType dtype, ncclDataType_t type, ncclRedOp_t op, double prescale,
                               double postscale, cudaStream_t s) {
    const bool scaled_in = prescale != 1.0;
    if (scaled_in) {
      std::vector<CopyJob> in;
      for (const GpuTensor& t : tensors) in.push_back(CopyJob{t.input, t.output, t.count});
      KOLO_CUDA(BatchedCopy(in, dtype, prescale, s));
    }
    KOLO_NCCL(nullptr, GroupStart);
    for (const GpuTensor& t : tensors) {
      const void* src = scaled_in ? t.output : t.input;
      ncclResult_t res =
          Nccl().AllReduce(src, t.output, static_cast<size_t>(t.count), type, op, c.flat.get(), s);
      if (res != ncclSuccess) {
        Nccl().GroupEnd();
        return NcclStatus(res, "ncclAllReduce", c.flat.get());
      }
    }
    KOLO_NCCL(c.flat.get(), GroupEnd);
    if (postscale != 1.0) {
      std::vector<CopyJob> out;
      for (const GpuTensor& t : tensors) out.push_back(CopyJob{t.output, t.output, t.count});
      KOLO_CUDA(BatchedCopy(out, dtype, postscale, s));
    }
    return Status::OK();
  }

  // The device's events, made on first use and used again (object_pool.h).
  // Callers' threads (MarkReady) and the thread that runs the cycles share them.
  ObjectPool<Event>& Events(int device) EXCLUDES(pools_mu_) {
    MutexLock lock(&pools_mu_);
    std::unique_ptr<ObjectPool<Event>>& pool = event_pools_[device];
    if (!pool) {
      pool = std::make_unique<ObjectPool<Event>>([device](Event* e) {
        DeviceGuard guard(device);
        return CreateEvent(e);
      });
    }
    return *pool;
  }

  std::once_flag count_once_;
  int device_count_ = 0;
  std::string no_device_why_;
  GpuOptions options_;
  std::map<int, std::unique_ptr<DeviceState>> devices_;
  Mutex pools_mu_;
  // A pool is never removed, so a reference to one stays valid without the lock.
  std::map<int, std::unique_ptr<ObjectPool<Event>>> event_pools_ GUARDED_BY(pools_mu_);
  // Adasum across hosts: this rank's block on the host, and the partner's halves.
  std::vector<uint8_t> staging_, scratch_;
};

}  // namespace

std::unique_ptr<Gpu> MakeGpu(const GpuOptions& options) {
  return std::make_unique<NcclGpu>(options);
}

bool NcclBuilt() { return true; }

// The headers' version, as Horovod's nccl_built(): asking the library would
// load it, which only a GPU collective should do (nccl_api.h).
int NcclVersionCode() { return NCCL_VERSION_CODE; }

Status CopyDeviceToDevice(void* dst, const void* src, int64_t bytes, int device) {
  if (bytes == 0) return Status::OK();
  DeviceGuard guard(device);
  return CudaStatus(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice),
                    "cudaMemcpy");
}

}  // namespace kolo
