#include "metrics.h"

#include <algorithm>

namespace kolo {

void Metrics::SetStalls(int process_set, std::vector<StalledTensor> stalled) {
  MutexLock lock(&stall_mutex_);
  stalled_.erase(
      std::remove_if(stalled_.begin(), stalled_.end(),
                     [&](const StalledTensor& t) { return t.process_set == process_set; }),
      stalled_.end());
  for (StalledTensor& t : stalled) {
    t.process_set = process_set;
    stalled_.push_back(std::move(t));
  }
  has_stalls_.store(!stalled_.empty(), std::memory_order_relaxed);
}

void Metrics::CountLastArrivals(const std::vector<int>& ranks) {
#if KOLO_METRICS_ENABLED
  MutexLock lock(&stall_mutex_);
  for (int r : ranks) ++last_arrivals_[r];
  has_last_arrivals_.store(true, std::memory_order_relaxed);
#else
  (void)ranks;
#endif
}

MetricsSample Metrics::Sample() const {
  MetricsSample s;
  for (int o = 0; o < kCountedOps; ++o) {
    for (int k = 0; k < kSetSlots; ++k) {
      s.ops[o][k].count = ops_[o][k].count.load(std::memory_order_relaxed);
      s.ops[o][k].bytes = ops_[o][k].bytes.load(std::memory_order_relaxed);
    }
  }
  s.negotiate_us = negotiate_us_.load(std::memory_order_relaxed);
  s.move_us = move_us_.load(std::memory_order_relaxed);
  s.wait_us = wait_us_.load(std::memory_order_relaxed);
  s.steps = steps_.load(std::memory_order_relaxed);
  if (has_stalls() || has_last_arrivals_.load(std::memory_order_relaxed)) {
    MutexLock lock(&stall_mutex_);
    s.stalled = stalled_;
    s.last_arrivals.assign(last_arrivals_.begin(), last_arrivals_.end());
  }
  std::stable_sort(s.last_arrivals.begin(), s.last_arrivals.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return s;
}

}  // namespace kolo
