// The GPU path's NCCL communicators: one set per (process set, device), made
// collectively on first use, aborted for good once one reports an
// asynchronous error, destroyed when the process set is removed.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <map>
#include <memory>
#include <string>
#include <utility>

#include "kolo/status.h"

namespace kolo {

// An owned NCCL communicator: destroyed normally, aborted once broken (a
// broken communicator may have operations that never finish).
class NcclComm {
 public:
  NcclComm() = default;
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  ncclComm_t* out() { return &comm_; }  // for ncclCommInitRank
  explicit operator bool() const { return comm_ != nullptr; }
  void Abort();

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
  std::string broken;  // why the communicators were aborted; empty while healthy

  bool hierarchical() const { return static_cast<bool>(local); }
  // OK while no communicator has reported an asynchronous error. On the first
  // one, aborts all of them (work queued on them may never finish) and
  // returns why, as every later call does.
  Status CheckAsyncErrors();
};

// The communicators per (MPI communicator, device). Not thread-safe: the GPU
// path calls it from the background thread only.
class NcclComms {
 public:
  // `hierarchical`: also make the within-host and across-host communicators
  // for sets that span hosts with the same number of ranks each.
  explicit NcclComms(bool hierarchical) : hierarchical_(hierarchical) {}

  // The communicators for (mpi, device). Made on first use, collectively:
  // every member of `mpi` asks in the same order. An error once aborted.
  Result<std::shared_ptr<CommState>> Get(MPI_Comm mpi, int device);
  // Destroys the communicators made for `mpi` (its process set was removed).
  void Forget(MPI_Comm mpi);
  // Destroys them all.
  void Clear() { comms_.clear(); }

 private:
  bool hierarchical_;
  std::map<std::pair<MPI_Comm, int>, std::shared_ptr<CommState>> comms_;
};

}  // namespace kolo
