// What every rank counts while it runs, always on: collectives and bytes per
// operation and process set, the time spent negotiating, moving data and
// waiting for the other ranks, training steps, and (on a set's coordinator)
// the tensors stalled now. The thread that runs the cycles and the caller
// threads add with relaxed atomics: no lock on the hot path. The reporter
// (metrics_reporter.h) reads a Sample once a second and sends it to kolorun
// as one RankSnapshot line (metrics_snapshot.h).
//
// KOLO_METRICS=OFF at configure time compiles the counting out (the calls
// stay, empty), which is how the counters' cost is measured.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "message.h"

#ifndef KOLO_METRICS_ENABLED
#define KOLO_METRICS_ENABLED 1
#endif

namespace kolo {

// A tensor that some ranks of a set submitted and others have not, for longer
// than the stall check time, as the set's coordinator saw it last.
struct StalledTensor {
  int process_set = 0;
  std::string name;
  std::string call_site;     // where the caller made the call, if it said
  std::vector<int> missing;  // global ranks that have not submitted it
  double seconds = 0;        // how long the first rank has waited
};

// The operations counted per process set: the data collectives and barrier.
constexpr int kCountedOps = 6;  // OpType kAllreduce .. kBarrier
// Sets 0 .. kSetSlots-2 are counted apart; the higher ids share the last slot.
constexpr int kSetSlots = 4;

struct MetricsSample {
  struct OpCount {
    int64_t count = 0;
    int64_t bytes = 0;
  };
  std::array<std::array<OpCount, kSetSlots>, kCountedOps> ops{};  // [op][set slot]
  int64_t negotiate_us = 0;
  int64_t move_us = 0;
  int64_t wait_us = 0;
  int64_t steps = 0;
  std::vector<StalledTensor> stalled;
  // On a set's rank 0: (global rank, how often it came last to a collective
  // that the coordinator decided), most often first.
  std::vector<std::pair<int, int64_t>> last_arrivals;
};

class Metrics {
 public:
  using Clock = std::chrono::steady_clock;

  void CountCollective(OpType op, int process_set, int64_t bytes) {
#if KOLO_METRICS_ENABLED
    const int o = static_cast<int>(op);
    if (o >= kCountedOps) return;
    const int slot = process_set < 0 ? kSetSlots - 1 : std::min(process_set, kSetSlots - 1);
    Counter& c = ops_[o][slot];
    c.count.fetch_add(1, std::memory_order_relaxed);
    c.bytes.fetch_add(bytes, std::memory_order_relaxed);
#else
    (void)op, (void)process_set, (void)bytes;
#endif
  }
  // Time of one negotiation round.
  void AddNegotiation(Clock::duration d) { Add(negotiate_us_, d); }
  // Time the executor moved one response's data.
  void AddMoving(Clock::duration d) { Add(move_us_, d); }
  // Time a tensor waited from its submission until every rank had submitted it.
  void AddWaiting(Clock::duration d) { Add(wait_us_, d); }
  // One training step (a binding's optimizer step, a Keras batch).
  void CountStep() {
#if KOLO_METRICS_ENABLED
    steps_.fetch_add(1, std::memory_order_relaxed);
#endif
  }
  // The stalls the coordinator of `process_set` sees now (cold: a lock).
  void SetStalls(int process_set, std::vector<StalledTensor> stalled) EXCLUDES(stall_mutex_);
  // The coordinator decided collectives whose last rank came a round after
  // the first: one count for each of `ranks` (cold: only the coordinator's
  // rounds, a lock).
  void CountLastArrivals(const std::vector<int>& ranks) EXCLUDES(stall_mutex_);
  // Whether any set reported stalls: skips the lock when none did.
  bool has_stalls() const { return has_stalls_.load(std::memory_order_relaxed); }

  MetricsSample Sample() const EXCLUDES(stall_mutex_);

 private:
  struct Counter {
    std::atomic<int64_t> count{0};
    std::atomic<int64_t> bytes{0};
  };
  static void Add(std::atomic<int64_t>& to, Clock::duration d) {
#if KOLO_METRICS_ENABLED
    to.fetch_add(std::chrono::duration_cast<std::chrono::microseconds>(d).count(),
                 std::memory_order_relaxed);
#else
    (void)to, (void)d;
#endif
  }

  std::array<std::array<Counter, kSetSlots>, kCountedOps> ops_;
  std::atomic<int64_t> negotiate_us_{0}, move_us_{0}, wait_us_{0}, steps_{0};
  std::atomic<bool> has_stalls_{false};
  mutable Mutex stall_mutex_;
  std::vector<StalledTensor> stalled_ GUARDED_BY(stall_mutex_);
  std::map<int, int64_t> last_arrivals_ GUARDED_BY(stall_mutex_);
  std::atomic<bool> has_last_arrivals_{false};
};

}  // namespace kolo
