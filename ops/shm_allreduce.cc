#include "ops/shm_allreduce.h"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "base/rows.h"
#include "ops/cpu_kernels.h"
#include "ops/mpi.h"
#include "ops/shm_segment.h"

namespace kolo {

// One rank's entry in the segment. The first cache line is written by the
// rank as it goes: its progress counters (the last piece or single-copy call
// it copied in or published its buffers for, reduced its slice of, finished
// copying out) and whether it gave up. The second holds what the peers read
// of it: its process and probe value (set once at Create) and its buffers'
// addresses in the current single-copy call (set before kArrived is raised).
// Then two lines, by call parity, that carry a buffer of up to 56 bytes
// with its call's counter: a peer gets both with one transfer between cores.
struct ShmAllreduce::Control {
  alignas(64) std::atomic<uint64_t> counter[3];
  std::atomic<uint64_t> failed;
  alignas(64) std::atomic<int64_t> pid;
  std::atomic<uint64_t> probe_address;
  std::atomic<uint64_t> probe_value;
  std::atomic<uint64_t> in;
  std::atomic<uint64_t> out;
  std::atomic<uint64_t> path_choice;  // rank 0's PathChooser::mask()
  struct Line {
    alignas(64) std::atomic<uint64_t> seq;  // the call whose buffer `data` holds
    uint8_t data[56];
  } small[2];
  static_assert(sizeof(Line) == 64, "one cache line");
};
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "atomics shared between processes must be lock-free");

namespace {

enum Counter { kArrived = 0, kReduced = 1, kDone = 2 };

const char* CounterName(int which) {
  static const char* const kNames[] = {"copied its piece in", "reduced its slice",
                                       "copied the result out"};
  return kNames[which];
}

std::string ErrnoText(const char* call) { return std::string(call) + ": " + std::strerror(errno); }

uint64_t Address(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

constexpr int kWhyBytes = 256;

using Clock = std::chrono::steady_clock;

// Sums the time between each Start and Stop; reads no clock when off.
class Stopwatch {
 public:
  explicit Stopwatch(bool on) : on_(on) {}
  void Start() {
    if (on_) start_ = Clock::now();
  }
  void Stop() {
    if (on_) seconds_ += std::chrono::duration<double>(Clock::now() - start_).count();
  }
  double seconds() const { return seconds_; }

 private:
  bool on_;
  Clock::time_point start_;
  double seconds_ = 0;
};

}  // namespace

bool CopyChooser::Streaming(int64_t bytes) {
  if (!Timed(bytes)) return false;
  ++pieces_;
  if (estimate_[0].seconds_per_byte == 0) return false;
  if (estimate_[1].seconds_per_byte == 0) return true;
  return pieces_ % kExploreEvery == 0 ? !streaming_ : streaming_;
}

void CopyChooser::Record(bool streaming, int64_t bytes, double seconds) {
  if (!Timed(bytes)) return;
  const double rate = seconds / static_cast<double>(bytes);
  Estimate& e = estimate_[streaming ? 1 : 0];
  if (streaming == streaming_ && e.seconds_per_byte != 0) {
    // Measured on every piece: the fastest of each kWindow pieces, since
    // anything else on the core only ever adds time.
    e.window_min = e.samples == 0 ? rate : std::min(e.window_min, rate);
    if (++e.samples == kWindow) {
      e.seconds_per_byte = e.window_min;
      e.samples = 0;
    }
  } else {
    // Measured rarely: the last measurement replaces what is now stale.
    e.seconds_per_byte = rate;
    e.samples = 0;
  }
  const Estimate& now = estimate_[streaming_ ? 1 : 0];
  const Estimate& other = estimate_[streaming_ ? 0 : 1];
  if (other.seconds_per_byte != 0 &&
      other.seconds_per_byte * kSwitchMargin < now.seconds_per_byte) {
    streaming_ = !streaming_;
  }
}

int PathChooser::Class(int64_t bytes) {
  int k = 0;
  while (k + 1 < kClasses && (bytes >> (k + 1)) > 0) ++k;
  return k;
}

double PathChooser::Path::Best() const {
  double best = 0;
  for (double w : window) {
    if (w != 0 && (best == 0 || w < best)) best = w;
  }
  return best;
}

void PathChooser::Record(int64_t bytes, bool single_copy, double seconds) {
  const int k = Class(bytes);
  SizeClass& c = classes_[k];
  Path& p = c.path[single_copy ? 1 : 0];
  p.window[p.next] = seconds / static_cast<double>(std::max<int64_t>(bytes, 1));
  p.next = (p.next + 1) % kWindow;
  const double pipelined = c.path[0].Best(), one_copy = c.path[1].Best();
  bool next = false;
  if (pipelined == 0) {
    next = false;
  } else if (one_copy == 0) {
    next = true;
  } else {
    const bool best = one_copy < pipelined;
    // A call that tried the other path and lost: try it less often.
    if (single_copy != c.best_single_copy && best == c.best_single_copy) {
      c.explore_every = std::min(c.explore_every * 2, kExploreMost);
    } else if (best != c.best_single_copy) {
      c.explore_every = kExploreFirst;
    }
    c.best_single_copy = best;
    next = best;
    if (++c.calls >= c.explore_every) {
      c.calls = 0;
      next = !best;
    }
  }
  const uint64_t bit = uint64_t{1} << k;
  mask_ = next ? (mask_ | bit) : (mask_ & ~bit);
}

Result<std::unique_ptr<ShmAllreduce>> ShmAllreduce::Create(MPI_Comm comm, const Options& options) {
  const int64_t piece_bytes = options.piece_bytes;
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // All ranks on this host? Every rank learns the smallest host group.
  MPI_Comm local;
  KOLO_RETURN_IF_ERROR(SplitByHost(comm, 0, &local));
  int local_size = 0;
  MPI_Comm_size(local, &local_size);
  MPI_Comm_free(&local);
  int smallest = local_size;
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Allreduce(MPI_IN_PLACE, &smallest, 1, MPI_INT, MPI_MIN, comm),
                                 "MPI_Allreduce"));
  if (smallest != size) return Status::Unimplemented("the ranks are not all on one host");
  if (piece_bytes < 64) return Status::InvalidArgument("piece size below 64 bytes");

  std::unique_ptr<ShmAllreduce> shm(new ShmAllreduce());
  shm->rank_ = rank;
  shm->size_ = size;
  shm->slot_bytes_ = piece_bytes / 64 * 64;
  shm->piece_bytes_ = shm->slot_bytes_;
  shm->timeout_seconds_ = options.timeout_seconds;
  shm->whole_max_bytes_ = std::min(options.whole_max_bytes, shm->slot_bytes_);
  shm->mapped_bytes_ = static_cast<size_t>(size) * sizeof(Control) +
                       static_cast<size_t>(size) * 2 * static_cast<size_t>(shm->slot_bytes_);

  // Once every rank has it mapped, rank 0 unlinks the name: nothing outlives the job.
  HostSegment segment;
  KOLO_RETURN_IF_ERROR(MapHostSegment(comm, "kolo", shm->mapped_bytes_, &segment));
  shm->base_ = segment.base;
  int ok = segment.base != nullptr ? 1 : 0;
  int rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, comm);
  UnlinkHostSegment(segment);
  KOLO_RETURN_IF_ERROR(MpiStatus(rc, "MPI_Allreduce"));
  if (!ok) {
    return Status::Unimplemented("no shared-memory segment" +
                                 (segment.error.empty() ? std::string(" (another rank failed)")
                                                        : " (" + segment.error + ")"));
  }
  shm->control_ = static_cast<Control*>(shm->base_);
  shm->slots_ = static_cast<uint8_t*>(shm->base_) + static_cast<size_t>(size) * sizeof(Control);
  shm->pipelined_piece_bytes_ =
      std::clamp<int64_t>(options.pipelined_piece_bytes / 64 * 64, 64, shm->slot_bytes_);
  shm->pipelined_min_bytes_ = options.pipelined_min_bytes;
  shm->choose_path_ = options.choose_path;
  if (options.single_copy && size > 1) {
    shm->single_copy_min_bytes_ = std::max<int64_t>(options.single_copy_min_bytes, 1);
    shm->single_copy_max_bytes_ = options.single_copy_max_bytes;
    shm->chunk_bytes_ = std::max<int64_t>(options.chunk_bytes / 64 * 64, 64);
    KOLO_RETURN_IF_ERROR(shm->ProbeSingleCopy(comm));
  }
  return shm;
}

Status ShmAllreduce::ProbeSingleCopy(MPI_Comm comm) {
  // Every rank publishes a random value's address and the value, then reads
  // every peer's. A wrong value means the published pid names another process
  // here (the ranks are in different PID namespaces).
  std::random_device rd;
  probe_value_ = (static_cast<uint64_t>(rd()) << 32) | rd();
  Control& me = control_[rank_];
  me.pid.store(getpid(), std::memory_order_relaxed);
  me.probe_address.store(Address(&probe_value_), std::memory_order_relaxed);
  me.probe_value.store(probe_value_, std::memory_order_relaxed);
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Barrier(comm), "MPI_Barrier"));
  peer_pid_.resize(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    peer_pid_[r] = static_cast<int>(control_[r].pid.load(std::memory_order_relaxed));
  }
  std::string why_not;
  for (int r = 0; r < size_ && why_not.empty(); ++r) {
    if (r == rank_) continue;
    uint64_t seen = 0;
    Status read =
        ReadPeer(r, control_[r].probe_address.load(std::memory_order_relaxed), &seen, sizeof(seen));
    if (!read.ok()) {
      why_not = read.message();
    } else if (seen != control_[r].probe_value.load(std::memory_order_relaxed)) {
      why_not = "rank " + std::to_string(rank_) + " read another value than rank " +
                std::to_string(r) +
                "'s from its memory (the ranks are in different PID namespaces)";
    }
  }
  // All ranks agree: the first rank that could not read says why. The
  // allreduce is also the barrier after which nobody reads probe_value_.
  int first_refused = why_not.empty() ? size_ : rank_;
  KOLO_RETURN_IF_ERROR(MpiStatus(
      MPI_Allreduce(MPI_IN_PLACE, &first_refused, 1, MPI_INT, MPI_MIN, comm), "MPI_Allreduce"));
  if (first_refused == size_) {
    single_copy_ = true;
    scratch_.resize(static_cast<size_t>(chunk_bytes_));
    own_chunk_.resize(static_cast<size_t>(chunk_bytes_));
    return Status::OK();
  }
  char text[kWhyBytes] = {};
  std::snprintf(text, sizeof(text), "%s", why_not.c_str());
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Bcast(text, kWhyBytes, MPI_CHAR, first_refused, comm), "MPI_Bcast"));
  single_copy_why_not_ = text;
  return Status::OK();
}

ShmAllreduce::~ShmAllreduce() {
  if (base_ != nullptr) munmap(base_, mapped_bytes_);
}

uint8_t* ShmAllreduce::Slot(int rank, uint64_t seq) const {
  return slots_ + (static_cast<size_t>(rank) * 2 + seq % 2) * static_cast<size_t>(slot_bytes_);
}

void ShmAllreduce::SetPieceBytes(int64_t piece_bytes) {
  piece_bytes_ = std::clamp<int64_t>(piece_bytes / 64 * 64, 64, slot_bytes_);
}

Status ShmAllreduce::ReadPeer(int peer, uint64_t address, void* to, size_t bytes) {
  auto* dst = static_cast<uint8_t*>(to);
  while (bytes > 0) {
    iovec local{dst, bytes};
    iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(address)), bytes};
    const ssize_t n = process_vm_readv(peer_pid_[peer], &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // A partial read returns what it read; the next call says why it stopped.
      return Status::Internal(
          "rank " + std::to_string(rank_) + " cannot read rank " + std::to_string(peer) +
          "'s memory: " +
          (n < 0 ? ErrnoText("process_vm_readv") : std::string("process_vm_readv read nothing")));
    }
    dst += n;
    address += static_cast<uint64_t>(n);
    bytes -= static_cast<size_t>(n);
  }
  return Status::OK();
}

bool ShmAllreduce::PeerGone(int peer) const {
  return kill(peer_pid_[peer], 0) != 0 && errno == ESRCH;
}

void ShmAllreduce::Abort() {
  broken_ = true;
  if (control_ != nullptr) control_[rank_].failed.store(1, std::memory_order_release);
}

Status ShmAllreduce::Fail(Status status) {
  broken_ = true;
  control_[rank_].failed.store(1, std::memory_order_release);
  return status;
}

Status ShmAllreduce::WaitFor(int which, uint64_t at_least, int line) {
  Clock::time_point deadline{};
  for (int r = 0; r < size_; ++r) {
    const std::atomic<uint64_t>& counter =
        line < 0 ? control_[r].counter[which] : control_[r].small[line].seq;
    for (uint64_t spins = 0;; ++spins) {
      if (counter.load(std::memory_order_acquire) >= at_least) break;
      // Spin briefly (the peer is usually a few microseconds behind), then
      // yield so that oversubscribed ranks let each other run.
      if (spins < 2000) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
        continue;
      }
      // Checked right after the counter, which the peer raises before it can fail.
      if (control_[r].failed.load(std::memory_order_acquire) != 0) {
        return Fail(Status::Internal("rank " + std::to_string(r) +
                                     " failed a shared-memory allreduce (its log says why)"));
      }
      sched_yield();
      if (spins % 256 != 0) continue;
      // A peer that died waits for nobody: where the probe proved that the
      // peers' pids are theirs (single copy), a pid that is gone fails now
      // instead of at the timeout (a rank killed mid-allreduce, issue 47).
      if (single_copy_ && PeerGone(r)) {
        return Fail(Status::Internal("rank " + std::to_string(r) + " (pid " +
                                     std::to_string(peer_pid_[r]) +
                                     ") died during a shared-memory allreduce"));
      }
      if (deadline == Clock::time_point{}) {
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(timeout_seconds_));
      } else if (Clock::now() > deadline) {
        return Fail(Status::Internal("rank " + std::to_string(r) + " has not " +
                                     CounterName(which) + " of a shared-memory allreduce for " +
                                     std::to_string(static_cast<int>(timeout_seconds_)) +
                                     " s; it died or stopped"));
      }
    }
  }
  return Status::OK();
}

Status ShmAllreduce::Allreduce(const void* in, void* out, int64_t count, DataType dtype,
                               ReduceOp op) {
  if (broken_) {
    return Status::Internal("the shared-memory allreduce failed earlier; restart the job");
  }
  const auto* from = static_cast<const uint8_t*>(in);
  auto* to = static_cast<uint8_t*>(out);
  const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
  if (bytes <= whole_max_bytes_) {
    return AllreduceWhole(from, to, count, dtype, op);
  }
  const bool either = single_copy_ && bytes >= single_copy_min_bytes_ &&
                      bytes <= single_copy_max_bytes_ && bytes >= pipelined_min_bytes_;
  if (either && choose_path_) return AllreduceChosen(from, to, count, dtype, op);
  if (single_copy_ && bytes >= single_copy_min_bytes_ && bytes <= single_copy_max_bytes_) {
    return AllreduceSingleCopy(from, to, count, dtype, op);
  }
  if (bytes >= pipelined_min_bytes_ && size_ > 1) {
    return AllreducePipelined(from, to, count, dtype, op);
  }
  return AllreduceSlots(from, to, count, dtype, op);
}

Status ShmAllreduce::AllreduceWhole(const uint8_t* from, uint8_t* to, int64_t count, DataType dtype,
                                    ReduceOp op) {
  const size_t bytes = static_cast<size_t>(count) * DataTypeSize(dtype);
  if (bytes == 0) return Status::OK();  // as AllreduceSlots: no piece, no call (on every rank)
  const uint64_t seq = ++seq_;
  // The slot (or line) of this parity was last read in call seq - 2. Every
  // call waits until every rank has arrived, and a rank arrives at seq - 1
  // only after it has read everything of seq - 2: nobody reads it any more.
  const int line = bytes <= sizeof(Control::Line::data) ? static_cast<int>(seq % 2) : -1;
  auto place = [&](int r) { return line < 0 ? Slot(r, seq) : control_[r].small[line].data; };
  std::memcpy(place(rank_), from, bytes);
  if (line >= 0) control_[rank_].small[line].seq.store(seq, std::memory_order_release);
  control_[rank_].counter[kArrived].store(seq, std::memory_order_release);
  KOLO_RETURN_IF_ERROR(WaitFor(kArrived, seq, line));
  // The same order as the slices' owners reduce in: op(x[n-1], ... op(x[1], x[0])).
  std::memcpy(to, place(0), bytes);
  for (int r = 1; r < size_; ++r) ReduceInto(place(r), to, count, dtype, op);
  control_[rank_].counter[kReduced].store(seq, std::memory_order_release);
  control_[rank_].counter[kDone].store(seq, std::memory_order_release);
  return Status::OK();
}

// Both paths end with every rank waiting for every peer's kDone of the call's
// last sequence number; rank 0 publishes the next choices before it raises its
// own, so a peer reads them after that wait and no later choice can be
// published before the peer has arrived in its next call.
Status ShmAllreduce::AllreduceChosen(const uint8_t* from, uint8_t* to, int64_t count,
                                     DataType dtype, ReduceOp op) {
  const int64_t bytes = count * static_cast<int64_t>(DataTypeSize(dtype));
  const bool one_copy = path_.SingleCopy(bytes);
  const auto start = Clock::now();
  before_last_done_ = [this, bytes, one_copy, start] {
    if (rank_ != 0) return;
    path_.Record(bytes, one_copy, std::chrono::duration<double>(Clock::now() - start).count());
    control_[0].path_choice.store(path_.mask(), std::memory_order_relaxed);
  };
  Status status = one_copy ? AllreduceSingleCopy(from, to, count, dtype, op)
                           : AllreducePipelined(from, to, count, dtype, op);
  before_last_done_ = nullptr;
  if (status.ok() && rank_ != 0) {
    path_.set_mask(control_[0].path_choice.load(std::memory_order_relaxed));
  }
  return status;
}

uint8_t* ShmAllreduce::RingPiece(int rank, int64_t position) const {
  return slots_ + static_cast<size_t>(rank) * 2 * static_cast<size_t>(slot_bytes_) +
         static_cast<size_t>(position) * static_cast<size_t>(pipelined_piece_bytes_);
}

Status ShmAllreduce::AllreducePipelined(const uint8_t* from, uint8_t* to, int64_t count,
                                        DataType dtype, ReduceOp op) {
  const Part whole{from, to, count};
  return AllreducePipelined(Parts(&whole, 1), dtype, op);
}

Status ShmAllreduce::AllreduceParts(const std::vector<Part>& parts, DataType dtype, ReduceOp op) {
  if (broken_) {
    return Status::Internal("the shared-memory allreduce failed earlier; restart the job");
  }
  return AllreducePipelined(Parts(parts.data(), parts.size()), dtype, op);
}

ShmAllreduce::Parts::Parts(const Part* parts, size_t n) : parts_(parts), begin_(n + 1, 0) {
  for (size_t i = 0; i < n; ++i) begin_[i + 1] = begin_[i] + parts[i].count;
}

template <typename F>
void ShmAllreduce::Parts::ForRuns(int64_t begin, int64_t count, int64_t elem, F fn) const {
  // The last part that starts at or before `begin` (parts of no elements skipped).
  size_t i = static_cast<size_t>(std::upper_bound(begin_.begin(), begin_.end() - 1, begin) -
                                 begin_.begin()) -
             1;
  for (int64_t at = begin, end = begin + count; at < end; ++i) {
    const int64_t n = std::min(end, begin_[i + 1]) - at;
    if (n <= 0) continue;
    const int64_t offset = (at - begin_[i]) * elem;
    fn(static_cast<const uint8_t*>(parts_[i].in) + offset,
       static_cast<uint8_t*>(parts_[i].out) + offset, (at - begin) * elem, n);
    at += n;
  }
}

Status ShmAllreduce::AllreducePipelined(const Parts& parts, DataType dtype, ReduceOp op) {
  const int64_t count = parts.count();
  const int64_t elem = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t piece = std::max<int64_t>(pipelined_piece_bytes_ / elem, 1);
  const int64_t depth = 2 * slot_bytes_ / pipelined_piece_bytes_;
  // Every peer has finished reading this rank's slots in the calls before
  // (the slot path does not wait for that at its end).
  KOLO_RETURN_IF_ERROR(WaitFor(kDone, seq_));
  for (int64_t done = 0, i = 0; done < count; ++i) {
    const int64_t n = std::min(piece, count - done);
    const uint64_t seq = ++seq_;
    // This place of the ring was last used `depth` pieces ago.
    if (i >= depth) KOLO_RETURN_IF_ERROR(WaitFor(kDone, seq - static_cast<uint64_t>(depth)));
    const int64_t position = i % depth;
    uint8_t* mine = RingPiece(rank_, position);
    const int64_t begin = SplitBegin(n, size_, rank_);
    const int64_t len = SplitRows(n, size_, rank_);
    // Into the ring go only the slices that the peers reduce: this rank's
    // own slice is read from its input when it reduces.
    const int64_t bytes = n * elem;
    const bool streaming = pipelined_copy_.Streaming(bytes);
    Stopwatch work(CopyChooser::Timed(bytes));
    work.Start();
    // Elements [from, from + rows) of the piece into their place in the ring.
    auto copy_in = [&](int64_t from, int64_t rows) {
      uint8_t* place = mine + from * elem;
      parts.ForRuns(done + from, rows, elem,
                    [&](const uint8_t* in, uint8_t*, int64_t at, int64_t k) {
                      if (streaming) {
                        StreamingCopy(place + at, in, static_cast<size_t>(k * elem));
                      } else {
                        std::memcpy(place + at, in, static_cast<size_t>(k * elem));
                      }
                    });
    };
    copy_in(0, begin);
    copy_in(begin + len, n - begin - len);
    work.Stop();
    control_[rank_].counter[kArrived].store(seq, std::memory_order_release);
    KOLO_RETURN_IF_ERROR(WaitFor(kArrived, seq));

    // op(x[n-1], ... op(x[1], x[0])) of this rank's slice, into its place in
    // this rank's ring piece, where the peers copy it from; this rank's own
    // term comes from its input, run by run.
    work.Start();
    if (len > 0) {
      uint8_t* sum = mine + begin * elem;
      parts.ForRuns(done + begin, len, elem,
                    [&](const uint8_t* in, uint8_t*, int64_t at, int64_t rows) {
                      auto term = [&](int r) {
                        return r == rank_ ? in : RingPiece(r, position) + begin * elem + at;
                      };
                      ReduceTo(term(1), term(0), sum + at, rows, dtype, op);
                      for (int r = 2; r < size_; ++r)
                        ReduceInto(term(r), sum + at, rows, dtype, op);
                    });
    }
    work.Stop();
    control_[rank_].counter[kReduced].store(seq, std::memory_order_release);
    KOLO_RETURN_IF_ERROR(WaitFor(kReduced, seq));

    work.Start();
    for (int r = 0; r < size_; ++r) {
      const uint8_t* reduced = RingPiece(r, position);
      parts.ForRuns(done + SplitBegin(n, size_, r), SplitRows(n, size_, r), elem,
                    [&](const uint8_t*, uint8_t* out, int64_t at, int64_t rows) {
                      std::memcpy(out, reduced + SplitBegin(n, size_, r) * elem + at,
                                  static_cast<size_t>(rows * elem));
                    });
    }
    work.Stop();
    pipelined_copy_.Record(streaming, bytes, work.seconds());
    done += n;
    if (done == count && before_last_done_) before_last_done_();
    control_[rank_].counter[kDone].store(seq, std::memory_order_release);
  }
  // The next call, by whichever path, may write into the ring at once.
  return WaitFor(kDone, seq_);
}

Status ShmAllreduce::AllreduceSlots(const uint8_t* from, uint8_t* to, int64_t count, DataType dtype,
                                    ReduceOp op) {
  const int64_t elem = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t piece = piece_bytes_ / elem;
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(piece, count - done);
    const uint8_t* src = from + done * elem;
    uint8_t* dst = to + done * elem;
    const uint64_t seq = ++seq_;
    // This slot was last used two pieces ago; every rank must have read it.
    if (seq > 2) KOLO_RETURN_IF_ERROR(WaitFor(kDone, seq - 2));
    uint8_t* mine = Slot(rank_, seq);
    const int64_t bytes = n * elem;
    const bool streaming = copy_.Streaming(bytes);
    Stopwatch work(CopyChooser::Timed(bytes));  // this rank's own work on the piece
    work.Start();
    if (streaming) {
      StreamingCopy(mine, src, static_cast<size_t>(bytes));
    } else {
      std::memcpy(mine, src, static_cast<size_t>(bytes));
    }
    work.Stop();
    control_[rank_].counter[kArrived].store(seq, std::memory_order_release);
    KOLO_RETURN_IF_ERROR(WaitFor(kArrived, seq));

    // This rank's slice [begin, begin + len) of the piece, reduced in rank
    // order into this rank's own slot (the peers read other slices of it
    // meanwhile): it starts from rank 0's values; this rank's own term comes
    // from its input, which still holds what its slot held. Writing into the
    // rank's own slot keeps the stores in its own cache (stores into rank 0's
    // slot would take each line from rank 0's cache: docs/performance.md).
    const int64_t begin = SplitBegin(n, size_, rank_) * elem;
    const int64_t len = SplitRows(n, size_, rank_);
    uint8_t* sum = mine + begin;
    work.Start();
    if (rank_ != 0 && len > 0) {
      std::memcpy(sum, Slot(0, seq) + begin, static_cast<size_t>(len * elem));
    }
    for (int r = 1; r < size_ && len > 0; ++r) {
      ReduceInto(r == rank_ ? src + begin : Slot(r, seq) + begin, sum, len, dtype, op);
    }
    work.Stop();
    control_[rank_].counter[kReduced].store(seq, std::memory_order_release);
    KOLO_RETURN_IF_ERROR(WaitFor(kReduced, seq));

    // Slice s of the result is in rank s's slot.
    work.Start();
    for (int r = 0; r < size_; ++r) {
      const int64_t at = SplitBegin(n, size_, r) * elem;
      std::memcpy(dst + at, Slot(r, seq) + at, static_cast<size_t>(SplitRows(n, size_, r) * elem));
    }
    work.Stop();
    copy_.Record(streaming, bytes, work.seconds());
    control_[rank_].counter[kDone].store(seq, std::memory_order_release);
    done += n;
  }
  return Status::OK();
}

Status ShmAllreduce::AllreduceSingleCopy(const uint8_t* in, uint8_t* out, int64_t count,
                                         DataType dtype, ReduceOp op) {
  const int64_t elem = static_cast<int64_t>(DataTypeSize(dtype));
  const uint64_t seq = ++seq_;
  Control& me = control_[rank_];
  me.in.store(Address(in), std::memory_order_relaxed);
  me.out.store(Address(out), std::memory_order_relaxed);
  me.counter[kArrived].store(seq, std::memory_order_release);
  KOLO_RETURN_IF_ERROR(WaitFor(kArrived, seq));

  KOLO_RETURN_IF_ERROR(ReduceMySlice(in, out, count, dtype, op));
  me.counter[kReduced].store(seq, std::memory_order_release);
  // Every slice is reduced, and no peer reads an input any more: an in-place
  // rank may now overwrite its input with the other slices.
  KOLO_RETURN_IF_ERROR(WaitFor(kReduced, seq));

  for (int k = 1; k < size_; ++k) {
    const int s = (rank_ + k) % size_;  // each rank starts with another peer
    const int64_t at = SplitBegin(count, size_, s) * elem;
    Status read = ReadPeer(s, control_[s].out.load(std::memory_order_relaxed) + at, out + at,
                           static_cast<size_t>(SplitRows(count, size_, s) * elem));
    if (!read.ok()) return Fail(read);
  }
  ++single_copy_calls_;
  if (before_last_done_) before_last_done_();
  me.counter[kDone].store(seq, std::memory_order_release);
  // No rank returns (and lets its caller reuse the buffers) while a peer reads them.
  return WaitFor(kDone, seq);
}

// Slice rank_ of `out` = op(x[n-1], ... op(x[1], x[0])) of the ranks' inputs,
// chunk by chunk: the chunk accumulates in `out`, starting from rank 0's.
Status ShmAllreduce::ReduceMySlice(const uint8_t* in, uint8_t* out, int64_t count, DataType dtype,
                                   ReduceOp op) {
  const int64_t elem = static_cast<int64_t>(DataTypeSize(dtype));
  const int64_t chunk = std::max<int64_t>(chunk_bytes_ / elem, 1);
  const int64_t end = SplitBegin(count, size_, rank_) + SplitRows(count, size_, rank_);
  for (int64_t at = SplitBegin(count, size_, rank_); at < end; at += chunk) {
    const int64_t n = std::min(chunk, end - at);
    const size_t bytes = static_cast<size_t>(n * elem);
    const size_t offset = static_cast<size_t>(at * elem);
    uint8_t* sum = out + offset;
    const uint8_t* mine = in + offset;
    if (rank_ == 0) {
      if (sum != mine) std::memcpy(sum, mine, bytes);
    } else {
      if (sum == mine) {  // in place: rank 0's chunk goes where this rank's is
        std::memcpy(own_chunk_.data(), mine, bytes);
        mine = own_chunk_.data();
      }
      Status read =
          ReadPeer(0, control_[0].in.load(std::memory_order_relaxed) + offset, sum, bytes);
      if (!read.ok()) return Fail(read);
    }
    for (int r = 1; r < size_; ++r) {
      const uint8_t* x = mine;
      if (r != rank_) {
        Status read = ReadPeer(r, control_[r].in.load(std::memory_order_relaxed) + offset,
                               scratch_.data(), bytes);
        if (!read.ok()) return Fail(read);
        x = scratch_.data();
      }
      ReduceInto(x, sum, n, dtype, op);
    }
  }
  return Status::OK();
}

}  // namespace kolo
