// Point-to-point messages (send, recv, recv from any source) outside kolo's
// negotiation, for kolo's torch.distributed backend: a communicator per
// torch.distributed group (P2PComm) and the requests in flight on it
// (P2PRequest). See p2p.cc.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/mutex.h"
#include "kolo/status.h"
#include "ops/mpi.h"

namespace kolo {

// One send or receive in flight. Thread-safe: a future's thread and the
// caller may both wait on it.
class P2PRequest {
 public:
  P2PRequest(MPI_Request request, bool recv, int64_t bytes, int peer)
      : request_(request), recv_(recv), bytes_(bytes), peer_(peer) {}
  // An unfinished receive is withdrawn; an unfinished send is left to MPI
  // (MPI_Request_free), whose buffer the caller keeps alive.
  ~P2PRequest();
  P2PRequest(const P2PRequest&) = delete;
  P2PRequest& operator=(const P2PRequest&) = delete;

  // Whether it finished (successfully or not); never blocks for long.
  bool Test() EXCLUDES(mu_);
  // Polls for up to `seconds`; true once finished. `waited`: seconds this
  // wait already polled in earlier calls (a caller that waits in slices), which
  // count against the back-to-back polling that comes before the sleeps.
  bool WaitFor(double seconds, double waited = 0) EXCLUDES(mu_);
  // A receive not matched yet is withdrawn (true). False when it finished
  // first, or for a send (MPI cannot withdraw those reliably).
  bool Cancel() EXCLUDES(mu_);
  // Once finished: how it ended, and the sender of a receive.
  Status status() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return status_;
  }
  int source() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return source_;
  }
  bool is_recv() const { return recv_; }
  int peer() const { return peer_; }

 private:
  void Finish(int rc, const MPI_Status& st) REQUIRES(mu_);
  // How long WaitFor polls back to back before it sleeps (see p2p.cc).
  std::chrono::steady_clock::duration SpinTime() const;

  Mutex mu_;
  MPI_Request request_ GUARDED_BY(mu_);
  bool done_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
  int source_ GUARDED_BY(mu_) = -1;
  const bool recv_;
  const int64_t bytes_;
  const int peer_;  // -1: any source
};

// The communicator of one torch.distributed group, for point-to-point only.
class P2PComm {
 public:
  // Collective over `ranks` (ranks of `world`, in group order) only.
  // `world`: the communicator of every rank (JoinedRanks::world()).
  // `kolo_rank` / `kolo_size`: this process in kolo's job, which must be
  // `world` for the ranks to mean the same.
  static Result<std::shared_ptr<P2PComm>> Create(MPI_Comm world, const std::vector<int>& ranks,
                                                 int kolo_rank, int kolo_size);
  P2PComm(const P2PComm&) = delete;
  P2PComm& operator=(const P2PComm&) = delete;

  // Frees the communicator (idempotent); later calls fail. Requests in flight
  // finish (MPI frees a communicator once they have).
  void Free() EXCLUDES(mu_);
  // `peer`: a rank of the group; -1 receives from any.
  Result<std::shared_ptr<P2PRequest>> Start(bool recv, uintptr_t data, int64_t bytes, int peer,
                                            int tag) EXCLUDES(mu_);
  int rank() const { return rank_; }
  int size() const { return size_; }
  int tag_ub() const { return tag_ub_; }

 private:
  P2PComm(MPI_Comm comm, int rank, int size, int tag_ub)
      : comm_(comm), rank_(rank), size_(size), tag_ub_(tag_ub) {}

  Mutex mu_;
  MpiComm comm_ GUARDED_BY(mu_);
  const int rank_, size_, tag_ub_;
};

}  // namespace kolo
