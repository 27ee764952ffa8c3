// A process set's negotiation round (ProcessSet::Negotiate): the bit vector
// of cache hits and flags, and the slow path through the coordinator on the
// set's rank 0 (docs/architecture.md, "The negotiation round").
#include <algorithm>
#include <climits>
#include <thread>
#include <unordered_set>
#include <utility>

#include "logging.h"
#include "process_set.h"

namespace kolo {
namespace {

// Flags travel in word 0 of the bit vector. The vector is reduced with a
// bitwise AND (cache bits must be set everywhere); flags and invalid bits need
// an OR, so they travel inverted: OR(a, b) = ~AND(~a, ~b).
enum Flag : uint64_t {
  kHasUncached = 1,  // some rank has requests for the coordinator
  kShutdown = 2,     // some rank asked to shut down
  kJoined = 4,       // some rank has joined: the cache is bypassed
  kStallCheck = 8,   // the coordinator holds waiting tensors and wants a round to check them
  kPublish = 16,     // rank 0 broadcasts a message after the bit vector (autotune's settings)
};

// How often the coordinator asks for a round while tensors wait on it.
double StallCheckInterval(const Config& c) {
  return std::max(0.05, std::min(1.0, c.stall_check_seconds / 4));
}

bool TestBit(const std::vector<uint64_t>& v, size_t word0, int bit) {
  return (v[word0 + bit / 64] >> (bit % 64)) & 1u;
}
void SetBit(std::vector<uint64_t>* v, size_t word0, int bit) {
  (*v)[word0 + bit / 64] |= uint64_t{1} << (bit % 64);
}

}  // namespace

Status ProcessSet::WaitForRound(Clock::duration patience, bool* done) {
  // Peers usually arrive within microseconds: spin briefly, then back off so a
  // waiting background thread does not take the core from the training thread.
  auto start = Clock::now();
  auto sleep = std::chrono::microseconds(20);
  for (uint64_t tests = 1;; ++tests) {
    KOLO_RETURN_IF_ERROR(round_->Test(done));
    if (*done) {
      round_in_flight_ = false;
      return Status::OK();
    }
    // The clock costs as much as a test of a shared-memory round: read it
    // every 16th test while spinning.
    if (tests % 16 != 0) continue;
    const auto waited = Clock::now() - start;
    if (waited < std::chrono::microseconds(50)) continue;
    if (waited >= patience) return Status::OK();
    // Every rank's background thread joins a round every cycle, whatever its
    // training thread does; a round that does not complete means a rank that
    // cannot: its process is stopped or hangs, or its host is cut off. The
    // exchange cannot be cancelled, so kolo stops on this rank (the error goes
    // to every pending and later operation) instead of waiting for ever.
    const double limit = config_.stall_check_disabled ? 0 : config_.stall_shutdown_seconds;
    if (limit > 0 && std::chrono::duration<double>(waited).count() >= limit) {
      return Status::Aborted(
          "the other ranks of process set " + std::to_string(info_->id) +
          " did not answer a negotiation round for " + std::to_string(static_cast<int>(limit)) +
          " s (KOLO_STALL_SHUTDOWN_TIME_SECONDS): a rank is stopped or hangs, or its host lost "
          "its network; kolorun's output names the rank or host");
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
  }
}

Status ProcessSet::Negotiate(bool request_shutdown, Clock::time_point now,
                             NegotiationOutcome* outcome, Clock::duration patience) {
  *outcome = NegotiationOutcome();

  // 1. The bit vector: flags, cache hits, invalidated entries. A round that
  //    ran out of patience last time is still in flight: finish it.
  if (!round_in_flight_) {
    ExpireStalledCacheHits(now);
    const size_t words = (static_cast<size_t>(cache_.bit_bound()) + 63) / 64;
    round_bits_.assign(1 + 2 * words, 0);
    uint64_t flags = 0;
    if (!uncached_.empty()) flags |= kHasUncached;
    if (request_shutdown) flags |= kShutdown;
    if (!to_publish_.empty()) flags |= kPublish;
    if (joined_) flags |= kJoined;
    if (coordinator_ && coordinator_->pending() > 0 && !config_.stall_check_disabled &&
        std::chrono::duration<double>(now - last_slow_round_).count() >=
            StallCheckInterval(config_)) {
      flags |= kStallCheck;
    }
    round_bits_[0] = ~flags;
    for (const auto& hit : cache_hits_) SetBit(&round_bits_, 1, hit.first);
    std::vector<uint64_t> invalid(words, 0);
    for (int bit : invalid_bits_) invalid[bit / 64] |= uint64_t{1} << (bit % 64);
    for (size_t w = 0; w < words; ++w) round_bits_[1 + words + w] = ~invalid[w];
    invalid_bits_.clear();
    round_shutdown_ = request_shutdown;
    KOLO_RETURN_IF_ERROR(round_->Start(&round_bits_));
    round_in_flight_ = true;
  }
  bool back = false;
  KOLO_RETURN_IF_ERROR(WaitForRound(patience, &back));
  if (!back) {
    outcome->unfinished = true;
    return Status::OK();
  }
  const std::vector<uint64_t>& bits = round_bits_;
  const size_t words = (bits.size() - 1) / 2;
  request_shutdown = round_shutdown_;
  const uint64_t flags = ~bits[0];
  outcome->shutdown = (flags & kShutdown) != 0;
  if (outcome->shutdown) {
    // Which rank asked, for the others' error: one more exchange, at shutdown only.
    int first = request_shutdown ? info_->ranks[rank()] : INT_MAX;
    KOLO_RETURN_IF_ERROR(MpiStatus(
        MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm_.get()), "MPI_Allreduce"));
    outcome->shutdown_rank = first;
    return Status::OK();
  }
  if (flags & kPublish) KOLO_RETURN_IF_ERROR(BroadcastPublished(&outcome->published));

  // 2. Entries some rank found stale leave every rank's cache; while a rank is
  //    joined, every request goes through the coordinator.
  bool any_invalid = false;
  for (int bit = 0; bit < cache_.bit_bound(); ++bit) {
    if (TestBit(bits, 1 + words, bit)) continue;  // inverted: 0 means invalid somewhere
    any_invalid = true;
    MoveToUncached(bit);
    cache_.Erase(bit);
  }
  if (flags & kJoined) {
    while (!cache_hits_.empty()) MoveToUncached(cache_hits_.begin()->first);
  }

  // 3. Bits set on every rank are ready, in bit order (the same everywhere).
  //    A hit moved to the coordinator in step 2 is not, though its bit may be
  //    set everywhere: a group member whose group was moved, or any hit while
  //    a rank is joined. Every rank that set the bit moved it too.
  for (auto hit = cache_hits_.begin(); hit != cache_hits_.end();) {
    const int bit = hit->first;
    if (!TestBit(bits, 1, bit) || !TestBit(bits, 1 + words, bit)) {
      ++hit;
      continue;
    }
    outcome->responses.push_back(cache_.Get(bit));
    cache_.Touch(bit);
    hit = cache_hits_.erase(hit);
  }

  // 4. The slow path, when any rank has something new for the coordinator.
  if ((flags & (kHasUncached | kJoined | kStallCheck)) || any_invalid) {
    last_slow_round_ = now;
    outcome->slow_path = true;
    std::vector<Response> slow;
    KOLO_RETURN_IF_ERROR(RunSlowPath(now, &slow));
    CacheResponses(slow);
    for (Response& r : slow) outcome->responses.push_back(std::move(r));
    outcome->stalls_changed = std::exchange(stalls_changed_, false);
    outcome->last_arrivals.swap(last_arrivals_);
    last_arrivals_.clear();
  }
  return Status::OK();
}

// The slow path, over the set's communicator:
//   1. rank 0 broadcasts the digests of its pending requests (the reference);
//   2. every rank answers (gathered to rank 0) with which of them it holds
//      and, in full, its new requests that are not among them;
//   3. rank 0's coordinator decides and broadcasts the responses.
// At scale rank 0 then decodes only what differs from its own requests.
Status ProcessSet::RunSlowPath(Clock::time_point now, std::vector<Response>* responses) {
  const int n = size();
  const bool root = rank() == 0;
  std::vector<Request> reference;  // rank 0 only
  std::vector<uint64_t> digests;
  if (root) {
    for (const Request& r : HeldForCoordinator()) {
      if (r.op == OpType::kJoin) continue;
      reference.push_back(r);
      digests.push_back(RequestDigest(r));
    }
  }
  int64_t reference_size = static_cast<int64_t>(digests.size());
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Bcast(&reference_size, 1, MPI_INT64_T, 0, comm_.get()), "MPI_Bcast"));
  digests.resize(static_cast<size_t>(reference_size));
  if (reference_size > 0) {
    KOLO_RETURN_IF_ERROR(MpiStatus(
        MPI_Bcast(digests.data(), static_cast<int>(reference_size), MPI_UINT64_T, 0, comm_.get()),
        "MPI_Bcast"));
  }

  RequestMessage message;
  if (root) {
    message.requests = uncached_;  // rank 0 holds its reference by definition
  } else {
    message = AnswerReference(digests);
  }
  for (const Request& r : uncached_) {
    if (r.refusal.empty() && pending_.count(r.name)) delivered_.insert(r.name);
  }
  uncached_.clear();
  std::vector<uint8_t> mine = EncodeRequestMessage(message);
  int my_size = static_cast<int>(mine.size());
  std::vector<int> sizes(root ? n : 0), displs(root ? n : 0);
  KOLO_RETURN_IF_ERROR(MpiStatus(
      MPI_Gather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm_.get()), "MPI_Gather"));
  std::vector<uint8_t> all;
  if (root) {
    int64_t total = 0;
    for (int r = 0; r < n; ++r) {
      displs[r] = static_cast<int>(total);
      total += sizes[r];
    }
    all.resize(static_cast<size_t>(total));
  }
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Gatherv(mine.data(), my_size, MPI_BYTE, all.data(),
                                             sizes.data(), displs.data(), MPI_BYTE, 0, comm_.get()),
                                 "MPI_Gatherv"));
  std::vector<uint8_t> reply;
  if (root) {
    RankBits whole(n);
    std::vector<std::pair<int, std::vector<uint64_t>>> partial;
    for (int r = 0; r < n; ++r) {
      Result<RequestMessage> got =
          DecodeRequestMessage(all.data() + displs[r], sizes[r], reference.size());
      if (!got.ok()) {
        return Status::Internal("from rank " + std::to_string(info_->ranks[r]) + ": " +
                                got.status().message());
      }
      RequestMessage& m = got.value();
      if (!m.requests.empty()) coordinator_->AddRequests(r, m.requests, now);
      if (m.whole_reference) {
        whole.Set(r);
      } else if (!m.reference_bits.empty()) {
        partial.emplace_back(r, std::move(m.reference_bits));
      }
    }
    coordinator_->AddReference(reference, whole, partial, now);
    CoordinatorOutcome decided = coordinator_->ComputeResponses(now);
    for (const std::string& w : decided.warnings) KOLO_LOG(kWarning) << w;
    for (int r : decided.last_arrivals) last_arrivals_.push_back(info_->ranks[r]);
    if (!decided.stalled.empty() || !stalled_.empty()) {
      for (StalledTensor& t : decided.stalled) {
        for (int& r : t.missing) r = info_->ranks[r];
      }
      stalled_ = std::move(decided.stalled);
      stalls_changed_ = true;
    }
    reply = EncodeResponses(decided.responses);
  }
  int64_t reply_size = static_cast<int64_t>(reply.size());
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Bcast(&reply_size, 1, MPI_INT64_T, 0, comm_.get()), "MPI_Bcast"));
  reply.resize(static_cast<size_t>(reply_size));
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Bcast(reply.data(), static_cast<int>(reply_size), MPI_BYTE, 0, comm_.get()),
                "MPI_Bcast"));
  Result<std::vector<Response>> decoded = DecodeResponses(reply.data(), reply.size());
  if (!decoded.ok()) return decoded.status();
  *responses = std::move(decoded).value();
  return Status::OK();
}

// This rank's requests that the coordinator has or gets this round: those
// delivered before and not decided yet, and the new ones. (Not the cache hits,
// and not the entries whose bits were just found ready everywhere: they are
// still pending until the responses run, but never reach the coordinator.)
std::vector<Request> ProcessSet::HeldForCoordinator() const {
  std::vector<Request> out;
  for (const std::string& name : delivered_) {
    auto it = pending_.find(name);
    if (it != pending_.end()) out.push_back(it->second.request);
  }
  for (const Request& r : uncached_) {
    if (r.refusal.empty() && pending_.count(r.name)) out.push_back(r);
  }
  return out;
}

// Which of rank 0's reference requests this rank holds too, and its new
// requests that are not among them.
RequestMessage ProcessSet::AnswerReference(const std::vector<uint64_t>& reference) const {
  RequestMessage m;
  const std::unordered_set<uint64_t> in_reference(reference.begin(), reference.end());
  std::unordered_set<uint64_t> held;  // digests of HeldForCoordinator()
  for (const std::string& name : delivered_) {
    if (reference.empty()) break;  // nothing to answer: only the new requests go
    auto it = pending_.find(name);
    if (it != pending_.end()) held.insert(RequestDigest(it->second.request));
  }
  for (const Request& r : uncached_) {
    // An answer to a MISSING response, or a refusal, has no pending entry
    // here, so no bit can stand for it: it always travels in full.
    if (!r.refusal.empty() || !pending_.count(r.name)) {
      m.requests.push_back(r);
      continue;
    }
    const uint64_t digest = RequestDigest(r);
    held.insert(digest);
    if (in_reference.count(digest) == 0) m.requests.push_back(r);
  }
  if (reference.empty()) return m;
  m.reference_bits.assign((reference.size() + 63) / 64, 0);
  bool all = true;
  for (size_t i = 0; i < reference.size(); ++i) {
    if (held.count(reference[i])) {
      m.reference_bits[i / 64] |= uint64_t{1} << (i % 64);
    } else {
      all = false;
    }
  }
  if (all) {
    m.whole_reference = true;
    m.reference_bits.clear();
  } else if (std::all_of(m.reference_bits.begin(), m.reference_bits.end(),
                         [](uint64_t w) { return w == 0; })) {
    m.reference_bits.clear();  // holds none of it
  }
  return m;
}

// Every rank saw kPublish in the same round; rank 0's message follows.
Status ProcessSet::BroadcastPublished(std::vector<uint8_t>* message) {
  if (rank() == 0) message->swap(to_publish_);
  to_publish_.clear();
  int64_t size = static_cast<int64_t>(message->size());
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Bcast(&size, 1, MPI_INT64_T, 0, comm_.get()), "MPI_Bcast"));
  message->resize(static_cast<size_t>(size));
  return MpiStatus(MPI_Bcast(message->data(), static_cast<int>(size), MPI_BYTE, 0, comm_.get()),
                   "MPI_Bcast");
}

}  // namespace kolo
