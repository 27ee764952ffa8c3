// The one interface through which the runtime moves data. The runtime decides
// what runs (negotiation, fusion); a Backend runs it on one communicator.
// The MPI backend serves host memory; a NCCL backend (built with CUDA) serves
// device memory.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

class ShmAllreduce;

class Backend {
 public:
  virtual ~Backend() = default;

  // In place on `buffer` (count elements). kAverage is not a backend op: the
  // runtime reduces with kSum and scales.
  virtual Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) = 0;
  // Every rank contributes `send_bytes`; rank i's block lands at recv_offsets[i].
  virtual Status Allgatherv(const void* send, int64_t send_bytes, void* recv,
                            const std::vector<int64_t>& recv_bytes) = 0;
  virtual Status Broadcast(void* buffer, int64_t bytes, int root) = 0;
  virtual Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                           const std::vector<int64_t>& recv_bytes) = 0;
  // Exchanges one int64 per rank pair (alltoall of counts).
  virtual Status AlltoallCounts(const std::vector<int64_t>& send, std::vector<int64_t>* recv) = 0;
  // Reduces `send` (sum of recv_counts elements) and leaves block `rank` in recv.
  virtual Status ReduceScatter(const void* send, void* recv,
                               const std::vector<int64_t>& recv_counts, DataType dtype,
                               ReduceOp op) = 0;
};

// An owned MPI communicator; frees it on destruction.
class MpiComm {
 public:
  MpiComm() = default;
  explicit MpiComm(MPI_Comm comm) : comm_(comm) {}
  ~MpiComm();
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;
  MpiComm(MpiComm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  MpiComm& operator=(MpiComm&& o) noexcept;

  MPI_Comm get() const { return comm_; }
  explicit operator bool() const { return comm_ != MPI_COMM_NULL; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// Turns an MPI return code into a Status naming the call.
Status MpiStatus(int rc, const char* call);

// The custom MPI ops kolo needs (float16/bfloat16 reductions). Created once
// after MPI_Init and freed before MPI_Finalize.
class MpiOps {
 public:
  static Result<std::unique_ptr<MpiOps>> Create();
  ~MpiOps();
  MpiOps(const MpiOps&) = delete;
  MpiOps& operator=(const MpiOps&) = delete;

  MPI_Datatype Datatype(DataType dtype) const;
  // The MPI op for `op` on `dtype` (kAverage maps to the sum).
  MPI_Op Op(DataType dtype, ReduceOp op) const;

 private:
  MpiOps() = default;
  MPI_Datatype half_ = MPI_DATATYPE_NULL;
  MPI_Datatype bfloat_ = MPI_DATATYPE_NULL;
  MPI_Op half_ops_[5] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_Op bfloat_ops_[5] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

// The communicators of a hierarchical allreduce: the ranks on this host
// (`local`) and the ranks with this rank's local rank on every host (`cross`).
struct Hierarchy {
  MpiComm local;
  MpiComm cross;
  int local_rank = 0, local_size = 1;  // this rank within `local`

  // Collective over `comm`. Null, with the reason, when the set runs on one
  // host or its hosts hold different numbers of its ranks.
  static Result<std::unique_ptr<Hierarchy>> Create(MPI_Comm comm, std::string* why_not);
};

// A backend over MPI for host memory. Does not own `comm` or `ops`. Allreduce
// reduces buffers larger than `piece_bytes` in pieces of that size (0: one
// call per buffer), so that each piece's working set stays in cache.
// With `shm` (ranks all on one host), allreduce goes through shared memory.
// With `hierarchy`, allreduce reduce-scatters within each host, allreduces
// each host's block across hosts, and allgathers within the host.
std::unique_ptr<Backend> MakeMpiBackend(MPI_Comm comm, const MpiOps* ops, int64_t piece_bytes,
                                        std::unique_ptr<ShmAllreduce> shm = nullptr,
                                        std::unique_ptr<Hierarchy> hierarchy = nullptr);

}  // namespace kolo
