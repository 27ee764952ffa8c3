// The GPU path's NCCL communicators: one group per (process set, device),
// made collectively on first use, aborted for good once one reports an
// asynchronous error. Each process set owns its NcclSetComms (a GpuComms),
// so its communicators are destroyed with the set.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <map>
#include <memory>
#include <string>

#include "../data_mover.h"
#include "../gpu.h"
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
  // Adasum (made on its first use, NcclSetComms::PrepareAdasum): where the set
  // spans hosts, the NCCL communicator of this host's ranks and the set's MPI
  // communicators within and across hosts; otherwise `flat` is the host's.
  bool adasum_ready = false;
  NcclComm host;
  std::unique_ptr<Hierarchy> host_mpi;
  std::string broken;  // why the communicators were aborted; empty while healthy

  bool hierarchical() const { return static_cast<bool>(local); }
  // OK while no communicator has reported an asynchronous error. On the first
  // one, aborts all of them (work queued on them may never finish) and
  // returns why, as every later call does.
  Status CheckAsyncErrors();
  // Aborts every communicator, saying `why` from now on.
  void AbortAll(const std::string& why);
};

// The communicators of one process set, per device. Not thread-safe: the GPU
// path calls it from the background thread only. Work in flight holds its
// CommState, so a set's communicators outlive the set only while work queued
// on them is polled (the runtime drains it before it removes a set).
class NcclSetComms : public GpuComms {
 public:
  // `mpi`: the set's communicator, which outlives this. `hierarchical`: also
  // make the within-host and across-host communicators when the set spans
  // hosts with the same number of ranks each.
  NcclSetComms(MPI_Comm mpi, bool hierarchical) : mpi_(mpi), hierarchical_(hierarchical) {}

  // The communicators for `device`. Made on first use, collectively: every
  // member of the set asks in the same order. An error once aborted.
  Result<std::shared_ptr<CommState>> Get(int device);
  // Makes Adasum's communicators in `c` (device `device`) on its first use,
  // collectively, as Get does.
  Status PrepareAdasum(CommState& c, int device);
  void Abort() override;

 private:
  MPI_Comm mpi_;
  bool hierarchical_;
  std::map<int, std::shared_ptr<CommState>> by_device_;
};

}  // namespace kolo
