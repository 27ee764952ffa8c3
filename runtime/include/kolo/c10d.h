// What kolo's torch.distributed backend calls besides the Runtime: joining the
// processes that another launcher started (torchrun,
// torch.multiprocessing.spawn) into one MPI job, and point-to-point messages
// among the ranks, outside kolo's negotiation. Interfaces without MPI types,
// so that the binding over them is the same for every MPI ABI's build of
// libkolo; runtime/join.h and runtime/p2p.h implement them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/status.h"

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
  virtual ~JoinedRanks() = default;
  // Every rank joined so far: accepts the next rank's connection and merges
  // it in last.
  virtual Status Accept(const std::string& port) = 0;
  // This process: connects to the ranks joined before it and merges in after
  // them.
  virtual Status Connect(const std::string& port) = 0;
  // How many ranks are joined (1 before any), and this process's rank among
  // them.
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // The joined communicator's handle (kolo/mpi_handle.h), for
  // InitOptions::comm; 0 before the first join.
  virtual uintptr_t comm_handle() const = 0;
  // Frees the joined communicator and finalizes MPI (after kolo's shutdown).
  virtual Status Finalize() = 0;
};
std::unique_ptr<JoinedRanks> MakeJoinedRanks();

// One send or receive in flight. Thread-safe: a future's thread and the
// caller may both wait on it.
class P2PRequest {
 public:
  virtual ~P2PRequest() = default;
  // Whether it finished (successfully or not); never blocks for long.
  virtual bool Test() = 0;
  // Polls for up to `seconds`; true once finished. `waited`: seconds this
  // wait already polled in earlier calls (a caller that waits in slices), which
  // count against the back-to-back polling that comes before the sleeps.
  virtual bool WaitFor(double seconds, double waited = 0) = 0;
  // A receive not matched yet is withdrawn (true). False when it finished
  // first, or for a send (MPI cannot withdraw those reliably).
  virtual bool Cancel() = 0;
  // Once finished: how it ended, and the sender of a receive.
  virtual Status status() = 0;
  virtual int source() = 0;
  virtual bool is_recv() const = 0;
  virtual int peer() const = 0;  // -1: any source
};

// The communicator of one torch.distributed group, for point-to-point only.
class P2PComm {
 public:
  virtual ~P2PComm() = default;
  // Frees the communicator (idempotent); later calls fail. Requests in flight
  // finish (MPI frees a communicator once they have).
  virtual void Free() = 0;
  // `peer`: a rank of the group; -1 receives from any.
  virtual Result<std::shared_ptr<P2PRequest>> Start(bool recv, uintptr_t data, int64_t bytes,
                                                    int peer, int tag) = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int tag_ub() const = 0;
};

// Collective over `ranks` (ranks of every rank's communicator: the joined one,
// or MPI_COMM_WORLD when mpirun or kolorun started the job; in group order)
// only. `kolo_rank` / `kolo_size`: this process in kolo's job, which must be
// that communicator for the ranks to mean the same.
Result<std::shared_ptr<P2PComm>> MakeP2PComm(const JoinedRanks& joined,
                                             const std::vector<int>& ranks, int kolo_rank,
                                             int kolo_size);

}  // namespace kolo
