// One process set as the thread that runs the cycles sees it: its communicators (MPI,
// and NCCL's once a device tensor used them) and data movers, the tensors waiting on it, its
// response cache, its coordinator (on its rank 0), and the negotiation round that decides what is
// ready everywhere.
#pragma once

#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "config.h"
#include "coordinator.h"
#include "job.h"
#include "ops/bit_round.h"
#include "ops/data_mover.h"
#include "response_cache.h"
#include "work.h"

namespace kolo {

// What the user threads may read about a set (immutable once published).
struct ProcessSetInfo {
  int id = 0;
  std::vector<int> ranks;  // global ranks, in set order
  int rank_in_set = -1;    // -1: this process is not a member
};

struct NegotiationOutcome {
  std::vector<Response> responses;  // cached-ready first (bit order), then the coordinator's
  bool shutdown = false;            // some rank asked to shut down
  int shutdown_rank = -1;           // with shutdown: the lowest global rank that asked
  bool slow_path = false;           // the round asked the coordinator (the timeline marks it)
  // What the set's rank 0 published for this round (ProcessSet::Publish), on
  // every rank; empty when nothing was.
  std::vector<uint8_t> published;
  // The round's bit vector had not come back from every rank within the
  // patience given to Negotiate: the round is still in flight, nothing else is
  // set, and the next Negotiate (on any thread that runs the cycles) finishes it.
  bool unfinished = false;
  // The set's rank 0: the tensors stalled now changed (ProcessSet::stalled).
  bool stalls_changed = false;
  // The set's rank 0: for the tensors its coordinator decided, the global rank
  // that came last, where the ranks came in different rounds.
  std::vector<int> last_arrivals;
};

class ProcessSet {
 public:
  // `host`: the set's host mover (MakeHostMover); `gpu` moves its device
  // tensors and outlives the set. The set owns its device communicators
  // (made from `gpu` on first use, destroyed with the set).
  ProcessSet(std::shared_ptr<const ProcessSetInfo> info, MpiComm comm,
             std::unique_ptr<HostMover> host, std::unique_ptr<BitRound> round, Gpu* gpu,
             const Config& config);

  const ProcessSetInfo& info() const { return *info_; }
  int size() const { return static_cast<int>(info_->ranks.size()); }
  int rank() const { return info_->rank_in_set; }
  MPI_Comm comm() const { return comm_.get(); }
  const Movers& movers() const { return movers_; }
  // The negotiation round's exchange (its Abort may be called from any thread).
  BitRound& round() const { return *round_; }

  // Takes a new entry (from the tensor queue) into this set's bookkeeping.
  void Add(TensorEntry&& entry);
  // One negotiation round (collective over the set). `patience`: how long to
  // wait for the other ranks' bit vectors before returning with
  // outcome->unfinished (the round stays in flight; the next call finishes it
  // and ignores its own arguments' request_shutdown). Only the bit vector
  // waits on other ranks' programs: once it is back, every rank of the set is
  // in the same round, and the rest of the round does not wait for long.
  Status Negotiate(bool request_shutdown, Clock::time_point now, NegotiationOutcome* outcome,
                   Clock::duration patience = Clock::duration::max());

  // The set's rank 0: the tensors its coordinator saw stalled in its last
  // round, with global ranks.
  const std::vector<StalledTensor>& stalled() const { return stalled_; }

  // The pending entry named `name`, or null (a joined rank has none).
  TensorEntry* Find(const std::string& name);
  // Removes and returns the entry, stamped as negotiated at `negotiated` (the
  // caller completes its work); nullopt when this rank has none (joined).
  std::optional<TensorEntry> Take(const std::string& name, Clock::time_point negotiated);
  // Removes the entries `response` (a data response) names and returns them
  // with it.
  Job TakeJob(Response response, Clock::time_point negotiated);
  bool has_pending() const { return !pending_.empty(); }
  // Sends `request` to the coordinator next round without a local entry (the
  // answer to a MISSING response: "this rank has the tensor on another set").
  void Announce(Request request) { uncached_.push_back(std::move(request)); }
  // Sends `refusal` (a request this rank refused, Request::refusal) to the
  // coordinator next round, without a local entry. A cached response of its
  // name is marked invalid, so that other ranks' cache hits for it go to the
  // coordinator in the same round and meet the refusal.
  void Refuse(Request refusal);
  // On the set's rank 0: sends `message` to every rank of the set with the
  // next negotiation round, so that all of them get it in the same round (in
  // NegotiationOutcome::published).
  void Publish(std::vector<uint8_t> message) { to_publish_ = std::move(message); }
  // Fails every pending entry with `status` and forgets them.
  std::vector<TensorEntry> TakeAll();
  // Removes and returns the pending unnamed entries of `epoch` numbered `from`
  // to `last`.
  std::vector<TensorEntry> TakeUnnamed(int64_t epoch, int64_t from,
                                       int64_t last = std::numeric_limits<int64_t>::max());

 private:
  void Classify(TensorEntry& entry);
  void ClassifyGroup(const std::vector<std::string>& members);
  void ExpireStalledCacheHits(Clock::time_point now);
  // Waits for the round in flight; false in *done once `patience` passed first.
  Status WaitForRound(Clock::duration patience, bool* done);
  Status RunSlowPath(Clock::time_point now, std::vector<Response>* responses);
  std::vector<Request> HeldForCoordinator() const;
  RequestMessage AnswerReference(const std::vector<uint64_t>& reference) const;
  void CacheResponses(const std::vector<Response>& responses);
  // Sends the cache hit at `bit` to the coordinator instead; a group member
  // takes the rest of its group with it.
  void MoveToUncached(int bit);
  // The bits of this rank's waiting cache hits that are members of `group`.
  std::vector<int> GroupHitBits(const std::string& group) const;
  Status BroadcastPublished(std::vector<uint8_t>* message);

  std::shared_ptr<const ProcessSetInfo> info_;
  MpiComm comm_;
  std::unique_ptr<HostMover> host_mover_;
  std::unique_ptr<GpuComms> gpu_comms_;  // over comm_: destroyed before it
  Movers movers_;
  Config config_;

  std::unordered_map<std::string, TensorEntry> pending_;  // by name
  std::vector<Request> uncached_;                         // to send to the coordinator next round
  std::unordered_set<std::string> delivered_;             // pending names the coordinator has
  std::map<int, std::string> cache_hits_;  // bit -> name, waiting for the bit everywhere
  std::vector<int> invalid_bits_;          // cached entries this rank found stale
  // Group -> the names of its members pending so far, until all have arrived
  // and the group is classified as one.
  std::unordered_map<std::string, std::vector<std::string>> arriving_groups_;
  ResponseCache cache_;
  std::unique_ptr<Coordinator> coordinator_;  // on the set's rank 0 only
  std::vector<StalledTensor> stalled_;        // rank 0: see stalled()
  bool stalls_changed_ = false;               // since the last outcome said so
  std::vector<int> last_arrivals_;            // rank 0: for the next outcome
  bool joined_ = false;
  bool warned_group_too_large_ = false;  // rank 0: a group larger than the cache was reported
  Clock::time_point last_slow_round_;
  std::vector<uint8_t> to_publish_;  // rank 0: goes out with the next round
  // The round's bit vector, in flight from round_->Start until it is back
  // (across Negotiate calls when one ran out of patience).
  std::unique_ptr<BitRound> round_;  // over MPI or shared memory (ops/bit_round.h)
  bool round_in_flight_ = false;
  std::vector<uint64_t> round_bits_;
  bool round_shutdown_ = false;  // this rank asked to shut down in the round in flight
};

}  // namespace kolo
