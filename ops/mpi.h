// kolo's MPI helpers: an owned communicator, MPI return codes as a Status,
// and the MPI datatypes and ops kolo adds (float16/bfloat16 reductions).
#pragma once

#include <mpi.h>

#include <memory>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

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

// Whether MPI may be called: initialized, and not finalized yet.
bool MpiUsable();

// The ranks of `comm` on this rank's host, ordered by `key`:
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), except when MPI sees every rank
// alone although some share a host (ranks of separately started processes
// joined into one communicator, as under torchrun: Open MPI knows nothing of
// their locality). Then ranks whose host name and boot id are the same form a
// group. Collective over `comm`.
Status SplitByHost(MPI_Comm comm, int key, MPI_Comm* local);

// The custom MPI ops kolo needs (float16/bfloat16 reductions). Created once
// after MPI_Init and freed before MPI_Finalize.
class MpiOps {
 public:
  static Result<std::unique_ptr<MpiOps>> Create();
  ~MpiOps();
  MpiOps(const MpiOps&) = delete;
  MpiOps& operator=(const MpiOps&) = delete;

  MPI_Datatype Datatype(DataType dtype) const;
  // The MPI op for `op` on `dtype` (kAverage maps to the sum; kAdasum, which
  // is not elementwise, to MPI_OP_NULL).
  MPI_Op Op(DataType dtype, ReduceOp op) const;

  // Sum (and average), min, max, product.
  static constexpr int kElementwiseOps = 4;

 private:
  MpiOps() = default;
  MPI_Datatype half_ = MPI_DATATYPE_NULL;
  MPI_Datatype bfloat_ = MPI_DATATYPE_NULL;
  MPI_Op half_ops_[kElementwiseOps] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  MPI_Op bfloat_ops_[kElementwiseOps] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
};

}  // namespace kolo
