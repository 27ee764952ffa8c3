// The exchange at the heart of a negotiation round: every rank of a process
// set contributes a vector of 64-bit words, and every rank receives their
// bitwise AND (runtime/process_set_negotiation.cc says what the bits mean).
// It is started once and then tested until it is back, so that the thread
// that runs a cycle can leave a round in flight and come back to it.
//
// Two kinds (MakeBitRound picks one per set, alike on every rank):
// - over MPI: one MPI_Iallreduce (MPI_BAND) on the set's communicator;
// - through shared memory, for ranks that share a host: each rank writes its
//   vector into its own slot of a segment and raises its round counter; the
//   ranks of a host AND each other's slots. When the set spans several hosts,
//   one rank per host (its leader) ANDs its host's slots, reduces that across
//   the hosts' leaders with MPI_Iallreduce, and publishes the result in the
//   segment for its host's other ranks. Slots and the published result are
//   double-buffered by round parity: a rank writes round r + 2's slot only
//   after every rank of its host finished round r + 1, i.e. read round r.
//   A vector longer than the segment's slots goes over MPI for that round
//   (every rank has the same length, so every rank does so).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/status.h"

namespace kolo {

class BitRound {
 public:
  virtual ~BitRound() = default;
  // Starts a round with this rank's vector; `bits` receives the AND in place
  // and must stay alive and unchanged until Test says the round is back. Every
  // rank of the set passes a vector of the same length.
  virtual Status Start(std::vector<uint64_t>* bits) = 0;
  // Whether the round started last is back; never waits.
  virtual Status Test(bool* back) = 0;
  // The job lost a rank (issue 47), or this rank stops: a rank that waits in
  // a round for this one stops too. Safe to call from any thread.
  virtual void Abort() {}
  // "MPI_Iallreduce" or "shared memory" (for the log).
  virtual const char* kind() const = 0;
};

// The MPI_Iallreduce round on `comm` (not owned).
std::unique_ptr<BitRound> MakeMpiBitRound(MPI_Comm comm);

struct BitRoundOptions {
  bool shared_memory = true;  // KOLO_SHM_NEGOTIATION
  int max_words = 64;         // the longest vector the segment's slots hold
  int global_rank = 0;        // this rank's, for messages that name a rank
};

// The round for the set on `comm` (not owned): through shared memory where
// allowed and a segment could be made on every host, else over MPI.
// Collective over `comm`. `why` says which, and why.
Result<std::unique_ptr<BitRound>> MakeBitRound(MPI_Comm comm, const BitRoundOptions& options,
                                               std::string* why);

}  // namespace kolo
