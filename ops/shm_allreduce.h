// Allreduce through one shared-memory segment for a process set whose ranks
// all run on one host.
//
// Buffers up to `whole_max_bytes` take one step through the slots: each rank
// copies the buffer into its slot, and once every rank has, each reduces the
// whole buffer from all slots in rank order into its output; one wait on the
// peers instead of three.
//
// Other buffers below `single_copy_min_bytes` or above `single_copy_max_bytes` go
// through slots. Each rank owns two
// slots of `piece_bytes` (double-buffered by piece parity). For every piece of
// the buffer: each rank copies its piece into its slot; rank r reduces slice r
// across all slots, in rank order, into its own slot; each rank copies every
// reduced slice s out of rank s's slot. Main memory is read and written once per
// byte; the slots stay in the shared cache, but every byte is copied twice.
//
// Buffers between are reduced with one copy, where the kernel lets the ranks
// read each other's memory (Linux cross-memory attach, process_vm_readv, as
// Open MPI's vader BTL does for large messages). Each rank publishes the
// addresses of its input and output in the segment; rank r reads slice r of
// every peer's input, in chunks of `chunk_bytes` that stay in cache, and
// reduces them in rank order into slice r of its own output (reduce-scatter);
// after a barrier, rank r reads every peer s's reduced slice s straight from
// the peer's output into its own (allgather); a last barrier keeps every
// buffer alive until no peer reads it. The barrier between the phases also
// keeps an in-place rank from overwriting its input slice s while peer s still
// reads it.
//
// Both paths reduce every element once, by one rank, as
// op(x[n-1], ... op(x[2], op(x[1], x[0]))) of the ranks' values x: every rank
// receives the same bits, and which path, piece size or slice reduced an
// element does not change them.
//
// Create probes the single copy: every rank reads a random value from every
// peer's memory (Yama's ptrace scope, a container's seccomp profile, different
// PID namespaces or users can forbid it); when any rank cannot, all ranks use
// the slots, and single_copy_why_not() says why.
//
// How a rank copies its piece into its slot is chosen from measurement (see
// CopyChooser): a plain copy keeps the slot in cache, which is fastest when the
// ranks' cores share a cache; streaming (non-temporal) stores are faster
// when they do not, because a plain store must first take each line back from
// the other core's cache, where it went when that core read the slot one piece
// before.
//
// Ranks signal progress with sequence counters in the segment. A rank that
// does not arrive within `timeout_seconds` (it died, or stopped) fails the
// call with a message naming it, instead of spinning forever; so does a peer
// whose memory cannot be read, and a rank that fails tells its peers, which
// then fail at once instead of waiting for the timeout.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

// Chooses, piece by piece, between a plain and a streaming copy into a rank's
// slot, from the time this rank's own work on each piece took (copy in,
// reduce, copy out, per byte; waiting for other ranks not counted). Which is
// faster depends on where the ranks' cores sit relative to each other, and a
// hypervisor may move them while a job runs, between cores that share a cache
// and cores on different dies, where a plain copy is several times slower
// (docs/performance.md, "Standalone jobs"). So one method is used until the
// other measures
// kSwitchMargin times faster, and every kExploreEvery-th piece tries the other
// one again.
class CopyChooser {
 public:
  // Smaller pieces are copied plainly and not timed (the clock would be noise).
  static constexpr int64_t kMinTimedBytes = 64 << 10;
  static constexpr int64_t kExploreEvery = 64;
  static constexpr int kWindow = 16;
  static constexpr double kSwitchMargin = 1.2;

  // Whether a piece of `bytes` is timed and recorded.
  static bool Timed(int64_t bytes) { return bytes >= kMinTimedBytes; }
  // Whether to stream the next piece of `bytes`.
  bool Streaming(int64_t bytes);
  // This rank's own work on a timed piece of `bytes` took `seconds`.
  void Record(bool streaming, int64_t bytes, double seconds);

 private:
  struct Estimate {
    double seconds_per_byte = 0;  // 0 = not measured yet
    double window_min = 0;
    int samples = 0;
  };
  Estimate estimate_[2];  // plain, streaming
  bool streaming_ = false;
  int64_t pieces_ = 0;
};

// Chooses, per size class (buffers of 2^k to 2^(k+1) - 1 bytes), between the
// single copy and the pipelined slots from the time whole calls took on rank
// 0, which publishes its choice so that every rank takes the same path. Which
// is faster depends on the machine: how fast the kernel copies between
// processes (process_vm_readv) against a memcpy, measured at 1.5 x a memcpy on
// one VM and 3 x on another (docs/performance.md). Each class starts with the
// pipelined path, tries the single copy once, then keeps the faster (the
// fastest of each path's last kWindow calls), trying the other again after
// kExploreFirst calls, and after twice as many each time it loses again.
class PathChooser {
 public:
  static constexpr int kClasses = 64;
  static constexpr int kWindow = 4;
  static constexpr int64_t kExploreFirst = 16;
  static constexpr int64_t kExploreMost = 1024;

  // Whether the next call of `bytes` goes through the single copy.
  bool SingleCopy(int64_t bytes) const { return (mask_ >> Class(bytes)) & 1; }
  // A call of `bytes` through the single copy (or not) took `seconds`;
  // decides the class's next call.
  void Record(int64_t bytes, bool single_copy, double seconds);
  // Every class's next path (bit k: class k through the single copy): what
  // rank 0 publishes and the peers adopt.
  uint64_t mask() const { return mask_; }
  void set_mask(uint64_t mask) { mask_ = mask; }

 private:
  static int Class(int64_t bytes);
  struct Path {
    double window[kWindow] = {};  // seconds per byte of its last calls; 0 = none
    int next = 0;
    double Best() const;
  };
  struct SizeClass {
    Path path[2];  // pipelined, single copy
    bool best_single_copy = false;
    int64_t calls = 0;
    int64_t explore_every = kExploreFirst;
  };
  SizeClass classes_[kClasses];
  uint64_t mask_ = 0;
};

class ShmAllreduce {
 public:
  struct Options {
    int64_t piece_bytes = 2 << 20;  // each slot's size, and the piece size until changed
    double timeout_seconds = 60;    // for a peer that does not arrive
    bool single_copy = true;        // KOLO_SHM_SINGLE_COPY: false = slots always
    // Buffers from single_copy_min_bytes to single_copy_max_bytes are reduced
    // with one copy (when permitted) or pipelined through the slots, which
    // ever a PathChooser measures faster (docs/architecture.md, "Shared-memory
    // allreduce").
    int64_t single_copy_min_bytes = 1 << 20;
    int64_t single_copy_max_bytes = int64_t{1} << 62;
    // The reduce-scatter reads each peer's slice in chunks of this many bytes.
    int64_t chunk_bytes = 256 << 10;
    // Buffers of at least pipelined_min_bytes that the single copy does not
    // take are reduced in pieces of pipelined_piece_bytes through a ring in
    // the slots (see AllreducePipelined).
    int64_t pipelined_min_bytes = 1 << 20;
    int64_t pipelined_piece_bytes = 256 << 10;
    // Buffers that both paths can take go the way a PathChooser measures
    // faster; false: the single copy takes them all (the tests of each path).
    bool choose_path = true;
    // Buffers up to this size go through the slots in one step: every rank
    // reduces the whole buffer from all slots itself, so the ranks wait for
    // each other once instead of three times (the latency of small tensors).
    int64_t whole_max_bytes = 4 << 10;
  };

  // Collective over `comm` (every rank calls it). Fails on every rank alike
  // when the ranks of `comm` are not all on this host or the segment cannot be
  // made (the caller then keeps using MPI). Whether the single copy is
  // permitted is decided here, alike on every rank.
  static Result<std::unique_ptr<ShmAllreduce>> Create(MPI_Comm comm, const Options& options);
  ~ShmAllreduce();
  ShmAllreduce(const ShmAllreduce&) = delete;
  ShmAllreduce& operator=(const ShmAllreduce&) = delete;

  // Marks the segment broken on this rank and tells the peers, so that one
  // that waits for this rank stops (the job lost a rank: issue 47).
  void Abort();

  // In place on `buffer`; the same call, with the same count, on every rank.
  Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) {
    return Allreduce(buffer, buffer, count, dtype, op);
  }
  // Reduces `in` into `out` (the same buffer, or two that do not overlap):
  // each piece is read from `in` into the slot (or by the peers, with the
  // single copy) and its result written to `out`, so an out-of-place
  // allreduce costs no more copies than one in place.
  Status Allreduce(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op);
  // One tensor of a fused allreduce: `count` elements read from `in`, their
  // reduction written to `out` (the same memory, or memory that does not
  // overlap it).
  struct Part {
    const void* in;
    void* out;
    int64_t count;
  };
  // Whether AllreduceParts takes parts of `bytes` in all.
  bool TakesParts(int64_t bytes) const { return size_ > 1 && bytes >= pipelined_min_bytes_; }
  // Reduces the parts as one buffer of their concatenation through the
  // pipelined slots, copying each piece straight from the parts into the ring
  // and from the ring into the parts: no fusion buffer, no copies into and out
  // of it. The same parts' sizes on every rank.
  Status AllreduceParts(const std::vector<Part>& parts, DataType dtype, ReduceOp op);
  // Pieces of `piece_bytes` (at most the slot size given to Create, at least
  // 64 bytes) from the next Allreduce on; every rank must change it between
  // the same two calls. The slots keep their places, so the double-buffering
  // by piece parity holds across the change.
  void SetPieceBytes(int64_t piece_bytes);
  int64_t piece_bytes() const { return piece_bytes_; }

  // Whether buffers from single_copy_min_bytes to single_copy_max_bytes go
  // through one copy: the same on every rank.
  bool single_copy() const { return single_copy_; }
  // Why not, when asked for but not permitted ("rank 1 cannot read rank 0's
  // memory: process_vm_readv: Operation not permitted"); the same on every rank.
  const std::string& single_copy_why_not() const { return single_copy_why_not_; }
  // Calls that went through the single copy so far (the same on every rank).
  int64_t single_copy_calls() const { return single_copy_calls_; }

 private:
  struct Control;
  ShmAllreduce() = default;
  Status ProbeSingleCopy(MPI_Comm comm);
  Status AllreduceSlots(const uint8_t* in, uint8_t* out, int64_t count, DataType dtype,
                        ReduceOp op);
  Status AllreduceWhole(const uint8_t* in, uint8_t* out, int64_t count, DataType dtype,
                        ReduceOp op);
  Status AllreduceSingleCopy(const uint8_t* in, uint8_t* out, int64_t count, DataType dtype,
                             ReduceOp op);
  Status AllreduceChosen(const uint8_t* in, uint8_t* out, int64_t count, DataType dtype,
                         ReduceOp op);
  // The parts of one allreduce, found by their elements' place in the whole.
  class Parts {
   public:
    Parts(const Part* parts, size_t n);
    int64_t count() const { return begin_.back(); }
    // fn(in, out, at, n) for each run of elements [begin, begin + count) that
    // lies in one part: the run's first element in the part's input and
    // output, its offset in bytes from `begin`'s, its elements.
    template <typename F>
    void ForRuns(int64_t begin, int64_t count, int64_t elem, F fn) const;

   private:
    const Part* parts_;
    std::vector<int64_t> begin_;  // each part's first element; the total last
  };
  Status AllreducePipelined(const uint8_t* in, uint8_t* out, int64_t count, DataType dtype,
                            ReduceOp op);
  Status AllreducePipelined(const Parts& parts, DataType dtype, ReduceOp op);
  // Place `position` of rank `rank`'s ring: its two slots as pieces of
  // pipelined_piece_bytes_.
  uint8_t* RingPiece(int rank, int64_t position) const;
  Status ReduceMySlice(const uint8_t* in, uint8_t* out, int64_t count, DataType dtype, ReduceOp op);
  // Reads `bytes` at `address` in rank `peer`'s memory into `to`.
  Status ReadPeer(int peer, uint64_t address, void* to, size_t bytes);
  // Until every rank's counter `which` is at least `at_least`; with `line` of
  // 0 or 1, its small line of that parity instead (AllreduceWhole).
  Status WaitFor(int which, uint64_t at_least, int line = -1);
  // Whether rank `peer`'s process is gone (its pid no longer exists).
  bool PeerGone(int peer) const;
  // Marks the segment as broken on this rank and tells the peers; returns `status`.
  Status Fail(Status status);
  uint8_t* Slot(int rank, uint64_t seq) const;

  int rank_ = 0;
  int size_ = 1;
  int64_t slot_bytes_ = 0;   // each slot's size, fixed at Create
  int64_t piece_bytes_ = 0;  // the bytes of a piece, at most slot_bytes_
  double timeout_seconds_ = 60;
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  Control* control_ = nullptr;  // size_ entries at the start of the segment
  uint8_t* slots_ = nullptr;
  uint64_t seq_ = 0;
  CopyChooser copy_;
  CopyChooser pipelined_copy_;
  PathChooser path_;  // rank 0's choices; the peers' copy of them
  bool choose_path_ = false;
  // Run by rank 0's AllreduceChosen just before a path raises its last kDone.
  std::function<void()> before_last_done_;
  int64_t single_copy_calls_ = 0;
  int64_t pipelined_min_bytes_ = 0;
  int64_t pipelined_piece_bytes_ = 0;
  bool broken_ = false;  // a call failed: the counters can no longer be trusted

  bool single_copy_ = false;
  std::string single_copy_why_not_;
  int64_t single_copy_min_bytes_ = 0;
  int64_t single_copy_max_bytes_ = 0;
  int64_t chunk_bytes_ = 0;
  int64_t whole_max_bytes_ = 0;
  std::vector<int> peer_pid_;       // each rank's process, as this rank sees it
  std::vector<uint8_t> scratch_;    // a chunk read from a peer
  std::vector<uint8_t> own_chunk_;  // this rank's input chunk, saved when in place
  uint64_t probe_value_ = 0;        // read by every peer at Create
};

}  // namespace kolo
