#include "process_set.h"

#include <algorithm>
#include <climits>
#include <thread>
#include <unordered_set>

#include "logging.h"

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

ProcessSet::ProcessSet(std::shared_ptr<const ProcessSetInfo> info, MpiComm comm,
                       std::unique_ptr<HostMover> host, Gpu* gpu, const Config& config)
    : info_(std::move(info)),
      comm_(std::move(comm)),
      host_mover_(std::move(host)),
      gpu_comms_(gpu->MakeComms(comm_.get())),
      config_(config),
      cache_(config.cache_capacity) {
  movers_.host = host_mover_.get();
  movers_.device = gpu;
  movers_.device_comms = gpu_comms_.get();
  movers_.rank = rank();
  movers_.size = size();
  if (info_->rank_in_set == 0) {
    StallSettings stall;
    if (!config.stall_check_disabled) {
      stall.check_seconds = config.stall_check_seconds;
      stall.shutdown_seconds = config.stall_shutdown_seconds;
    } else {
      stall.check_seconds = 0;
    }
    coordinator_ = std::make_unique<Coordinator>(size(), stall, info_->id);
  }
}

void ProcessSet::Add(TensorEntry entry) {
  if (entry.request.op == OpType::kJoin) joined_ = true;
  std::string name = entry.request.name;
  auto [it, inserted] = pending_.emplace(name, std::move(entry));
  (void)inserted;  // names are unique among pending entries (checked at enqueue)
  Classify(it->second);
}

void ProcessSet::Refuse(Request refusal) {
  if (std::optional<int> bit = cache_.BitOf(refusal.name)) invalid_bits_.push_back(*bit);
  uncached_.push_back(std::move(refusal));
}

// Decides whether a new request can ride the cache's fast path.
void ProcessSet::Classify(TensorEntry& entry) {
  const Request& request = entry.request;
  if (!cache_.enabled() || joined_) {
    uncached_.push_back(request);
    return;
  }
  if (!request.group.empty()) {
    if (!warned_group_too_large_ && rank() == 0) {
      std::string why = cache_.GroupTooLarge(request);
      if (!why.empty()) {
        KOLO_LOG(kWarning) << why << " (said once per process set)";
        warned_group_too_large_ = true;
      }
    }
    // A group's members are enqueued together and so arrive in one cycle;
    // the last one to arrive classifies the group.
    std::vector<std::string>& arrived = arriving_groups_[request.group];
    arrived.push_back(request.name);
    if (static_cast<int>(arrived.size()) < request.group_size) return;
    std::vector<std::string> members = std::move(arrived);
    arriving_groups_.erase(request.group);
    ClassifyGroup(members);
    return;
  }
  ResponseCache::Lookup found = cache_.Find(request, rank());
  if (found.state == ResponseCache::State::kHit) {
    cache_hits_.emplace(found.bit, request.name);
    return;
  }
  if (found.state == ResponseCache::State::kInvalid) invalid_bits_.push_back(found.bit);
  uncached_.push_back(request);
}

// The coordinator decides a group only once every member has reached it, so a
// group rides the fast path only as a whole: when every member hits. Otherwise
// all members go to the coordinator and every cached member's bit is marked
// invalid. Every rank's cache holds the same names, so a member missing here
// is missing for every rank that classifies the group later, and a rank that
// already holds the group as hits moved it when the entry left. The invalid
// bits make a rank whose members all hit (a stale entry is stale only here)
// send the group to the coordinator in the same round, where the group
// fails or succeeds as a whole.
void ProcessSet::ClassifyGroup(const std::vector<std::string>& members) {
  std::vector<ResponseCache::Lookup> found;
  found.reserve(members.size());
  bool all_hit = true;
  for (const std::string& name : members) {
    found.push_back(cache_.Find(pending_.at(name).request, rank()));
    all_hit &= found.back().state == ResponseCache::State::kHit;
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (all_hit) {
      cache_hits_.emplace(found[i].bit, members[i]);
      continue;
    }
    if (found[i].state != ResponseCache::State::kMiss) invalid_bits_.push_back(found[i].bit);
    uncached_.push_back(pending_.at(members[i]).request);
  }
}

void ProcessSet::MoveToUncached(int bit) {
  auto it = cache_hits_.find(bit);
  if (it == cache_hits_.end()) return;
  auto entry = pending_.find(it->second);
  if (entry == pending_.end() || entry->second.request.group.empty()) {
    if (entry != pending_.end()) uncached_.push_back(entry->second.request);
    cache_hits_.erase(it);
    return;
  }
  // Members left on the fast path would run without the ones sent to the
  // coordinator, which would then wait for them forever. Every rank that holds
  // the group as hits moves it in the same round (an eviction or an invalid
  // bit is the same everywhere).
  for (int member : GroupHitBits(entry->second.request.group)) {
    uncached_.push_back(pending_.at(cache_hits_.at(member)).request);
    cache_hits_.erase(member);
  }
}

std::vector<int> ProcessSet::GroupHitBits(const std::string& group) const {
  std::vector<int> bits;
  for (const auto& [bit, name] : cache_hits_) {
    auto entry = pending_.find(name);
    if (entry != pending_.end() && entry->second.request.group == group) bits.push_back(bit);
  }
  return bits;
}

// A cache hit that waits too long is sent to the coordinator instead, so that
// the stall inspector can say which ranks are missing it. A group's members
// arrive together and so expire together; one invalid member would be enough
// anyway (MoveToUncached takes the whole group).
void ProcessSet::ExpireStalledCacheHits(Clock::time_point now) {
  if (config_.stall_check_disabled || config_.stall_check_seconds <= 0) return;
  for (const auto& [bit, name] : cache_hits_) {
    auto it = pending_.find(name);
    if (it == pending_.end()) continue;
    double age = std::chrono::duration<double>(now - it->second.picked_up).count();
    if (age >= config_.stall_check_seconds / 2) invalid_bits_.push_back(bit);
  }
}

Status ProcessSet::WaitForRequest(MPI_Request* request, Clock::duration patience, bool* done) {
  // Peers usually arrive within microseconds: spin briefly, then back off so a
  // waiting background thread does not take the core from the training thread.
  auto start = Clock::now();
  auto sleep = std::chrono::microseconds(20);
  for (;;) {
    int finished = 0;
    KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Test(request, &finished, MPI_STATUS_IGNORE), "MPI_Test"));
    *done = finished != 0;
    if (*done) return Status::OK();
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
  if (round_request_ == MPI_REQUEST_NULL) {
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
    KOLO_RETURN_IF_ERROR(MpiStatus(
        MPI_Iallreduce(MPI_IN_PLACE, round_bits_.data(), static_cast<int>(round_bits_.size()),
                       MPI_UINT64_T, MPI_BAND, comm_.get(), &round_request_),
        "MPI_Iallreduce"));
  }
  bool back = false;
  KOLO_RETURN_IF_ERROR(WaitForRequest(&round_request_, patience, &back));
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

// Every rank inserts the same responses in the same order, so bit positions
// agree everywhere. A hit waiting on an evicted bit goes to the coordinator.
void ProcessSet::CacheResponses(const std::vector<Response>& responses) {
  if (!cache_.enabled()) return;
  for (const Response& r : responses) {
    if (!ResponseCache::Cacheable(r)) continue;
    auto it = pending_.find(r.names[0]);
    std::optional<int> evicted;
    if (it != pending_.end()) {
      const Request& mine = it->second.request;
      evicted = cache_.Put(r, mine.shape, mine.group, mine.group_size);
    } else {
      evicted = cache_.Put(r, std::nullopt);
    }
    if (evicted) MoveToUncached(*evicted);
  }
}

TensorEntry* ProcessSet::Find(const std::string& name) {
  auto it = pending_.find(name);
  return it == pending_.end() ? nullptr : &it->second;
}

std::optional<TensorEntry> ProcessSet::Take(const std::string& name, Clock::time_point negotiated) {
  auto it = pending_.find(name);
  if (it == pending_.end()) return std::nullopt;
  TensorEntry entry = std::move(it->second);
  pending_.erase(it);
  delivered_.erase(name);
  if (entry.request.op == OpType::kJoin) joined_ = false;
  entry.negotiated = negotiated;
  return entry;
}

std::vector<TensorEntry> ProcessSet::TakeAll() {
  std::vector<TensorEntry> out;
  for (auto& [name, entry] : pending_) out.push_back(std::move(entry));
  pending_.clear();
  delivered_.clear();
  uncached_.clear();
  cache_hits_.clear();
  arriving_groups_.clear();
  joined_ = false;
  return out;
}

std::vector<TensorEntry> ProcessSet::TakeUnnamed(int64_t epoch, int64_t from, int64_t last) {
  auto doomed = [&](const Request& r) {
    return r.unnamed() && r.unnamed_epoch == epoch && r.unnamed_index >= from &&
           r.unnamed_index <= last;
  };
  uncached_.erase(std::remove_if(uncached_.begin(), uncached_.end(), doomed), uncached_.end());
  std::vector<TensorEntry> out;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!doomed(it->second.request)) {
      ++it;
      continue;
    }
    for (auto hit = cache_hits_.begin(); hit != cache_hits_.end();) {
      hit = hit->second == it->first ? cache_hits_.erase(hit) : std::next(hit);
    }
    delivered_.erase(it->first);
    // A group's members share their number: the whole group goes.
    if (!it->second.request.group.empty()) arriving_groups_.erase(it->second.request.group);
    out.push_back(std::move(it->second));
    it = pending_.erase(it);
  }
  return out;
}

Job ProcessSet::TakeJob(Response response, Clock::time_point negotiated) {
  Job job;
  job.entries.reserve(response.names.size());
  for (const std::string& name : response.names) job.entries.push_back(Take(name, negotiated));
  job.response = std::move(response);
  return job;
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
