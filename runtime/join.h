// Joining processes that kolo did not launch (torchrun,
// torch.multiprocessing.spawn) into one MPI communicator, for kolo's
// torch.distributed backend (kolo/c10d.h). See join.cc.
#pragma once

#include <mpi.h>

#include <string>

#include "base/mutex.h"
#include "kolo/c10d.h"
#include "kolo/status.h"
#include "ops/mpi.h"

namespace kolo {

// kolo/c10d.h's JoinedRanks over MPI's dynamic processes.
class MpiJoinedRanks : public JoinedRanks {
 public:
  MpiJoinedRanks() = default;
  MpiJoinedRanks(const MpiJoinedRanks&) = delete;
  MpiJoinedRanks& operator=(const MpiJoinedRanks&) = delete;

  Status Accept(const std::string& port) override EXCLUDES(mu_);
  Status Connect(const std::string& port) override EXCLUDES(mu_);
  int size() const override EXCLUDES(mu_);
  int rank() const override EXCLUDES(mu_);
  uintptr_t comm_handle() const override EXCLUDES(mu_);
  Status Finalize() override EXCLUDES(mu_);
  // The joined communicator; MPI_COMM_NULL before the first join.
  MPI_Comm comm() const EXCLUDES(mu_);
  // The communicator of every rank: the joined one, or MPI_COMM_WORLD when
  // this process did not join (mpirun / kolorun started it).
  MPI_Comm world() const EXCLUDES(mu_);

 private:
  // One side of a connection, merged into an intracommunicator (`high`: this
  // side's ranks come last) that replaces the joined one.
  Status Merge(MPI_Comm inter, bool high, const char* call) EXCLUDES(mu_);

  mutable Mutex mu_;
  MpiComm comm_ GUARDED_BY(mu_);
};

}  // namespace kolo
