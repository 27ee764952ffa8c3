// A HostMover moves host memory among the ranks of one process set and
// returns when the collective is done (data_mover.h: the two kinds of mover).
// The three host movers, each in a file of its name (mpi_mover.cc,
// shm_mover.cc, hierarchical_mover.cc), and MakeHostMover (host_mover.cc),
// which picks one per set.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"
#include "ops/mpi.h"

namespace kolo {

class ShmAllreduce;

class HostMover {
 public:
  virtual ~HostMover() = default;

  // In place on `buffer` (count elements). kAverage is not a mover op: the
  // executor reduces with kSum and scales.
  virtual Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) = 0;
  // Reduces `in` into `out` (they do not overlap). By default a copy, then the
  // allreduce in place; a mover that copies its input anyway reads `in` itself.
  virtual Status AllreduceInto(const void* in, void* out, int64_t count, DataType dtype,
                               ReduceOp op) {
    if (count > 0) std::memcpy(out, in, static_cast<size_t>(count) * DataTypeSize(dtype));
    return Allreduce(out, count, dtype, op);
  }
  // One tensor of a fused allreduce: `count` elements from `in`, the result
  // to `out` (the same memory or none of it).
  struct Part {
    const void* in;
    void* out;
    int64_t count;
  };
  // Whether AllreduceParts takes a fused allreduce of `bytes` in all.
  virtual bool TakesParts(int64_t /*bytes*/) const { return false; }
  // Reduces the parts as one buffer of their concatenation without copying
  // them into one first (the executor's fusion buffer). Only where TakesParts.
  virtual Status AllreduceParts(const std::vector<Part>& /*parts*/, DataType /*dtype*/,
                                ReduceOp /*op*/) {
    return Status::Internal("this host mover does not reduce parts");
  }
  // Every rank contributes `send_bytes`; rank i's recv_bytes[i] land one after
  // the other in `recv`.
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
  // Adasum (ops/adasum.h) in place on `buffer`: the tensors of `counts`
  // elements one after the other, each combined with its own coefficients.
  virtual Status Adasum(void* buffer, const std::vector<int64_t>& counts, DataType dtype) = 0;
  // The allreduce piece size from the next call on (autotune). Every rank of
  // the set must change it between the same two collectives; the shared-memory
  // mover never goes above the size its slots were made for.
  virtual void SetPieceBytes(int64_t piece_bytes) = 0;
  // The timeline's name for the allreduce's data phase, in Horovod's style
  // ("MPI_ALLREDUCE"); the other collectives are MPI's in every host mover.
  virtual const char* AllreduceActivity() const = 0;
  // The job lost a rank (issue 47): stops this rank's part in the mover's own
  // channels for good, so that a peer waiting on this rank there stops too
  // (the shared-memory segment's failed mark, the hierarchy's communicators
  // revoked). The set's communicator is the runtime's to revoke.
  virtual void Abort() {}
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

// The three host movers. None owns `comm` or `ops`. Allreduce reduces buffers
// larger than `piece_bytes` in pieces of that size (0: one call per buffer),
// so that each piece's working set stays in cache.
// Flat: MPI_Allreduce and the other MPI collectives on `comm`.
std::unique_ptr<HostMover> MakeMpiMover(MPI_Comm comm, const MpiOps* ops, int64_t piece_bytes);
// Ranks all on one host: allreduce through one shared-memory segment (the
// other collectives as the flat mover).
std::unique_ptr<HostMover> MakeShmMover(MPI_Comm comm, const MpiOps* ops,
                                        std::unique_ptr<ShmAllreduce> shm);
// Ranks on several hosts, as many on each: allreduce reduce-scatters within
// each host, allreduces each host's block across hosts, and allgathers within
// the host.
std::unique_ptr<HostMover> MakeHierarchicalMover(MPI_Comm comm, const MpiOps* ops,
                                                 int64_t piece_bytes,
                                                 std::unique_ptr<Hierarchy> hierarchy);

struct HostMoverOptions {
  int64_t piece_bytes = 0;
  bool shared_memory = true;    // KOLO_SHM_ALLREDUCE
  bool shm_single_copy = true;  // KOLO_SHM_SINGLE_COPY
  bool hierarchical = false;    // KOLO_HIERARCHICAL_ALLREDUCE
  double shm_timeout_seconds = 60;
};

struct HostMoverChoice {
  std::unique_ptr<HostMover> mover;
  std::string why;        // what was chosen, and why
  bool fallback = false;  // a mover the settings asked for could not be used
};

// Chooses the host mover for the process set on `comm` from its topology:
// shared memory when every member is on this host (and allowed), else
// hierarchical when asked for and the hosts hold as many members each, else
// flat MPI. Collective over `comm`.
Result<HostMoverChoice> MakeHostMover(MPI_Comm comm, const MpiOps* ops,
                                      const HostMoverOptions& options);

}  // namespace kolo
