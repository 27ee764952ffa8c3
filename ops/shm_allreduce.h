// Allreduce through one shared-memory segment for a process set whose ranks
// all run on one host.
//
// Each rank owns two slots of `piece_bytes` (double-buffered by piece
// parity). For every piece of the buffer: each rank copies its piece into its
// slot; rank r reduces slice r across all slots into its own slot (so every
// element is summed once, by one rank, in rank order: every rank receives
// bit-identical results); each rank copies all reduced slices out. Main memory
// is read and written once per byte; the slots stay in the shared cache. An
// MPI_Allreduce of the same buffer goes through MPI's temporary buffers and
// touches main memory about three times per byte.
//
// Ranks signal progress with sequence counters in the segment. A rank that
// does not arrive within `timeout_seconds` (it died, or stopped) fails the
// call with a message naming it, instead of spinning forever.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

class ShmAllreduce {
 public:
  // Collective over `comm` (every rank calls it). Fails on every rank alike
  // when the ranks of `comm` are not all on this host or the segment cannot be
  // made (the caller then keeps using MPI).
  static Result<std::unique_ptr<ShmAllreduce>> Create(MPI_Comm comm, int64_t piece_bytes,
                                                      double timeout_seconds);
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  // In place on `buffer`; the same call, with the same count, on every rank.
  Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op);

 private:
  struct Control;
  ShmAllreduce() = default;
  Status WaitFor(int which, uint64_t at_least);
  uint8_t* Slot(int rank, uint64_t seq) const;

  int rank_ = 0;
  int size_ = 1;
  int64_t piece_bytes_ = 0;
  double timeout_seconds_ = 60;
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  Control* control_ = nullptr;  // size_ entries at the start of the segment
  uint8_t* slots_ = nullptr;
  uint64_t seq_ = 0;
  bool broken_ = false;  // a peer timed out: the counters can no longer be trusted
};

}  // namespace kolo
