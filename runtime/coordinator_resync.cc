// The coordinator's resynchronization of unnamed collectives (coordinator.h,
// protocol step 3): which ranks are behind when their unnamed collectives
// disagree, the RESYNC responses that put them back in step, and the barrier
// deadlocks that unnamed collectives skipped by some ranks cause.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator.h"

namespace kolo {

void Coordinator::NotePlacesPaired(const Entry& entry) {
  left_.clear();
  std::unordered_map<std::string, RankBits> places;
  for (const Entry::Arrival& a : entry.arrivals) {
    const std::string& site =
        a.request.call_site.empty() ? entry.first.call_site : a.request.call_site;
    places.try_emplace(site, size_).first->second.Set(a.request.rank);
  }
  // From one place: the ranks are in step. From several (a rank-dependent
  // branch, or a rank that skipped a collective and met the others' one of
  // the same signature), each rank has now left its place: should the ranks
  // disagree next, ranks still at a place another rank has left are behind.
  if (places.size() > 1) left_ = std::move(places);
}

void Coordinator::Resync(Entry& entry, CoordinatorOutcome* outcome) {
  // The places the ranks called number n from (a request without a place
  // counts as from the first one), their ranks, and the round each was last
  // called in.
  struct Place {
    const Request* first;
    RankBits ranks;
    uint64_t last = 0;
  };
  std::vector<Place> places;
  for (const Entry::Arrival& a : entry.arrivals) {
    const std::string& site =
        a.request.call_site.empty() ? entry.first.call_site : a.request.call_site;
    auto p = std::find_if(places.begin(), places.end(),
                          [&](const Place& q) { return q.first->call_site == site; });
    if (p == places.end()) p = places.insert(places.end(), {&a.request, RankBits(size_), 0});
    p->ranks.Set(a.request.rank);
    p->last = std::max(p->last, a.round);
  }
  // Behind: a place that another rank already left. Of the others, the ranks'
  // current place is the one called last: the others have waited there since
  // before. Called in the same round, the one fewer ranks called (the ranks
  // that raised are fewer, mostly), then the one of the lowest rank.
  auto behind = [&](const Place& p) {
    auto it = left_.find(p.first->call_site);
    return it != left_.end() && p.ranks.CountMissing(it->second) > 0;
  };
  const bool known =
      std::any_of(places.begin(), places.end(), [&](const Place& p) { return !behind(p); });
  auto later = [](const Place& a, const Place& b) {
    if (a.last != b.last) return a.last > b.last;
    return a.ranks.Count() < b.ranks.Count();  // places are in order of their first rank
  };
  const Place* kept = nullptr;
  for (const Place& p : places) {
    if (known && behind(p)) continue;
    if (kept == nullptr || later(p, *kept)) kept = &p;
  }
  RankBits stale(size_);
  std::string where;
  for (const Place& p : places) {
    if (&p == kept) continue;
    stale.Or(p.ranks);
    left_.try_emplace(p.first->call_site, size_).first->second.Or(p.ranks);
    where += std::string(where.empty() ? "" : "; ") + "rank(s) " + RankList(p.ranks) + " called " +
             DescribeTensor(*p.first) + " at " + p.first->call_site;
  }
  const Request& k = *kept->first;
  const Place& behind_first = kept == &places.front() ? places[1] : places.front();
  const Request resync_for = *behind_first.first;  // copied: EmitResync rebuilds the entry
  std::string error =
      "Unnamed collectives out of step on process set " + std::to_string(process_set_) + ": " +
      where + ", but rank(s) " + RankList(kept->ranks) +
      " called their unnamed collective of that number (" + DescribeTensor(k) + ") at " +
      k.call_site +
      ". Unnamed collectives pair up by the order in which each rank calls them, so an "
      "exception on some rank skipped a collective that the others called. kolo cancelled it "
      "(nothing was exchanged) on rank(s) " +
      RankList(stale) + ", which number their next unnamed collective like it, so that it " +
      "pairs with the collective rank(s) " + RankList(kept->ranks) +
      " wait in. Name your collectives (name=...) to pair them by name.";
  outcome->warnings.push_back(error);
  EmitResync(resync_for, stale, std::move(error), &outcome->responses);
}

void Coordinator::EmitResync(const Request& first, const RankBits& ranks, std::string error,
                             std::vector<Response>* out) {
  Response resync;
  resync.op = OpType::kResync;
  resync.names = {first.name};
  resync.error = std::move(error);
  resync.unnamed_epoch = first.unnamed_epoch;
  resync.unnamed_from = first.unnamed_index;
  for (int r = 0; r < size_; ++r) {
    if (ranks.Test(r)) resync.ranks.push_back(r);
  }
  out->push_back(std::move(resync));
  // Those ranks drop their collectives numbered from here on: so do their
  // requests here. What the other ranks sent stays, as if the dropped
  // requests had never come.
  for (auto it = table_.begin(); it != table_.end();) {
    const Request& f = it->second.first;
    if (!f.unnamed() || f.unnamed_epoch != first.unnamed_epoch ||
        f.unnamed_index < first.unnamed_index) {
      ++it;
      continue;
    }
    std::vector<Entry::Arrival> kept;
    for (Entry::Arrival& a : it->second.arrivals) {
      if (!ranks.Test(a.request.rank)) kept.push_back(std::move(a));
    }
    if (kept.empty()) {
      groups_.erase(f.group);
      it = table_.erase(it);
      continue;
    }
    // Rebuilt from the requests that stay, as if the others had never come.
    it->second = Entry();
    for (size_t i = 0; i < kept.size(); ++i) {
      AddTo(it->second, kept[i].request, i == 0, kept[i].at, kept[i].round);
    }
    ++it;
  }
}

namespace {

// Collectives every rank reaches at the same point of its program and waits in.
bool Blocking(OpType op) {
  return op == OpType::kBarrier || op == OpType::kAddProcessSet || op == OpType::kRemoveProcessSet;
}

}  // namespace

void Coordinator::BreakBarrierDeadlocks(Clock::time_point now, CoordinatorOutcome* outcome) {
  for (const std::string& key : arrival_order_) {
    auto it = table_.find(key);
    if (it == table_.end() || !Blocking(it->second.first.op)) continue;
    Entry& barrier = it->second;
    // The unnamed tensors that only ranks missing the barrier sent.
    std::vector<std::string> skipped;
    RankBits waiting(size_);
    for (const std::string& k : arrival_order_) {
      auto u = table_.find(k);
      if (u == table_.end() || !u->second.first.unnamed()) continue;
      if (u->second.submitted.CountMissing(barrier.submitted) < barrier.count) continue;
      skipped.push_back(k);
      waiting.Or(u->second.submitted);
    }
    // Every missing rank must wait in one of them (a rank still computing may call
    // the barrier yet).
    RankBits missing(size_);
    for (int r = 0; r < size_; ++r) {
      if (!barrier.submitted.Test(r)) missing.Set(r);
    }
    if (skipped.empty() || waiting.CountMissing(missing) > 0) {
      barrier.deadlocked_since.reset();
      continue;
    }
    if (!barrier.deadlocked_since) barrier.deadlocked_since = now;
    if (std::chrono::duration<double>(now - *barrier.deadlocked_since).count() < kDeadlockGrace) {
      continue;
    }
    barrier.deadlocked_since.reset();
    const std::string holders = RanksWhere(barrier, true);
    const std::string where = DescribeTensor(barrier.first);
    for (const std::string& k : skipped) {
      auto u = table_.find(k);
      if (u == table_.end()) continue;  // dropped with an earlier one of its ranks
      const Request first = u->second.first;
      const RankBits ranks = u->second.submitted;
      std::string error =
          "Cancelled: rank(s) " + RankList(ranks) + " waited in unnamed " + DescribeTensor(first) +
          (first.call_site.empty() ? "" : " (called at " + first.call_site + ")") +
          ", which rank(s) " + holders + " never called: they wait in " + where +
          " (an exception there skipped the collective?). Rank(s) " + RankList(ranks) +
          " number their next unnamed collective like it, so that it pairs with the other "
          "ranks' next one. Name your collectives (name=...) to pair them by name.";
      outcome->warnings.push_back(error);
      EmitResync(first, ranks, std::move(error), &outcome->responses);
    }
  }
}

void Coordinator::ResyncAfterBarrier(std::vector<Response>* out) {
  // Every rank numbers its unnamed collectives afresh after a barrier, so a
  // pending one can never meet the ranks that have not called it.
  left_.clear();
  for (const std::string& key : arrival_order_) {
    auto it = table_.find(key);
    if (it == table_.end() || !it->second.first.unnamed()) continue;
    const Entry& e = it->second;
    std::string error =
        "Cancelled: every rank passed a barrier() or join() while unnamed " +
        DescribeTensor(e.first) +
        (e.first.call_site.empty() ? "" : " (called at " + e.first.call_site + ")") +
        " waited on rank(s) " + RanksWhere(e, true) + " for rank(s) " + RanksWhere(e, false) +
        ", which never called it (an exception there skipped it?). Unnamed "
        "collectives are numbered afresh after a barrier or join: make every rank call it before "
        "the barrier, or name it (name=...).";
    Request first = e.first;
    RankBits ranks = e.submitted;
    EmitResync(first, ranks, std::move(error), out);
  }
}

}  // namespace kolo
