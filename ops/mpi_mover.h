// The flat host mover: one MPI collective per call on the set's
// communicator. The shared-memory and hierarchical movers derive from it and
// replace the allreduce.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "ops/host_mover.h"

namespace kolo {

class MpiMover : public HostMover {
 public:
  MpiMover(MPI_Comm comm, const MpiOps* ops, int64_t piece_bytes)
      : comm_(comm), ops_(ops), piece_bytes_(piece_bytes) {}

  Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) override;
  Status Allgatherv(const void* send, int64_t send_bytes, void* recv,
                    const std::vector<int64_t>& recv_bytes) override;
  Status Broadcast(void* buffer, int64_t bytes, int root) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                   const std::vector<int64_t>& recv_bytes) override;
  Status AlltoallCounts(const std::vector<int64_t>& send, std::vector<int64_t>* recv) override;
  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  // Point-to-point on `comm` (every mover: Adasum is not an MPI collective).
  Status Adasum(void* buffer, const std::vector<int64_t>& counts, DataType dtype) override;
  void SetPieceBytes(int64_t piece_bytes) override { piece_bytes_ = piece_bytes; }
  const char* AllreduceActivity() const override { return "MPI_ALLREDUCE"; }

 protected:
  // One piece of an allreduce, in place (`n` elements of `elem` bytes).
  virtual Status AllreducePiece(char* p, int n, size_t elem, MPI_Datatype type, MPI_Op op);

  MPI_Comm comm_;
  const MpiOps* ops_;
  int64_t piece_bytes_;
  std::vector<uint8_t> adasum_scratch_;  // the partner's halves, kept across calls
};

}  // namespace kolo
