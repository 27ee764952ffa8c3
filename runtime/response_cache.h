// The response cache: tensors negotiated before, kept at the same bit position
// on every rank, so that one bit-vector allreduce says "ready everywhere".
//
// Every rank applies the same Put / Touch / Erase calls in the same order (they
// are driven by the responses all ranks execute), so the name -> bit mapping
// is identical on all ranks without any extra communication. Only what each
// rank compares its own requests with (its shape, its group) is local.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "message.h"

namespace kolo {

class ResponseCache {
 public:
  enum class State { kMiss, kHit, kInvalid };
  struct Lookup {
    State state = State::kMiss;
    int bit = -1;
  };

  explicit ResponseCache(int64_t capacity) : capacity_(capacity) {}

  // Whether a response may be cached at all.
  static bool Cacheable(const Response& response);

  // kHit: the cached response at `bit` is what this rank would negotiate now
  // (a group member also in the same group, of the same size).
  // kInvalid: `name` is cached with other parameters; the entry must go.
  Lookup Find(const Request& request, int rank_in_set) const;

  // Inserts `response` (replacing an entry of the same name), evicting the
  // least recently used entry when full. `own_shape` is this rank's tensor
  // shape (nullopt when this rank has no tensor of that name, e.g. joined);
  // `group` and `group_size` are those of this rank's request (empty and 0
  // when it was not grouped). Returns the bit of an evicted entry of another
  // name, if any.
  std::optional<int> Put(const Response& response, std::optional<std::vector<int64_t>> own_shape,
                         std::string group = {}, int32_t group_size = 0);
  // The bit of the entry named `name`, whatever its parameters.
  std::optional<int> BitOf(const std::string& name) const {
    auto it = by_name_.find(name);
    if (it == by_name_.end()) return std::nullopt;
    return it->second;
  }
  void Touch(int bit);
  void Erase(int bit);
  const Response& Get(int bit) const { return entries_[bit].response; }

  // Why a group of `group_size` members can never hit a cache of this
  // capacity (a group rides the cache only as a whole), as the warning to
  // log; empty when it can.
  std::string GroupTooLarge(const Request& member) const;

  bool enabled() const { return capacity_ > 0; }
  // One past the highest bit in use; the same on every rank.
  int bit_bound() const { return static_cast<int>(entries_.size()); }

 private:
  struct Entry {
    bool used = false;
    Response response;
    std::optional<std::vector<int64_t>> own_shape;
    std::string group;
    int32_t group_size = 0;
    std::list<int>::iterator lru_pos;
  };
  int64_t capacity_;
  std::vector<Entry> entries_;  // indexed by bit
  std::unordered_map<std::string, int> by_name_;
  std::list<int> lru_;  // most recently used first
  std::set<int> free_bits_;
};

}  // namespace kolo
