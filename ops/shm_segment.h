// A segment under /dev/shm that the ranks of one host share: the shared-memory
// allreduce's slots (ops/shm_allreduce.h) and the negotiation round's
// (ops/bit_round.h).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <string>

#include "kolo/status.h"

namespace kolo {

struct HostSegment {
  void* base = nullptr;  // the mapping on this rank; null when it failed
  std::string name;      // rank 0: the name to unlink (empty when none was made)
  std::string error;     // why this rank has no mapping ("" when it has, or rank 0 failed)
};

// Collective over `comm` (ranks of one host): its rank 0 makes a segment of
// `bytes` named /`prefix`-pid-random, reserving the pages at once (a full
// /dev/shm is an error here, not a SIGBUS in the middle of a collective), and
// every rank maps it. The caller agrees with the other ranks whether all
// have it, then rank 0 calls UnlinkHostSegment, so that nothing outlives the
// job. An error Status only when MPI itself failed.
Status MapHostSegment(MPI_Comm comm, const char* prefix, size_t bytes, HostSegment* segment);

// Rank 0, once every rank has mapped the segment (or given up): removes its name.
void UnlinkHostSegment(const HostSegment& segment);

}  // namespace kolo
