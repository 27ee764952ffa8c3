// The GPU path: NCCL collectives on kolo's own stream per device, the fusion
// buffer and batched copy kernel, communicators per (process set, device)
// made on first use, and asynchronous error checks.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "../mpi.h"
#include "../gpu.h"
#include "kernels.h"

namespace kolo {
namespace {

Status CudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return Status::OK();
  return Status::Internal(std::string(call) + " failed: " + cudaGetErrorString(e));
}

Status NcclStatus(ncclResult_t r, const char* call, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) return Status::OK();
  std::string m = std::string(call) + " failed: " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') m += " (" + std::string(last) + ")";
  return Status::Internal(m);
}

#define KOLO_CUDA(call) KOLO_RETURN_IF_ERROR(CudaStatus((call), #call))
#define KOLO_NCCL(call, comm) KOLO_RETURN_IF_ERROR(NcclStatus((call), #call, comm))

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

Status CreateEvent(Event* event) {
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

// An owned NCCL communicator: destroyed normally, aborted once broken (a
// broken communicator may have operations that never finish).
class NcclComm {
 public:
  NcclComm() = default;
  ~NcclComm() {
    if (comm_ == nullptr) return;
    if (broken_) {
      ncclCommAbort(comm_);
    } else {
      // Flush what was issued (blocking communicator: returns when quiescent),
      // then free the local resources.
      ncclCommFinalize(comm_);
      ncclCommDestroy(comm_);
    }
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  ncclComm_t* out() { return &comm_; }
  explicit operator bool() const { return comm_ != nullptr; }
  void Abort() {
    if (comm_ != nullptr && !broken_) ncclCommAbort(comm_);
    comm_ = nullptr;
    broken_ = true;
  }

 private:
  ncclComm_t comm_ = nullptr;
  bool broken_ = false;
};

// The communicators of one (process set, device).
struct CommState {
  int rank = 0, size = 1;
  NcclComm flat;
  // Hierarchical allreduce: within the host and across hosts (null otherwise).
  NcclComm local, cross;
  int local_rank = 0, local_size = 1;
  std::string broken;  // why the communicator was aborted; empty while healthy

  bool hierarchical() const { return static_cast<bool>(local); }
};

struct DeviceState {
  explicit DeviceState(int device) : device(device), fusion(device) {}
  int device;
  Stream stream;
  DeviceBuffer fusion;
};

// Work in flight: done when `event` fires, failed when a communicator
// reports an asynchronous error first.
struct Pending {
  Event event;
  std::shared_ptr<CommState> comm;
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

class NcclGpu : public Gpu {
 public:
  explicit NcclGpu(bool hierarchical) : hierarchical_(hierarchical) {}

  ~NcclGpu() override {
    comms_.clear();  // communicators before the streams their work runs on
    devices_.clear();
  }

  bool built() const override { return true; }

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
    auto event = std::make_shared<Event>();
    KOLO_RETURN_IF_ERROR(CreateEvent(event.get()));
    KOLO_CUDA(cudaEventRecord(event->get(), static_cast<cudaStream_t>(stream)));
    return std::shared_ptr<void>(event);
  }

  Result<Token> Allreduce(MPI_Comm mpi, int device, const std::vector<GpuTensor>& tensors,
                          DataType dtype, ReduceOp op, double prescale, double postscale) override {
    KOLO_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(mpi, device, tensors));
    auto& [d, c, s] = l;
    const size_t elem = DataTypeSize(dtype);
    const ncclRedOp_t nccl_op = NcclOp(dtype, op);
    int64_t total = 0;
    bool joined = false;  // a joined rank takes part with zeros and has no tensor
    for (const GpuTensor& t : tensors) {
      total += t.count;
      joined |= t.input == nullptr;
    }
    const bool fuse = tensors.size() > 1 || joined || c->hierarchical();
    char* buffer;
    std::vector<CopyJob> in, out;
    if (!fuse) {
      const GpuTensor& t = tensors[0];
      buffer = static_cast<char*>(t.output);
      if (t.output != t.input && total > 0) {
        KOLO_CUDA(cudaMemcpyAsync(t.output, t.input, total * elem, cudaMemcpyDeviceToDevice, s));
      }
      in = out = {CopyJob{buffer, buffer, total}};
      if (prescale != 1.0) KOLO_CUDA(BatchedCopy(in, dtype, prescale, s));
    } else {
      const int64_t padded =
          c->hierarchical() ? (total + c->local_size - 1) / c->local_size * c->local_size : total;
      KOLO_ASSIGN_OR_RETURN(buffer, d->fusion.Reserve(std::max<int64_t>(padded, 1) * elem));
      int64_t offset = 0;
      for (const GpuTensor& t : tensors) {
        char* slot = buffer + offset * elem;
        if (t.input != nullptr) {
          in.push_back(CopyJob{t.input, slot, t.count});
          out.push_back(CopyJob{slot, t.output, t.count});
        } else if (t.count > 0) {
          KOLO_CUDA(cudaMemsetAsync(slot, 0, t.count * elem, s));
        }
        offset += t.count;
      }
      if (padded > total) {
        KOLO_CUDA(cudaMemsetAsync(buffer + total * elem, 0, (padded - total) * elem, s));
      }
      KOLO_CUDA(BatchedCopy(in, dtype, prescale, s));
      total = padded;
    }
    if (c->hierarchical()) {
      const int64_t block = total / c->local_size;
      char* mine = buffer + c->local_rank * block * elem;
      KOLO_NCCL(ncclReduceScatter(buffer, mine, block, type, nccl_op, c->local.get(), s),
                c->local.get());
      KOLO_NCCL(ncclAllReduce(mine, mine, block, type, nccl_op, c->cross.get(), s), c->cross.get());
      KOLO_NCCL(ncclAllGather(mine, buffer, block, type, c->local.get(), s), c->local.get());
    } else {
      KOLO_NCCL(ncclAllReduce(buffer, buffer, total, type, nccl_op, c->flat.get(), s),
                c->flat.get());
    }
    if (!fuse) {
      if (postscale != 1.0) KOLO_CUDA(BatchedCopy(out, dtype, postscale, s));
    } else {
      KOLO_CUDA(BatchedCopy(out, dtype, postscale, s));
    }
    return Finish(*d, std::move(c));
  }

  Result<Token> Broadcast(MPI_Comm mpi, int device, const GpuTensor& tensor, int64_t bytes,
                          int root) override {
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(mpi, device, {tensor}));
    auto& [d, c, s] = l;
    KOLO_NCCL(ncclBroadcast(tensor.output, tensor.output, bytes, ncclUint8, root, c->flat.get(), s),
              c->flat.get());
    return Finish(*d, std::move(c));
  }

  Result<Token> Allgatherv(MPI_Comm mpi, int device, const GpuTensor& tensor, int64_t send_bytes,
                           const std::vector<int64_t>& recv_bytes, GpuOutput* out) override {
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(mpi, device, {tensor}));
    auto& [d, c, s] = l;
    KOLO_ASSIGN_OR_RETURN(*out, Allocate(device, Sum(recv_bytes)));
    char* dst = static_cast<char*>(out->data.get());
    const bool even = std::all_of(recv_bytes.begin(), recv_bytes.end(),
                                  [&](int64_t b) { return b == recv_bytes[0]; });
    if (even) {
      KOLO_NCCL(ncclAllGather(tensor.input, dst, send_bytes, ncclUint8, c->flat.get(), s),
                c->flat.get());
    } else {
      // Different first dimensions: one broadcast per rank, in one group.
      const std::vector<int64_t> off = Offsets(recv_bytes);
      KOLO_NCCL(ncclGroupStart(), nullptr);
      for (int r = 0; r < c->size; ++r) {
        if (recv_bytes[r] == 0) continue;
        const void* src = r == c->rank ? tensor.input : dst + off[r];
        ncclResult_t res =
            ncclBroadcast(src, dst + off[r], recv_bytes[r], ncclUint8, r, c->flat.get(), s);
        if (res != ncclSuccess) {
          ncclGroupEnd();
          return NcclStatus(res, "ncclBroadcast", c->flat.get());
        }
      }
      KOLO_NCCL(ncclGroupEnd(), c->flat.get());
    }
    return Finish(*d, std::move(c));
  }

  Result<Token> Alltoallv(MPI_Comm mpi, int device, const GpuTensor& tensor,
                          const std::vector<int64_t>& send_bytes,
                          const std::vector<int64_t>& recv_bytes, GpuOutput* out) override {
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(mpi, device, {tensor}));
    auto& [d, c, s] = l;
    KOLO_ASSIGN_OR_RETURN(*out, Allocate(device, Sum(recv_bytes)));
    const char* src = static_cast<const char*>(tensor.input);
    char* dst = static_cast<char*>(out->data.get());
    const std::vector<int64_t> soff = Offsets(send_bytes), roff = Offsets(recv_bytes);
    KOLO_NCCL(ncclGroupStart(), nullptr);
    for (int p = 0; p < c->size; ++p) {
      ncclResult_t res = ncclSuccess;
      if (send_bytes[p] > 0) {
        res = ncclSend(src + soff[p], send_bytes[p], ncclUint8, p, c->flat.get(), s);
      }
      if (res == ncclSuccess && recv_bytes[p] > 0) {
        res = ncclRecv(dst + roff[p], recv_bytes[p], ncclUint8, p, c->flat.get(), s);
      }
      if (res != ncclSuccess) {
        ncclGroupEnd();
        return NcclStatus(res, "ncclSend/ncclRecv", c->flat.get());
      }
    }
    KOLO_NCCL(ncclGroupEnd(), c->flat.get());
    return Finish(*d, std::move(c));
  }

  Result<Token> ReduceScatter(MPI_Comm mpi, int device, const GpuTensor& tensor,
                              const std::vector<int64_t>& counts, DataType dtype, ReduceOp op,
                              double prescale, double postscale, GpuOutput* out) override {
    KOLO_ASSIGN_OR_RETURN(ncclDataType_t type, NcclType(dtype));
    DeviceGuard guard(device);
    KOLO_ASSIGN_OR_RETURN(Launch l, Begin(mpi, device, {tensor}));
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
      KOLO_NCCL(ncclReduceScatter(send, dst, mine, type, nccl_op, c->flat.get(), s), c->flat.get());
    } else {
      // Uneven blocks: one reduce per block to its owner, in one group.
      const std::vector<int64_t> off = Offsets(counts);
      KOLO_NCCL(ncclGroupStart(), nullptr);
      for (int r = 0; r < c->size; ++r) {
        if (counts[r] == 0) continue;
        char* block = send + off[r] * elem;
        ncclResult_t res = ncclReduce(block, r == c->rank ? dst : block, counts[r], type, nccl_op,
                                      r, c->flat.get(), s);
        if (res != ncclSuccess) {
          ncclGroupEnd();
          return NcclStatus(res, "ncclReduce", c->flat.get());
        }
      }
      KOLO_NCCL(ncclGroupEnd(), c->flat.get());
    }
    if (postscale != 1.0) KOLO_CUDA(BatchedCopy({CopyJob{dst, dst, mine}}, dtype, postscale, s));
    return Finish(*d, std::move(c));
  }

  Result<bool> Poll(const Token& token) override {
    auto* p = static_cast<Pending*>(token.get());
    cudaError_t e = cudaEventQuery(p->event.get());
    if (e == cudaSuccess) return true;
    if (e != cudaErrorNotReady) return CudaStatus(e, "cudaEventQuery");
    CommState& c = *p->comm;
    if (!c.broken.empty()) return Status::Internal(c.broken);
    for (NcclComm* comm : {&c.flat, &c.local, &c.cross}) {
      if (!*comm) continue;
      ncclResult_t async = ncclSuccess;
      ncclResult_t r = ncclCommGetAsyncError(comm->get(), &async);
      if (r == ncclSuccess && (async == ncclSuccess || async == ncclInProgress)) continue;
      Status why =
          NcclStatus(r != ncclSuccess ? r : async, "NCCL (asynchronous error)", comm->get());
      c.broken = why.message() + "; the NCCL communicator was aborted, restart the job";
      c.flat.Abort();
      c.local.Abort();
      c.cross.Abort();
      return Status::Internal(c.broken);
    }
    return false;
  }

  void Forget(MPI_Comm mpi) override {
    for (auto it = comms_.begin(); it != comms_.end();) {
      it = it->first.first == mpi ? comms_.erase(it) : std::next(it);
    }
  }

 private:
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

  Result<std::shared_ptr<CommState>> Comm(MPI_Comm mpi, int device) {
    auto key = std::make_pair(mpi, device);
    auto it = comms_.find(key);
    if (it != comms_.end()) {
      if (!it->second->broken.empty()) return Status::Internal(it->second->broken);
      return it->second;
    }
    auto c = std::make_shared<CommState>();
    MPI_Comm_rank(mpi, &c->rank);
    MPI_Comm_size(mpi, &c->size);
    KOLO_RETURN_IF_ERROR(CheckOneGpuPerRank(mpi, device, c->size));
    KOLO_RETURN_IF_ERROR(InitComm(mpi, device, &c->flat));
    if (hierarchical_) {
      std::string why_not;
      KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Hierarchy> h, Hierarchy::Create(mpi, &why_not));
      if (h) {
        c->local_rank = h->local_rank;
        c->local_size = h->local_size;
        KOLO_RETURN_IF_ERROR(InitComm(h->local.get(), device, &c->local));
        KOLO_RETURN_IF_ERROR(InitComm(h->cross.get(), device, &c->cross));
      }
    }
    comms_[key] = c;
    return c;
  }

  // NCCL refuses two ranks of one communicator on one GPU; say so first,
  // naming them, on every rank (the check's data is the same everywhere).
  static Status CheckOneGpuPerRank(MPI_Comm mpi, int device, int size) {
    struct Who {
      char host[64];
      char bus[32];
    };
    Who me{};
    gethostname(me.host, sizeof(me.host) - 1);
    KOLO_CUDA(cudaDeviceGetPCIBusId(me.bus, sizeof(me.bus), device));
    std::vector<Who> all(size);
    KOLO_RETURN_IF_ERROR(
        MpiStatus(MPI_Allgather(&me, sizeof(Who), MPI_BYTE, all.data(), sizeof(Who), MPI_BYTE, mpi),
                  "MPI_Allgather"));
    for (int i = 0; i < size; ++i) {
      for (int j = i + 1; j < size; ++j) {
        if (std::strcmp(all[i].host, all[j].host) != 0 ||
            std::strcmp(all[i].bus, all[j].bus) != 0) {
          continue;
        }
        return Status::InvalidArgument(
            "ranks " + std::to_string(i) + " and " + std::to_string(j) +
            " of this process set both use the GPU at PCI " + all[i].bus + " on host " +
            all[i].host +
            "; NCCL needs one GPU per rank. Start with `kolorun --pin-gpus` (one GPU per local "
            "rank), or call torch.cuda.set_device(kolo.local_rank()) before using the GPU");
      }
    }
    return Status::OK();
  }

  static Status InitComm(MPI_Comm mpi, int device, NcclComm* out) {
    int rank = 0, size = 1;
    MPI_Comm_rank(mpi, &rank);
    MPI_Comm_size(mpi, &size);
    struct {
      int ok;
      ncclUniqueId id;
    } msg{};
    if (rank == 0) msg.ok = ncclGetUniqueId(&msg.id) == ncclSuccess ? 1 : 0;
    KOLO_RETURN_IF_ERROR(
        MpiStatus(MPI_Bcast(&msg, sizeof(msg), MPI_BYTE, 0, mpi), "MPI_Bcast(ncclUniqueId)"));
    if (!msg.ok) return Status::Internal("ncclGetUniqueId failed on the set's rank 0");
    DeviceGuard guard(device);
    return NcclStatus(ncclCommInitRank(out->out(), size, msg.id, rank), "ncclCommInitRank");
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
  // communicators, and kolo's stream, which now waits for the tensors'
  // ready events. The caller holds a DeviceGuard for `device`.
  struct Launch {
    DeviceState* device;
    std::shared_ptr<CommState> comm;
    cudaStream_t stream;
  };
  Result<Launch> Begin(MPI_Comm mpi, int device, const std::vector<GpuTensor>& tensors) {
    KOLO_ASSIGN_OR_RETURN(DeviceState * d, Device(device));
    KOLO_ASSIGN_OR_RETURN(std::shared_ptr<CommState> c, Comm(mpi, device));
    for (const GpuTensor& t : tensors) {
      if (!t.ready) continue;
      KOLO_CUDA(cudaStreamWaitEvent(d->stream.get(), static_cast<Event*>(t.ready.get())->get(), 0));
    }
    return Launch{d, std::move(c), d->stream.get()};
  }

  static Result<Token> Finish(DeviceState& d, std::shared_ptr<CommState> comm) {
    auto p = std::make_shared<Pending>();
    KOLO_RETURN_IF_ERROR(CreateEvent(&p->event));
    KOLO_CUDA(cudaEventRecord(p->event.get(), d.stream.get()));
    p->comm = std::move(comm);
    return Token(p);
  }

  bool hierarchical_;
  std::once_flag count_once_;
  int device_count_ = 0;
  std::string no_device_why_;
  std::map<int, std::unique_ptr<DeviceState>> devices_;
  std::map<std::pair<MPI_Comm, int>, std::shared_ptr<CommState>> comms_;
};

}  // namespace

std::unique_ptr<Gpu> MakeGpu(bool hierarchical) { return std::make_unique<NcclGpu>(hierarchical); }

int NcclVersionCode() {
  int version = 0;
  return ncclGetVersion(&version) == ncclSuccess ? version : NCCL_VERSION_CODE;
}

Status CopyDeviceToDevice(void* dst, const void* src, int64_t bytes, int device) {
  if (bytes == 0) return Status::OK();
  DeviceGuard guard(device);
  return CudaStatus(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice),
                    "cudaMemcpy");
}

}  // namespace kolo
