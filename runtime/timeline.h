// A Chrome-trace JSON timeline (Perfetto, chrome://tracing). After every
// Flush() the file on disk is a complete, valid JSON array, so a job killed
// midway still leaves a readable trace.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <unordered_map>

#include "base/mutex.h"
#include "kolo/status.h"
#include "message.h"

namespace kolo {

// Horovod's names, so that a trace reads as Horovod's and tools written for
// Horovod's traces find what they look for. A tensor's row is "<op>.<name>",
// as Horovod's torch binding names every collective it submits
// (horovod/torch/mpi_ops_v2.cc, GetOpName); an unnamed collective's name
// ("allreduce.noname.3") and the fixed names of barrier, join and the
// process-set operations are shown as they are.
std::string TimelineRow(const Request& request);
// "NEGOTIATE_ALLREDUCE", ... (horovod/common/timeline.cc, NegotiateStart).
std::string NegotiatePhase(OpType op);
// "ALLREDUCE", ...: the span from the negotiation's end to the completion,
// which holds the activities (MEMCPY_IN_FUSION_BUFFER, MPI_ALLREDUCE, ...).
std::string ExecutePhase(OpType op);

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  Timeline() = default;
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  Status Start(const std::string& path, bool mark_cycles) EXCLUDES(mutex_);
  void Stop() EXCLUDES(mutex_);
  // Lock-free: asked on the background thread every cycle and tensor phase.
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool mark_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  // A complete event: phase `phase` of tensor `tensor` from `begin` to `end`.
  void Span(const std::string& tensor, const std::string& phase, Clock::time_point begin,
            Clock::time_point end) EXCLUDES(mutex_);
  void Instant(const char* name, Clock::time_point at) EXCLUDES(mutex_);
  // Makes everything written so far durable and the file valid JSON.
  void Flush() EXCLUDES(mutex_);

 private:
  void WriteEvent(const std::string& json) REQUIRES(mutex_);
  int TidFor(const std::string& tensor) REQUIRES(mutex_);
  long Micros(Clock::time_point t) const REQUIRES(mutex_);

  Mutex mutex_;
  std::FILE* file_ GUARDED_BY(mutex_) = nullptr;
  bool first_event_ GUARDED_BY(mutex_) = true;
  bool tail_written_ GUARDED_BY(mutex_) = false;  // the file ends with "]"
  Clock::time_point start_ GUARDED_BY(mutex_);
  std::unordered_map<std::string, int> tids_ GUARDED_BY(mutex_);
  // Written under mutex_, read without it (active(), mark_cycles()).
  std::atomic<bool> active_{false};       // a file is open
  std::atomic<bool> mark_cycles_{false};  // open, and cycle marks were asked for
};

}  // namespace kolo
