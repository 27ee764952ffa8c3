#include "ops/bit_round.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "ops/mpi.h"
#include "ops/shm_segment.h"
#include "ops/ulfm.h"

namespace kolo {
namespace {

// A set of one rank: the AND of one vector is that vector, so the round is
// back as it starts, without a call into MPI (a job or process set of one
// rank negotiates at the cost of a function call).
class SoloBitRound : public BitRound {
 public:
  Status Start(std::vector<uint64_t>*) override { return Status::OK(); }
  Status Test(bool* back) override {
    *back = true;
    return Status::OK();
  }
  const char* kind() const override { return "one rank"; }
};

class MpiBitRound : public BitRound {
 public:
  explicit MpiBitRound(MPI_Comm comm) : comm_(comm) {}

  Status Start(std::vector<uint64_t>* bits) override {
    return MpiStatus(MPI_Iallreduce(MPI_IN_PLACE, bits->data(), static_cast<int>(bits->size()),
                                    MPI_UINT64_T, MPI_BAND, comm_, &request_),
                     "MPI_Iallreduce");
  }
  Status Test(bool* back) override {
    int finished = 0;
    KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Test(&request_, &finished, MPI_STATUS_IGNORE), "MPI_Test"));
    *back = finished != 0;
    return Status::OK();
  }
  const char* kind() const override { return "MPI_Iallreduce"; }

 private:
  MPI_Comm comm_;
  MPI_Request request_ = MPI_REQUEST_NULL;
};

// The segment starts with a Header, then one RankControl per rank of the host,
// then each rank's two slots, then the leader's two published results. A
// vector of up to kInlineWords words travels in the cache line of its round
// counter, so that a peer gets both with one transfer between the cores.
struct Header {
  // 1 + the global rank of a rank that gave up (Abort, or an error): nobody
  // waits for rounds of this segment any more.
  alignas(64) std::atomic<uint64_t> failed;
  // The leader, when the set spans hosts: the last round whose AND over all
  // hosts is in its published result.
  std::atomic<uint64_t> published;
};
constexpr size_t kInlineWords = 6;
// A round of this rank's, in the line of its parity.
struct RoundLine {
  alignas(64) std::atomic<uint64_t> round;  // the round whose vector this line holds
  std::atomic<uint64_t> words;              // that round's vector length
  uint64_t bits[kInlineWords];              // the vector, when it fits
};
static_assert(sizeof(RoundLine) == 64, "a round's counter and short vector share a cache line");
struct RankControl {
  RoundLine line[2];                     // by round parity
  alignas(64) std::atomic<int64_t> pid;  // set at Create
  std::atomic<uint64_t> pid_namespace;   // its inode, 0 if unknown
  std::atomic<int64_t> global_rank;      // for messages
};
static_assert(std::atomic<uint64_t>::is_always_lock_free,
              "atomics shared between processes must be lock-free");

// Not-yet answers between two checks that the ranks waited for still live.
constexpr uint64_t kLivenessEvery = 256;

uint64_t PidNamespace() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? static_cast<uint64_t>(st.st_ino) : 0;
}

class ShmBitRound : public BitRound {
 public:
  ShmBitRound(MPI_Comm comm, int global_rank) : whole_(comm), global_rank_(global_rank) {}
  ~ShmBitRound() override {
    if (base_ != nullptr) munmap(base_, mapped_bytes_);
  }

  // Collective over `comm`; `local` (owned from here) holds the ranks on this
  // host, `cross` (owned, null on the other ranks) the host leaders when the
  // set spans hosts.
  Status Map(MPI_Comm comm, MPI_Comm local, MPI_Comm cross, int max_words);

  Status Start(std::vector<uint64_t>* bits) override {
    ++round_;
    bits_ = bits;
    over_mpi_ = bits->size() > static_cast<size_t>(max_words_);
    if (over_mpi_) return whole_.Start(bits);
    RoundLine& line = control_[local_rank_].line[round_ % 2];
    std::memcpy(Slot(local_rank_, round_), bits->data(), bits->size() * sizeof(uint64_t));
    line.words.store(bits->size(), std::memory_order_relaxed);
    line.round.store(round_, std::memory_order_release);
    phase_ = Phase::kHost;
    idle_tests_ = 0;
    return Status::OK();
  }

  Status Test(bool* back) override {
    *back = false;
    if (aborted_.load(std::memory_order_acquire)) {
      return Status::Aborted("the negotiation round was aborted on this rank");
    }
    if (over_mpi_) return whole_.Test(back);
    switch (phase_) {
      case Phase::kHost:
        if (local_rank_ != 0 && several_hosts_) return TestPublished(back);
        for (int r = 0; r < local_size_; ++r) {
          if (control_[r].line[round_ % 2].round.load(std::memory_order_acquire) < round_) {
            return NotYet(r);
          }
        }
        KOLO_RETURN_IF_ERROR(AndHost());
        if (!several_hosts_) {
          *back = true;
          return Status::OK();
        }
        KOLO_RETURN_IF_ERROR(Fail(cross_round_->Start(bits_)));
        phase_ = Phase::kCross;
        [[fallthrough]];
      case Phase::kCross: {
        KOLO_RETURN_IF_ERROR(Fail(cross_round_->Test(back)));
        if (!*back) return Status::OK();
        std::memcpy(Published(round_), bits_->data(), bits_->size() * sizeof(uint64_t));
        header_->published.store(round_, std::memory_order_release);
        return Status::OK();
      }
    }
    return Status::OK();
  }

  void Abort() override {
    aborted_.store(true, std::memory_order_release);
    RevokeIfUsable(cross_.get());  // the other hosts' leaders stop too
    if (header_ != nullptr) {
      uint64_t none = 0;
      header_->failed.compare_exchange_strong(none, static_cast<uint64_t>(global_rank_) + 1,
                                              std::memory_order_acq_rel);
    }
  }
  const char* kind() const override { return "shared memory"; }

 private:
  enum class Phase { kHost, kCross };

  // Where rank `local_rank` writes its vector of `round`: in the round's line
  // when it fits (every rank's vector has the same length), else in its slot.
  uint64_t* Slot(int local_rank, uint64_t round) const {
    if (bits_->size() <= kInlineWords) return control_[local_rank].line[round % 2].bits;
    return slots_ + (static_cast<size_t>(local_rank) * 2 + round % 2) * max_words_;
  }
  uint64_t* Published(uint64_t round) const {
    return slots_ + (static_cast<size_t>(local_size_) * 2 + round % 2) * max_words_;
  }

  // Every rank of the host has written this round's slot: their AND into bits_.
  Status AndHost() {
    const uint64_t words = bits_->size();
    for (int r = 0; r < local_size_; ++r) {
      if (r == local_rank_) continue;
      const uint64_t theirs_words =
          control_[r].line[round_ % 2].words.load(std::memory_order_relaxed);
      if (theirs_words != words) {
        return Fail(Status::Internal(
            "rank " + std::to_string(control_[r].global_rank.load(std::memory_order_relaxed)) +
            "'s negotiation round has " + std::to_string(theirs_words) + " words, this rank's " +
            std::to_string(words) + " (do the ranks run with the same KOLO_CACHE_CAPACITY?)"));
      }
      const uint64_t* theirs = Slot(r, round_);
      for (uint64_t w = 0; w < words; ++w) (*bits_)[w] &= theirs[w];
    }
    return Status::OK();
  }

  Status TestPublished(bool* back) {
    if (header_->published.load(std::memory_order_acquire) < round_) return NotYet(0);
    std::memcpy(bits_->data(), Published(round_), bits_->size() * sizeof(uint64_t));
    *back = true;
    return Status::OK();
  }

  // Local rank `waited` has not arrived yet: fine, unless a rank gave up or
  // the process it waits for is gone.
  Status NotYet(int waited) {
    const uint64_t failed = header_->failed.load(std::memory_order_acquire);
    if (failed != 0) {
      Abort();  // a leader: the other hosts stop too
      return Status::Aborted("rank " + std::to_string(failed - 1) +
                             " gave up the negotiation round (its log says why)");
    }
    if (++idle_tests_ % kLivenessEvery != 0 || !pids_comparable_) return Status::OK();
    const int64_t pid = control_[waited].pid.load(std::memory_order_relaxed);
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) {
      return Fail(Status::Aborted(
          "rank " + std::to_string(control_[waited].global_rank.load(std::memory_order_relaxed)) +
          " (pid " + std::to_string(pid) + ") died during a negotiation round"));
    }
    return Status::OK();
  }

  // Marks the segment failed when `status` is an error, so that no rank of
  // the host waits for this one; returns `status`.
  Status Fail(Status status) {
    if (!status.ok()) Abort();
    return status;
  }

  MpiBitRound whole_;  // the set's communicator: vectors longer than the slots
  int global_rank_;
  MpiComm local_;
  MpiComm cross_;
  std::unique_ptr<BitRound> cross_round_;
  int local_rank_ = 0;
  int local_size_ = 1;
  size_t max_words_ = 0;
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  Header* header_ = nullptr;
  RankControl* control_ = nullptr;
  uint64_t* slots_ = nullptr;
  bool pids_comparable_ = false;
  bool several_hosts_ = false;  // the set spans hosts: the leaders exchange over `cross_`

  uint64_t round_ = 0;
  std::vector<uint64_t>* bits_ = nullptr;
  bool over_mpi_ = false;
  Phase phase_ = Phase::kHost;
  uint64_t idle_tests_ = 0;
  std::atomic<bool> aborted_{false};
};

Status ShmBitRound::Map(MPI_Comm comm, MPI_Comm local, MPI_Comm cross, int max_words) {
  local_ = MpiComm(local);
  cross_ = MpiComm(cross);
  if (cross_) cross_round_ = MakeMpiBitRound(cross_.get());
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  int size = 1;
  MPI_Comm_size(comm, &size);
  several_hosts_ = local_size_ < size;
  max_words_ = static_cast<size_t>(max_words);
  mapped_bytes_ = sizeof(Header) + static_cast<size_t>(local_size_) * sizeof(RankControl) +
                  (static_cast<size_t>(local_size_) + 1) * 2 * max_words_ * sizeof(uint64_t);

  // Once every rank of the set has it mapped, it is unlinked: nothing
  // outlives the job.
  HostSegment segment;
  KOLO_RETURN_IF_ERROR(MapHostSegment(local, "kolo-round", mapped_bytes_, &segment));
  base_ = segment.base;
  if (base_ != nullptr) {
    header_ = static_cast<Header*>(base_);
    control_ = reinterpret_cast<RankControl*>(static_cast<uint8_t*>(base_) + sizeof(Header));
    slots_ = reinterpret_cast<uint64_t*>(control_ + local_size_);
    RankControl& me = control_[local_rank_];
    me.pid.store(getpid(), std::memory_order_relaxed);
    me.pid_namespace.store(PidNamespace(), std::memory_order_relaxed);
    me.global_rank.store(global_rank_, std::memory_order_relaxed);
  }
  // Every rank of the set agrees (all hosts): the shared-memory round, or none.
  int ok = base_ != nullptr ? 1 : 0;
  const int rc = MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_LAND, comm);
  UnlinkHostSegment(segment);
  KOLO_RETURN_IF_ERROR(MpiStatus(rc, "MPI_Allreduce"));
  if (!ok) {
    return Status::Unimplemented("no shared-memory segment" +
                                 (segment.error.empty() ? std::string(" on another host or rank")
                                                        : " (" + segment.error + ")"));
  }
  // Pids mean the same process to every rank of the host only in one PID
  // namespace; elsewhere a dead rank is noticed by the stall check alone.
  pids_comparable_ = true;
  for (int r = 0; r < local_size_; ++r) {
    const uint64_t ns = control_[r].pid_namespace.load(std::memory_order_relaxed);
    pids_comparable_ &= ns != 0 && ns == control_[local_rank_].pid_namespace.load();
  }
  return Status::OK();
}

}  // namespace

std::unique_ptr<BitRound> MakeMpiBitRound(MPI_Comm comm) {
  return std::make_unique<MpiBitRound>(comm);
}

Result<std::unique_ptr<BitRound>> MakeBitRound(MPI_Comm comm, const BitRoundOptions& options,
                                               std::string* why) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if (size == 1) {
    *why = "one rank: no exchange";
    return std::unique_ptr<BitRound>(std::make_unique<SoloBitRound>());
  }
  if (!options.shared_memory) {
    *why = "KOLO_SHM_NEGOTIATION=0";
    return MakeMpiBitRound(comm);
  }
  MPI_Comm local;
  KOLO_RETURN_IF_ERROR(SplitByHost(comm, rank, &local));
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  int largest = local_size;
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Allreduce(MPI_IN_PLACE, &largest, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce"));
  if (largest == 1) {  // one rank per host: nothing to share
    MPI_Comm_free(&local);
    *why = "one rank per host";
    return MakeMpiBitRound(comm);
  }
  MPI_Comm cross = MPI_COMM_NULL;
  if (local_size < size) {
    KOLO_RETURN_IF_ERROR(MpiStatus(
        MPI_Comm_split(comm, local_rank == 0 ? 0 : MPI_UNDEFINED, rank, &cross), "MPI_Comm_split"));
    if (cross != MPI_COMM_NULL) MPI_Comm_set_errhandler(cross, MPI_ERRORS_RETURN);
  }
  auto shm = std::make_unique<ShmBitRound>(comm, options.global_rank);
  Status mapped = shm->Map(comm, local, cross, options.max_words);
  if (mapped.code() == StatusCode::kUnimplemented) {
    *why = mapped.message() + "; over MPI";
    return MakeMpiBitRound(comm);
  }
  KOLO_RETURN_IF_ERROR(mapped);
  *why = local_size < size ? "shared memory within each host, MPI between the hosts' leaders"
                           : "shared memory";
  return std::unique_ptr<BitRound>(std::move(shm));
}

}  // namespace kolo
