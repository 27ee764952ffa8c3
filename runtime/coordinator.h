// The coordinator's decisions: a pure function of the requests that ranks
// sent, with no MPI, no threads and an injected clock, so that it is tested
// and benchmarked with any number of simulated ranks.
//
// Protocol (one negotiation cycle, see docs/architecture.md):
//   1. Every rank's new requests are added with AddRequests().
//   2. ComputeResponses() returns, in the order the tensors first arrived, a
//      response for every tensor that all ranks have now asked for (ranks that
//      joined count as present for allreduce), an ERROR response for a tensor
//      that ranks asked for in disagreeing ways (naming ranks and values), an
//      ERROR for tensors stalled past the shutdown time, and JOIN once every
//      rank has joined. Members of a group are held until the whole group is
//      decided, then emitted together.
//      When a tensor reaches the stall check time, and with every stall
//      warning after, a MISSING response names the ranks that have not sent
//      it. A missing rank that holds the same name on another process set (or
//      held it there until that set failed it as a mismatch) answers with a
//      request naming that set, and the tensor then fails with a process-set
//      mismatch.
//   3. Unnamed collectives pair up by their number in each rank's call order
//      (PairingKey: epoch and number, whatever the collective), wherever each
//      rank called them (call site), as Horovod's do. When the ranks called
//      number n from different places and their requests disagree, an
//      exception on some rank skipped a collective that the others called,
//      and the ranks are out of step. The ranks at the place that is behind
//      get a RESYNC: they fail their unnamed collectives numbered n and later
//      and number their next one n again, so it meets the others' waiting one.
//      Behind: a place that another rank has already left (by a RESYNC, or by
//      the last pair when the ranks called it from different places); failing
//      that, every place but the one called in the latest round (a tie: the
//      one fewer ranks called, then rank order). An unnamed tensor that stalls
//      out is a RESYNC of the ranks that sent it; a barrier or join that
//      completes is one for every unnamed tensor still pending (ranks number
//      afresh after it, in a new epoch); so is, after a second, an unnamed
//      tensor that keeps its ranks from a barrier the others wait in (ranks
//      that are in the barrier never called it).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "message.h"
#include "metrics.h"

namespace kolo {

// A set of ranks, one bit each, so that whole words of ranks are counted at once.
class RankBits {
 public:
  explicit RankBits(int size = 0) : words_((static_cast<size_t>(size) + 63) / 64, 0) {}
  bool Test(int rank) const { return (words_[rank / 64] >> (rank % 64)) & 1u; }
  void Set(int rank) { words_[rank / 64] |= uint64_t{1} << (rank % 64); }
  void Clear() { std::fill(words_.begin(), words_.end(), 0); }
  bool Empty() const;
  int Count() const;
  void Or(const RankBits& other) {
    for (size_t i = 0; i < words_.size(); ++i) words_[i] |= other.words_[i];
  }
  // Adds `other`'s ranks; returns how many were not here before, and in
  // `first_added` (when given and still -1) the lowest of those.
  int Merge(const RankBits& other, int* first_added = nullptr);
  // How many of `other`'s ranks are not here.
  int CountMissing(const RankBits& other) const;
  const std::vector<uint64_t>& words() const { return words_; }

 private:
  std::vector<uint64_t> words_;
};

struct StallSettings {
  double check_seconds = 60.0;    // warn after this long; 0 = off
  double shutdown_seconds = 0.0;  // fail after this long; 0 = never
};

struct CoordinatorOutcome {
  std::vector<Response> responses;
  std::vector<std::string> warnings;  // one line per stalled tensor
  // Every tensor past the stall check time now (ranks within the set), for the
  // monitor; empty when none is.
  std::vector<StalledTensor> stalled;
  // For every tensor decided this round whose ranks did not all come in the
  // same round: the rank that came last (the lowest of those in that round).
  std::vector<int> last_arrivals;
};

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;

  // `process_set`: the id of the set this coordinator serves.
  Coordinator(int size, StallSettings stall, int process_set = 0);

  void AddRequests(int rank, const std::vector<Request>& requests, Clock::time_point now);
  // Ranks whose requests equal rank 0's `reference` requests (see
  // RequestMessage): `whole` holds them all; each of `partial` holds the
  // reference requests whose bits are set. The reference requests must have
  // been added for rank 0 already. Costs O(reference x ranks / 64) plus the
  // partial bits, instead of a decode and a table lookup per rank and request.
  void AddReference(const std::vector<Request>& reference, const RankBits& whole,
                    const std::vector<std::pair<int, std::vector<uint64_t>>>& partial,
                    Clock::time_point now);
  CoordinatorOutcome ComputeResponses(Clock::time_point now);

  // Tensors asked for by some ranks but not yet by all.
  size_t pending() const { return table_.size(); }

 private:
  struct Entry {
    Request first;  // the first request that arrived; the others are compared with it
    RankBits submitted;
    int count = 0;                 // ranks in `submitted`
    std::string mismatch;          // the first disagreement found, empty if none
    std::vector<int> disagreeing;  // ranks that differ from `first`
    std::vector<int64_t> dim0;     // allgather: dim 0 of every rank
    Clock::time_point first_seen;
    // The rounds (rounds_) of the first and the latest arrival, and the rank
    // of the latest.
    uint64_t first_round = 0, last_round = 0;
    int last_rank = -1;
    Clock::time_point last_warned;
    bool warned = false;
    // Barrier and the process-set operations: since when the ranks missing it
    // have waited in unnamed collectives that its ranks never called.
    std::optional<Clock::time_point> deadlocked_since;
    // Unnamed only: every request, in arrival order (a RESYNC takes some
    // ranks' out again), and whether ranks at different places disagree.
    struct Arrival {
      Request request;
      uint64_t round = 0;  // rounds_ when it came
      Clock::time_point at;
    };
    std::vector<Arrival> arrivals;
    bool sites_differ = false;
    // Ranks that refused the collective on their calling thread
    // (Request::refusal), in arrival order, and the first one's reason. Any
    // refusal fails the collective on every rank once all have sent it.
    std::vector<int> refused;
    std::string refusal;
    // Requests from a rank that refused this entry and has started the same
    // collective again since: the next one of its name, added as a new entry
    // once this one is decided.
    std::vector<Request> later;
  };
  struct Group {
    int size = 0;
    std::vector<Response> decided;
    std::string error;
  };

  void Add(const Request& request, Clock::time_point now);
  // Adds `request` to `entry` (`inserted`: it is the entry's first).
  void AddTo(Entry& entry, const Request& request, bool inserted, Clock::time_point now,
             uint64_t round);
  void Compare(Entry& entry, const Request& request);
  // Takes the decided entry at `it` out of the table and adds the requests it
  // held for later (the next collective of its name from ranks that refused).
  void EraseDecided(std::unordered_map<std::string, Entry>::iterator it, Clock::time_point now);
  Response Decide(const std::string& name, Entry& entry);
  void Emit(Response response, const Request& request, std::vector<Response>* out);
  void CheckStalls(Clock::time_point now, CoordinatorOutcome* outcome);
  // An unnamed collective paired: the ranks are in step if they called it
  // from one place; else each place is one its ranks have left.
  void NotePlacesPaired(const Entry& entry);
  // Unnamed collective number n, called from different places, disagreeing:
  // RESYNCs the ranks that are behind (see the protocol above).
  void Resync(Entry& entry, CoordinatorOutcome* outcome);
  // A RESYNC of `ranks` for the unnamed tensors numbered `first.unnamed_index`
  // and later of `first`'s epoch: the response, and those ranks' requests
  // taken out of the table.
  void EmitResync(const Request& first, const RankBits& ranks, std::string error,
                  std::vector<Response>* out);
  // A barrier or join completed: RESYNCs every unnamed tensor still pending.
  void ResyncAfterBarrier(std::vector<Response>* out);
  // Some ranks wait in a barrier (or a process-set operation) that the others
  // cannot reach: those wait in unnamed collectives that the ranks in the
  // barrier never called (they skipped them). After kDeadlockGrace, RESYNCs
  // those unnamed collectives, so their ranks go on to the barrier.
  void BreakBarrierDeadlocks(Clock::time_point now, CoordinatorOutcome* outcome);
  static constexpr double kDeadlockGrace = 1.0;  // seconds
  // The ranks that did (or did not) submit the entry's tensor, as "0, 2".
  std::string RanksWhere(const Entry& entry, bool submitted) const;
  // The ranks of `ranks`, as "0, 2".
  std::string RankList(const RankBits& ranks) const;

  int size_;
  StallSettings stall_;
  int process_set_;
  std::unordered_map<std::string, Entry> table_;  // by PairingKey
  std::vector<std::string> arrival_order_;        // keys in table_, first arrival first
  uint64_t rounds_ = 0;                           // ComputeResponses calls so far
  // Unnamed collectives: the places that ranks left by a RESYNC since the
  // ranks last paired one, or, when that pair came from several places, those
  // places (a place that another rank has left is behind).
  std::unordered_map<std::string, RankBits> left_;
  std::unordered_map<std::string, Group> groups_;
  RankBits joined_;
  int joined_count_ = 0;
  int last_joined_ = -1;
};

}  // namespace kolo
