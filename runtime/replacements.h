// Growing a running job in place (Open MPI 5, docs/elastic.md "Replace and
// grow in place"): new processes started by MPI_Comm_spawn join the ranks
// that are there, which keep training meanwhile.
//
// The spawn is one rank's (rank 0's) alone, on MPI_COMM_SELF from a thread of
// its own: MPI_Comm_spawn returns only once every new process has called
// MPI_Init, which comes after its framework's import (seconds), and no other
// rank needs to wait for that. The same thread then merges its
// intercommunicator with the new processes into a pair communicator (they
// merge at once, after their MPI_Init). At the old ranks' next commit every
// rank and every new process form one communicator: rank 0 checks on the
// pair that the new processes still answer, and the pair bridges an
// MPI_Intercomm_create between the old ranks' communicator and the new
// processes' MPI_COMM_WORLD; a merge makes it one, the old ranks first in
// their order, the new ones after them. When the job ends before that
// commit, rank 0 waits for the spawn to return and tells the new processes on
// the pair that there is nothing to join; they end without an error.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "base/mutex.h"
#include "kolo/status.h"

namespace kolo {

// What to start: `command` with `args` on each host of `hosts` (one process
// per entry; a host twice gets two), each with `environment` ("NAME=value",
// added to what PRRTE gives every process, through /usr/bin/env).
// The hosts of `added` are not in mpirun's allocation yet: PRRTE adds them
// (PMIX_ADD_HOST, its daemon started there as mpirun starts one).
struct ReplacementRequest {
  std::string command;
  std::vector<std::string> args;
  std::vector<std::string> hosts;
  std::vector<std::string> environment;
  std::vector<std::string> added;
};

// The new processes' spawn, running on a thread of its own (MPI_THREAD_MULTIPLE).
// A spawn whose processes die before MPI_Init never returns (PRRTE 3.0):
// destroying it before Done() leaves its thread behind, detached, with the
// state it writes.
class ReplacementSpawn {
 public:
  explicit ReplacementSpawn(ReplacementRequest request);
  ~ReplacementSpawn();  // joins the thread when it is done, else detaches it
  ReplacementSpawn(const ReplacementSpawn&) = delete;
  ReplacementSpawn& operator=(const ReplacementSpawn&) = delete;

  // Whether the spawn and the merge with the new processes have returned,
  // successfully or not.
  bool Done() const;
  // Once Done(): whether they succeeded, or why not.
  Status status() const;
  // Waits up to `patience` for Done(); whether it came.
  bool WaitUntilDone(std::chrono::milliseconds patience) const;
  // Once Done(): the pair communicator of this rank and the new processes (the
  // caller owns it), or why the spawn failed.
  Result<MPI_Comm> Take();

 private:
  // What the spawning thread writes; shared with it, as it may outlive this.
  struct Outcome {
    mutable Mutex mu;
    bool done GUARDED_BY(mu) = false;
    Status status GUARDED_BY(mu);
    MPI_Comm pair GUARDED_BY(mu) = MPI_COMM_NULL;  // this rank and the new processes
  };
  static void Spawn(const ReplacementRequest& request, Outcome* outcome);

  std::shared_ptr<Outcome> outcome_;
  std::thread thread_;
};

// Collective over `ranks` and the new processes (JoinAsReplacement): one
// intracommunicator, `ranks` first in their order. `pair` is rank 0's
// communicator with the new processes (Take(); consumed), MPI_COMM_NULL
// elsewhere. When the new processes do not all answer rank 0 (one died after
// MPI_Init, or stopped), every rank of `ranks` returns kAborted, rank 0 with
// the reason, and `ranks` can go on as they were; the new processes' joins fail.
Result<MPI_Comm> MergeReplacements(MPI_Comm ranks, MPI_Comm pair);

// Rank 0, when the job ends before the new processes joined: tells them on
// `pair` (Take(); freed here) that there is nothing to join. Fails, naming
// why, when they do not all answer (as MergeReplacements).
Status DismissReplacements(MPI_Comm pair);

// In a process that kolo spawned as a replacement (KOLO_ELASTIC_REPLACEMENT=1
// and a parent): waits until the ranks merge it in; returns the merged
// communicator. MPI_COMM_NULL when this process is no replacement; kAborted
// when the job ended before it joined (DismissReplacements): it is not needed.
Result<MPI_Comm> JoinAsReplacement();

}  // namespace kolo
