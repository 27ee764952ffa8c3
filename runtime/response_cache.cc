#include "response_cache.h"

namespace kolo {

bool ResponseCache::Cacheable(const Response& r) {
  return r.names.size() == 1 && (r.op == OpType::kAllreduce || r.op == OpType::kBroadcast ||
                                 r.op == OpType::kAllgather || r.op == OpType::kReducescatter);
}

std::string ResponseCache::GroupTooLarge(const Request& member) const {
  if (!enabled() || member.group_size <= capacity_) return std::string();
  return "grouped " + std::string(OpTypeName(member.op)) + " '" + member.group + "' has " +
         std::to_string(member.group_size) +
         " tensors, more than KOLO_CACHE_CAPACITY=" + std::to_string(capacity_) +
         ": a group rides the response cache only as a whole, so it is negotiated through the "
         "coordinator every time. Set KOLO_CACHE_CAPACITY to at least " +
         std::to_string(member.group_size) + " (plus the job's other tensors) to cache it.";
}

ResponseCache::Lookup ResponseCache::Find(const Request& q, int rank_in_set) const {
  auto it = by_name_.find(q.name);
  if (it == by_name_.end()) return {State::kMiss, -1};
  const Entry& e = entries_[it->second];
  const Response& r = e.response;
  // A member that moved to another group (or out of one) is a new request:
  // the coordinator holds group members until their whole group is decided.
  bool same = r.op == q.op && r.dtype == q.dtype && r.device == q.device &&
              e.own_shape.has_value() && *e.own_shape == q.shape && e.group == q.group &&
              e.group_size == q.group_size;
  if (same && (q.op == OpType::kAllreduce || q.op == OpType::kReducescatter)) {
    same = r.reduce_op == q.reduce_op && r.prescale == q.prescale && r.postscale == q.postscale;
  }
  if (same && q.op == OpType::kBroadcast) same = r.root == q.root;
  if (same && q.op == OpType::kAllgather) {
    same = rank_in_set < static_cast<int>(r.sizes.size()) && !q.shape.empty() &&
           r.sizes[rank_in_set] == q.shape[0];
  }
  return {same ? State::kHit : State::kInvalid, it->second};
}

std::optional<int> ResponseCache::Put(const Response& response,
                                      std::optional<std::vector<int64_t>> own_shape,
                                      std::string group, int32_t group_size) {
  if (!enabled()) return std::nullopt;
  const std::string& name = response.names[0];
  auto existing = by_name_.find(name);
  if (existing != by_name_.end()) Erase(existing->second);
  std::optional<int> evicted;
  if (static_cast<int64_t>(by_name_.size()) >= capacity_) {
    evicted = lru_.back();
    Erase(*evicted);
  }
  int bit;
  if (!free_bits_.empty()) {
    bit = *free_bits_.begin();
    free_bits_.erase(free_bits_.begin());
  } else {
    bit = static_cast<int>(entries_.size());
    entries_.emplace_back();
  }
  Entry& e = entries_[bit];
  e.used = true;
  e.response = response;
  e.own_shape = std::move(own_shape);
  e.group = std::move(group);
  e.group_size = group_size;
  lru_.push_front(bit);
  e.lru_pos = lru_.begin();
  by_name_[name] = bit;
  return evicted;
}

void ResponseCache::Touch(int bit) {
  Entry& e = entries_[bit];
  if (!e.used) return;
  lru_.splice(lru_.begin(), lru_, e.lru_pos);
}

void ResponseCache::Erase(int bit) {
  Entry& e = entries_[bit];
  if (!e.used) return;
  by_name_.erase(e.response.names[0]);
  lru_.erase(e.lru_pos);
  e = Entry();
  free_bits_.insert(bit);
}

}  // namespace kolo
