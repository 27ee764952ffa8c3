// The coordinator's pairing and deciding (coordinator.h, protocol steps 1
// and 2): requests are added and compared on arrival, decided once every rank
// has sent them, held back by group, and checked for stalls. The
// resynchronization of unnamed collectives (step 3) is coordinator_resync.cc.
#include "coordinator.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <unordered_set>

namespace kolo {
namespace {

std::string JoinInts(const std::vector<int>& v) {
  std::ostringstream os;
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  return os.str();
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// Whether the shapes of two requests of the same op agree, and the rule's name.
bool ShapesAgree(const Request& a, const Request& b) {
  switch (a.op) {
    case OpType::kAllgather:
    case OpType::kAlltoall:
      // Only dim 0 may differ.
      return a.shape.size() == b.shape.size() && !a.shape.empty() &&
             std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1);
    case OpType::kBarrier:
    case OpType::kJoin:
    case OpType::kAddProcessSet:
    case OpType::kRemoveProcessSet:
      return true;
    default:
      return a.shape == b.shape;
  }
}

// The first way request `r` disagrees with `f`, the first request for its
// name, as the sentence every rank raises; empty when they agree.
std::string Disagreement(const Request& f, const Request& r) {
  const std::string ranks = "rank " + std::to_string(f.rank);
  const std::string other = "rank " + std::to_string(r.rank);
  std::string what;
  if (r.process_set != f.process_set) {
    what = kProcessSetMismatch + DescribeTensor(f) + ": " + ranks +
           " submitted it on process set " + std::to_string(f.process_set) + " but " + other +
           " submitted it on process set " + std::to_string(r.process_set) + ".";
  } else if (r.op != f.op) {
    what = "Mismatched operations for tensor '" + f.name + "': " + ranks + " asked for " +
           OpTypeName(f.op) + " but " + other + " asked for " + OpTypeName(r.op) + ".";
  } else if (r.dtype != f.dtype && f.op != OpType::kBarrier) {
    what = "Mismatched data types for " + DescribeTensor(f) + ": " + ranks + " sent " +
           DataTypeName(f.dtype) + " but " + other + " sent " + DataTypeName(r.dtype) + ".";
  } else if (r.device != f.device) {
    what = "Mismatched devices for " + DescribeTensor(f) + ": " + ranks + " sent a tensor on " +
           DeviceName(f.device) + " but " + other + " sent one on " + DeviceName(r.device) + ".";
  } else if (!ShapesAgree(f, r)) {
    bool dim0_free = f.op == OpType::kAllgather || f.op == OpType::kAlltoall;
    what = std::string("Mismatched ") + OpTypeName(f.op) + " tensor shapes for tensor '" + f.name +
           "'" + (dim0_free ? " (all dimensions but the first must agree)" : "") + ": " + ranks +
           " sent a tensor of shape " + ShapeToString(f.shape) + " but " + other +
           " sent a tensor of shape " + ShapeToString(r.shape) + ".";
  } else if (r.reduce_op != f.reduce_op &&
             (f.op == OpType::kAllreduce || f.op == OpType::kReducescatter)) {
    what = "Mismatched reduce operations for " + DescribeTensor(f) + ": " + ranks + " asked for " +
           ReduceOpName(f.reduce_op) + " but " + other + " asked for " + ReduceOpName(r.reduce_op) +
           ".";
  } else if (r.prescale != f.prescale) {
    what = "Mismatched prescale factors for " + DescribeTensor(f) + ": " + ranks + " sent " +
           Num(f.prescale) + " but " + other + " sent " + Num(r.prescale) + ".";
  } else if (r.postscale != f.postscale) {
    what = "Mismatched postscale factors for " + DescribeTensor(f) + ": " + ranks + " sent " +
           Num(f.postscale) + " but " + other + " sent " + Num(r.postscale) + ".";
  } else if (r.root != f.root) {
    what = "Mismatched broadcast root ranks for tensor '" + f.name + "': " + ranks +
           " named root " + std::to_string(f.root) + " but " + other + " named root " +
           std::to_string(r.root) + ".";
  } else if (r.group != f.group || r.group_size != f.group_size) {
    what = "Mismatched groups for " + DescribeTensor(f) + ": " + ranks +
           " submitted it in group '" + f.group + "' of " + std::to_string(f.group_size) + " but " +
           other + " in group '" + r.group + "' of " + std::to_string(r.group_size) + ".";
  } else if (r.ranks != f.ranks) {
    std::vector<int> a(f.ranks.begin(), f.ranks.end()), b(r.ranks.begin(), r.ranks.end());
    what = "Mismatched process set ranks for '" + f.name + "': " + ranks + " asked for [" +
           JoinInts(a) + "] but " + other + " asked for [" + JoinInts(b) + "].";
  }
  return what;
}

}  // namespace

namespace {

// Without -mpopcnt, __builtin_popcountll is a call into libgcc.
int PopCount(uint64_t x) {
  x = x - ((x >> 1) & 0x5555555555555555ull);
  x = (x & 0x3333333333333333ull) + ((x >> 2) & 0x3333333333333333ull);
  x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0full;
  return static_cast<int>((x * 0x0101010101010101ull) >> 56);
}

}  // namespace

bool RankBits::Empty() const {
  for (uint64_t w : words_) {
    if (w != 0) return false;
  }
  return true;
}

int RankBits::Count() const {
  int n = 0;
  for (uint64_t w : words_) n += PopCount(w);
  return n;
}

int RankBits::Merge(const RankBits& other, int* first_added) {
  int added = 0;
  if (first_added == nullptr) {  // the common loop, without the search's branch
    for (size_t i = 0; i < words_.size(); ++i) {
      added += PopCount(other.words_[i] & ~words_[i]);
      words_[i] |= other.words_[i];
    }
    return added;
  }
  for (size_t i = 0; i < words_.size(); ++i) {
    const uint64_t fresh = other.words_[i] & ~words_[i];
    if (fresh != 0 && *first_added < 0) {
      *first_added = static_cast<int>(i * 64) + __builtin_ctzll(fresh);
    }
    added += PopCount(fresh);
    words_[i] |= other.words_[i];
  }
  return added;
}

int RankBits::CountMissing(const RankBits& other) const {
  int n = 0;
  for (size_t i = 0; i < words_.size(); ++i) n += PopCount(other.words_[i] & ~words_[i]);
  return n;
}

Coordinator::Coordinator(int size, StallSettings stall, int process_set)
    : size_(size), stall_(stall), process_set_(process_set), joined_(size) {}

void Coordinator::AddRequests(int rank, const std::vector<Request>& requests,
                              Clock::time_point now) {
  for (Request r : requests) {
    r.rank = rank;  // trust the transport's rank, not the payload
    if (r.op == OpType::kJoin) {
      if (!joined_.Test(rank)) {
        joined_.Set(rank);
        ++joined_count_;
      }
      last_joined_ = rank;
      continue;
    }
    Add(r, now);
  }
}

void Coordinator::Add(const Request& request, Clock::time_point now) {
  // A named request is keyed by its name, without a copy: this runs once per
  // rank and request.
  const std::string unnamed_key = request.unnamed() ? PairingKey(request) : std::string();
  const std::string& key = request.unnamed() ? unnamed_key : request.name;
  if (request.process_set != process_set_ && table_.count(key) == 0) {
    return;  // an answer to a MISSING response for a tensor decided since
  }
  auto [it, inserted] = table_.try_emplace(key);
  if (inserted) arrival_order_.push_back(key);
  AddTo(it->second, request, inserted, now, rounds_);
}

void Coordinator::AddTo(Entry& entry, const Request& request, bool inserted, Clock::time_point now,
                        uint64_t round) {
  if (inserted) {
    entry.first = request;
    entry.submitted = RankBits(size_);
    entry.first_seen = now;
    if (request.op == OpType::kAllgather) entry.dim0.assign(size_, 0);
  } else if (entry.submitted.Test(request.rank)) {
    // A rank never has one name pending twice: a duplicate is the same request
    // sent again. Except from a rank that refused this collective: that rank
    // has started the name again, a collective of its own after this one.
    if (std::find(entry.refused.begin(), entry.refused.end(), request.rank) ==
            entry.refused.end() ||
        std::any_of(entry.later.begin(), entry.later.end(),
                    [&](const Request& q) { return q == request; })) {
      return;
    }
    entry.later.push_back(request);
    return;
  } else {
    Compare(entry, request);
  }
  if (!request.refusal.empty()) {
    entry.refused.push_back(request.rank);
    if (entry.refusal.empty()) entry.refusal = request.refusal;
  }
  if (request.unnamed()) entry.arrivals.push_back({request, round, now});
  entry.submitted.Set(request.rank);
  ++entry.count;
  if (inserted) entry.first_round = round;
  entry.last_rank = request.rank;
  entry.last_round = round;
  if (request.op == OpType::kAllgather && !request.shape.empty() &&
      entry.first.op == OpType::kAllgather) {
    entry.dim0[request.rank] = request.shape[0];
  }
}

void Coordinator::AddReference(const std::vector<Request>& reference, const RankBits& whole,
                               const std::vector<std::pair<int, std::vector<uint64_t>>>& partial,
                               Clock::time_point now) {
  // Ranks out of step with rank 0 mostly hold the same prefix of its
  // requests: group them by their bits, so each entry merges a few groups.
  std::map<std::vector<uint64_t>, RankBits> groups;
  for (const auto& [rank, bits] : partial) {
    auto [it, inserted] = groups.try_emplace(bits, size_);
    it->second.Set(rank);
  }
  for (size_t i = 0; i < reference.size(); ++i) {
    const Request& q = reference[i];
    RankBits holders = whole;
    for (const auto& [bits, ranks] : groups) {
      if ((bits[i / 64] >> (i % 64)) & 1u) holders.Or(ranks);
    }
    if (holders.Empty()) continue;
    auto it = table_.find(PairingKey(q));
    Request as_first = q;
    if (it != table_.end()) as_first.rank = it->second.first.rank;
    if (it == table_.end() || q.unnamed() || !(it->second.first == as_first) ||
        !it->second.refused.empty()) {
      // Not the common case (rank 0's request is not the entry's first, or
      // differs from it, or it is unnamed and every request of it is kept):
      // add request by request, which compares each.
      for (int r = 0; r < size_; ++r) {
        if (!holders.Test(r)) continue;
        Request copy = q;
        copy.rank = r;
        Add(copy, now);
      }
      continue;
    }
    Entry& entry = it->second;
    if (q.op == OpType::kAllgather && !q.shape.empty()) {
      for (int r = 0; r < size_; ++r) {
        if (holders.Test(r) && !entry.submitted.Test(r)) entry.dim0[r] = q.shape[0];
      }
    }
    // Who came last matters only for an entry that began in an earlier round.
    int first_added = -1;
    entry.count +=
        entry.submitted.Merge(holders, entry.first_round < rounds_ ? &first_added : nullptr);
    if (first_added >= 0) {
      entry.last_rank = first_added;
      entry.last_round = rounds_;
    }
  }
}

// Records the first way `r` disagrees with the entry's first request.
void Coordinator::Compare(Entry& entry, const Request& r) {
  const Request& f = entry.first;
  const bool refused = !f.refusal.empty() || !r.refusal.empty();
  std::string what = refused ? std::string() : Disagreement(f, r);
  // Unnamed collectives pair up by their number, as Horovod's do, wherever
  // each rank called them: a rank-dependent branch that calls the same
  // collective on each side pairs. Called from different places and
  // disagreeing (or refused, which leaves nothing to compare), the ranks are
  // out of step (an exception on some rank skipped a collective the others
  // called): Resync names both places and brings them back in step.
  if (f.unnamed() && r.unnamed() && !f.call_site.empty() && !r.call_site.empty() &&
      f.call_site != r.call_site && (refused || !what.empty())) {
    entry.sites_differ = true;
    return;
  }
  // A refusal carries no tensor to compare; the collective fails anyway.
  if (refused || what.empty()) return;
  if (entry.mismatch.empty()) entry.mismatch = what;
  entry.disagreeing.push_back(r.rank);
}

std::string Coordinator::RanksWhere(const Entry& entry, bool submitted) const {
  std::vector<int> ranks;
  for (int r = 0; r < size_; ++r) {
    if (entry.submitted.Test(r) == submitted) ranks.push_back(r);
  }
  return JoinInts(ranks);
}

std::string Coordinator::RankList(const RankBits& ranks) const {
  std::vector<int> list;
  for (int r = 0; r < size_; ++r) {
    if (ranks.Test(r)) list.push_back(r);
  }
  return JoinInts(list);
}

Response Coordinator::Decide(const std::string& name, Entry& entry) {
  const Request& f = entry.first;
  Response resp;
  resp.names = {name};
  if (!entry.refused.empty()) {
    resp.op = OpType::kError;
    resp.error =
        std::string(OpTypeName(f.op)) + " '" + f.name + "'" +
        (f.unnamed() && !f.call_site.empty() ? " (unnamed, called at " + f.call_site + ")" : "") +
        ": rank " + std::to_string(entry.refused[0]) + " refused its input: " + entry.refusal;
    if (entry.refused.size() > 1) {
      std::vector<int> others(entry.refused.begin() + 1, entry.refused.end());
      std::sort(others.begin(), others.end());
      resp.error += " (rank(s) " + JoinInts(others) + " refused theirs too)";
    }
    resp.error += ". The collective failed on every rank; nothing was exchanged.";
    resp.ranks.assign(entry.refused.begin(), entry.refused.end());
    std::sort(resp.ranks.begin(), resp.ranks.end());
    if (f.unnamed()) {
      resp.unnamed_epoch = f.unnamed_epoch;
      resp.unnamed_from = f.unnamed_index;
    }
    return resp;
  }
  if (!entry.mismatch.empty()) {
    resp.op = OpType::kError;
    resp.error = entry.mismatch;
    if (f.unnamed()) {  // ranks that disagree may have named it differently
      resp.unnamed_epoch = f.unnamed_epoch;
      resp.unnamed_from = f.unnamed_index;
    }
    if (entry.disagreeing.size() > 1) {
      std::vector<int> d = entry.disagreeing;
      std::sort(d.begin(), d.end());
      resp.error +=
          " Ranks that differ from rank " + std::to_string(f.rank) + ": " + JoinInts(d) + ".";
    }
    return resp;
  }
  if (entry.count < size_ && f.op != OpType::kAllreduce) {
    resp.op = OpType::kError;
    resp.error = "Rank(s) " + RanksWhere(entry, false) +
                 " already called join(), so they cannot take " + "part in " + DescribeTensor(f) +
                 "; after join() other ranks may only allreduce.";
    return resp;
  }
  resp.op = f.op;
  resp.dtype = f.dtype;
  resp.reduce_op = f.reduce_op;
  resp.prescale = f.prescale;
  resp.postscale = f.postscale;
  resp.root = f.root;
  resp.device = f.device;
  resp.ranks = f.ranks;
  if (f.op == OpType::kAllreduce) {
    int64_t n = 1;
    for (int64_t d : f.shape) n *= d;
    resp.sizes = {n};
  } else if (f.op == OpType::kAllgather) {
    resp.sizes = entry.dim0;
  }
  return resp;
}

// Appends `response`, holding group members back until their group is decided.
void Coordinator::Emit(Response response, const Request& request, std::vector<Response>* out) {
  if (request.group.empty()) {
    out->push_back(std::move(response));
    return;
  }
  Group& g = groups_[request.group];
  g.size = request.group_size;
  if (response.op == OpType::kError && g.error.empty()) g.error = response.error;
  g.decided.push_back(std::move(response));
  if (static_cast<int>(g.decided.size()) < g.size) return;
  for (Response& r : g.decided) {
    if (!g.error.empty()) {
      r.op = OpType::kError;
      r.error = "Group '" + request.group + "' failed: " + g.error;
    }
    out->push_back(std::move(r));
  }
  groups_.erase(request.group);
}

CoordinatorOutcome Coordinator::ComputeResponses(Clock::time_point now) {
  CoordinatorOutcome outcome;
  ++rounds_;
  bool barrier = false;
  // Resync may take requests out of entries later in this order, or erase them.
  const std::vector<std::string> order = arrival_order_;
  for (const std::string& key : order) {
    auto it = table_.find(key);
    if (it == table_.end()) continue;
    Entry& entry = it->second;
    // Joined ranks count as present (they reduce zeros).
    const int present =
        entry.count + (joined_count_ > 0 ? entry.submitted.CountMissing(joined_) : 0);
    if (present < size_) continue;
    if (entry.sites_differ) {
      Resync(entry, &outcome);
      continue;
    }
    if (entry.first.unnamed()) NotePlacesPaired(entry);
    // The ranks came in different rounds: who came last kept the others waiting.
    if (entry.last_round > entry.first_round && entry.last_rank >= 0) {
      outcome.last_arrivals.push_back(entry.last_rank);
    }
    Request first = entry.first;
    Response response = Decide(first.name, entry);
    barrier |= response.op == OpType::kBarrier;
    Emit(std::move(response), first, &outcome.responses);
    EraseDecided(it, now);
  }
  CheckStalls(now, &outcome);
  BreakBarrierDeadlocks(now, &outcome);
  if (joined_count_ == size_) {
    Response join;
    join.op = OpType::kJoin;
    join.names = {"join"};
    join.value = last_joined_;
    outcome.responses.push_back(std::move(join));
    joined_.Clear();
    joined_count_ = 0;
    last_joined_ = -1;
    barrier = true;
  }
  if (barrier) ResyncAfterBarrier(&outcome.responses);
  std::vector<std::string> still_pending;
  still_pending.reserve(arrival_order_.size());
  std::unordered_set<std::string> seen;  // a key added again after its decision
  for (const std::string& key : arrival_order_) {
    if (table_.count(key) && seen.insert(key).second) still_pending.push_back(key);
  }
  arrival_order_ = std::move(still_pending);
  return outcome;
}

void Coordinator::EraseDecided(std::unordered_map<std::string, Entry>::iterator it,
                               Clock::time_point now) {
  std::vector<Request> later = std::move(it->second.later);
  table_.erase(it);
  for (const Request& q : later) Add(q, now);
}

void Coordinator::CheckStalls(Clock::time_point now, CoordinatorOutcome* outcome) {
  if (stall_.check_seconds <= 0 && stall_.shutdown_seconds <= 0) return;
  const std::vector<std::string> order = arrival_order_;
  for (const std::string& key : order) {
    auto it = table_.find(key);
    if (it == table_.end()) continue;
    Entry& e = it->second;
    const double age = std::chrono::duration<double>(now - e.first_seen).count();
    const bool shutdown_due = stall_.shutdown_seconds > 0 && age >= stall_.shutdown_seconds;
    const bool warning_due =
        stall_.check_seconds > 0 && age >= stall_.check_seconds &&
        (!e.warned ||
         std::chrono::duration<double>(now - e.last_warned).count() >= stall_.check_seconds);
    if (stall_.check_seconds > 0 && age >= stall_.check_seconds && !shutdown_due) {
      StalledTensor t;
      t.name = e.first.name;
      t.call_site = e.first.call_site;
      t.seconds = age;
      for (int r = 0; r < size_; ++r) {
        if (!e.submitted.Test(r)) t.missing.push_back(r);
      }
      outcome->stalled.push_back(std::move(t));
    }
    if (!shutdown_due && !warning_due) continue;  // the common case: no strings built
    const std::string detail =
        DescribeTensor(e.first) +
        (e.first.call_site.empty() ? "" : " (unnamed, called at " + e.first.call_site + ")") +
        " was submitted by rank(s) " + RanksWhere(e, true) + " but not by rank(s) " +
        RanksWhere(e, false);
    const std::string waited = Num(std::round(age * 10) / 10);
    if (shutdown_due) {
      std::string error = "Stalled for " + waited + " s: " + detail +
                          "; KOLO_STALL_SHUTDOWN_TIME_SECONDS=" + Num(stall_.shutdown_seconds) +
                          " ended it. All ranks must submit the same tensors.";
      if (e.first.unnamed()) {
        // Those ranks called a collective that the others skipped: they number
        // their next unnamed one like this one, which the others still await.
        error += " It was unnamed: rank(s) " + RanksWhere(e, true) +
                 " number their next unnamed collective like this one, so that it pairs with "
                 "the other ranks' next one. Name your collectives (name=...) to pair them by "
                 "name.";
        Request first = e.first;
        RankBits ranks = e.submitted;
        EmitResync(first, ranks, std::move(error), &outcome->responses);
        continue;
      }
      Response err;
      err.op = OpType::kError;
      err.names = {e.first.name};
      err.error = std::move(error);
      Request first = e.first;
      Emit(std::move(err), first, &outcome->responses);
      EraseDecided(it, now);
      continue;
    }
    {  // with every warning: a rank may hold the name elsewhere only by now
      Response missing;
      missing.op = OpType::kMissing;
      missing.names = {e.first.name};
      for (int r = 0; r < size_; ++r) {
        if (!e.submitted.Test(r)) missing.ranks.push_back(r);
      }
      outcome->responses.push_back(std::move(missing));
    }
    e.warned = true;
    e.last_warned = now;
    outcome->warnings.push_back("Stall: " + detail + " (waiting " + waited +
                                " s). Those ranks may be slower, stuck, or taking a "
                                "different code path.");
  }
}

}  // namespace kolo
