// Point-to-point messages (send, recv, recv from any source) outside kolo's
// negotiation, for kolo's torch.distributed backend (kolo/c10d.h): a
// communicator per torch.distributed group (MpiP2PComm) and the requests in
// flight on it (MpiP2PRequest). See p2p.cc.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "base/mutex.h"
#include "kolo/c10d.h"
#include "kolo/status.h"
#include "ops/mpi.h"

namespace kolo {

// kolo/c10d.h's P2PRequest: one MPI request.
class MpiP2PRequest : public P2PRequest {
 public:
  MpiP2PRequest(MPI_Request request, bool recv, int64_t bytes, int peer)
      : request_(request), recv_(recv), bytes_(bytes), peer_(peer) {}
  // An unfinished receive is withdrawn; an unfinished send is left to MPI
  // (MPI_Request_free), whose buffer the caller keeps alive.
  ~MpiP2PRequest() override;
  MpiP2PRequest(const MpiP2PRequest&) = delete;
  MpiP2PRequest& operator=(const MpiP2PRequest&) = delete;

  bool Test() override EXCLUDES(mu_);
  bool WaitFor(double seconds, double waited = 0) override EXCLUDES(mu_);
  bool Cancel() override EXCLUDES(mu_);
  Status status() override EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return status_;
  }
  int source() override EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return source_;
  }
  bool is_recv() const override { return recv_; }
  int peer() const override { return peer_; }

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

// kolo/c10d.h's P2PComm: a communicator of the group's ranks.
class MpiP2PComm : public P2PComm {
 public:
  // Collective over `ranks` (ranks of `world`, in group order) only.
  // `world`: the communicator of every rank (MpiJoinedRanks::world()).
  // `kolo_rank` / `kolo_size`: this process in kolo's job, which must be
  // `world` for the ranks to mean the same.
  static Result<std::shared_ptr<P2PComm>> Create(MPI_Comm world, const std::vector<int>& ranks,
                                                 int kolo_rank, int kolo_size);
  MpiP2PComm(const MpiP2PComm&) = delete;
  MpiP2PComm& operator=(const MpiP2PComm&) = delete;

  void Free() override EXCLUDES(mu_);
  Result<std::shared_ptr<P2PRequest>> Start(bool recv, uintptr_t data, int64_t bytes, int peer,
                                            int tag) override EXCLUDES(mu_);
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int tag_ub() const override { return tag_ub_; }

 private:
  MpiP2PComm(MPI_Comm comm, int rank, int size, int tag_ub)
      : comm_(comm), rank_(rank), size_(size), tag_ub_(tag_ub) {}

  Mutex mu_;
  MpiComm comm_ GUARDED_BY(mu_);
  const int rank_, size_, tag_ub_;
};

}  // namespace kolo
