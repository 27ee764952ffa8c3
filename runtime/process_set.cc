// A process set's bookkeeping between rounds: its entries, which of them ride
// the response cache's fast path, and taking them out for the executor. The
// negotiation round itself is process_set_negotiation.cc.
#include "process_set.h"

#include <algorithm>
#include <unordered_set>

#include "logging.h"

namespace kolo {

ProcessSet::ProcessSet(std::shared_ptr<const ProcessSetInfo> info, MpiComm comm,
                       std::unique_ptr<HostMover> host, std::unique_ptr<BitRound> round, Gpu* gpu,
                       const Config& config)
    : info_(std::move(info)),
      comm_(std::move(comm)),
      host_mover_(std::move(host)),
      gpu_comms_(gpu->MakeComms(comm_.get())),
      config_(config),
      cache_(config.cache_capacity),
      round_(std::move(round)) {
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

void ProcessSet::Add(TensorEntry&& entry) {
  if (entry.request.op == OpType::kJoin) joined_ = true;
  // The key is copied before the entry is moved into the node.
  auto [it, inserted] = pending_.try_emplace(entry.request.name, std::move(entry));
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
  std::vector<const Request*> requests;
  requests.reserve(members.size());
  bool all_hit = true;
  for (const std::string& name : members) {
    requests.push_back(&pending_.at(name).request);
    found.push_back(cache_.Find(*requests.back(), rank()));
    all_hit &= found.back().state == ResponseCache::State::kHit;
  }
  for (size_t i = 0; i < members.size(); ++i) {
    if (all_hit) {
      cache_hits_.emplace_hint(cache_hits_.end(), found[i].bit, members[i]);
      continue;
    }
    if (found[i].state != ResponseCache::State::kMiss) invalid_bits_.push_back(found[i].bit);
    uncached_.push_back(*requests[i]);
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
  // Moved once, into what is returned.
  std::optional<TensorEntry> entry(std::in_place, std::move(it->second));
  pending_.erase(it);
  if (!delivered_.empty()) delivered_.erase(name);  // a cache hit was never delivered
  if (entry->request.op == OpType::kJoin) joined_ = false;
  entry->negotiated = negotiated;
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

}  // namespace kolo
