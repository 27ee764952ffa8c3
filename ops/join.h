// Joining processes that kolo did not launch (torchrun,
// torch.multiprocessing.spawn) into one MPI communicator, for kolo's
// torch.distributed backend. See join.cc.
#pragma once

#include <mpi.h>

#include <string>

#include "base/mutex.h"
#include "kolo/status.h"
#include "ops/mpi.h"

namespace kolo {

// MPI_Init_thread (MPI_THREAD_MULTIPLE) as a singleton that reaches the
// ompi-server at `server_uri`; refused when MPI was initialized before.
Status InitJoinableMpi(const std::string& server_uri);
// Rank 0: a port name for the others to connect to, and closing it.
Result<std::string> OpenJoinPort();
void CloseJoinPort(const std::string& port);

// The ranks joined so far, as one intracommunicator, from the first join to
// Finalize(). Thread-safe.
class JoinedRanks {
 public:
  JoinedRanks() = default;
  JoinedRanks(const JoinedRanks&) = delete;
  JoinedRanks& operator=(const JoinedRanks&) = delete;

  // Every rank joined so far: accepts the next rank's connection and merges
  // it in last.
  Status Accept(const std::string& port) EXCLUDES(mu_);
  // This process: connects to the ranks joined before it and merges in after
  // them.
  Status Connect(const std::string& port) EXCLUDES(mu_);
  // How many ranks are joined (1 before any), and this process's rank among
  // them.
  int size() const EXCLUDES(mu_);
  int rank() const EXCLUDES(mu_);
  // The joined communicator; MPI_COMM_NULL before the first join.
  MPI_Comm comm() const EXCLUDES(mu_);
  // The communicator of every rank: the joined one, or MPI_COMM_WORLD when
  // this process did not join (mpirun / kolorun started it).
  MPI_Comm world() const EXCLUDES(mu_);
  // Frees the joined communicator and finalizes MPI (after kolo's shutdown).
  Status Finalize() EXCLUDES(mu_);

 private:
  // One side of a connection, merged into an intracommunicator (`high`: this
  // side's ranks come last) that replaces the joined one.
  Status Merge(MPI_Comm inter, bool high, const char* call) EXCLUDES(mu_);

  mutable Mutex mu_;
  MpiComm comm_ GUARDED_BY(mu_);
};

}  // namespace kolo
