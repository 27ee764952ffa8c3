// A Chrome-trace JSON timeline (Perfetto, chrome://tracing). After every
// Flush() the file on disk is a complete, valid JSON array, so a job killed
// midway still leaves a readable trace.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kolo/status.h"

namespace kolo {

class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  Timeline() = default;
  ~Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  Status Start(const std::string& path, bool mark_cycles);
  void Stop();
  // Lock-free: asked on the background thread every cycle and tensor phase.
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool mark_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  // A complete event: phase `phase` of tensor `tensor` from `begin` to `end`.
  void Span(const std::string& tensor, const char* phase, Clock::time_point begin,
            Clock::time_point end);
  void Instant(const char* name, Clock::time_point at);
  // Makes everything written so far durable and the file valid JSON.
  void Flush();

 private:
  void WriteEvent(const std::string& json);  // requires mutex_
  int TidFor(const std::string& tensor);     // requires mutex_
  long Micros(Clock::time_point t) const;

  mutable std::mutex mutex_;
  std::FILE* file_ = nullptr;                  // guarded by mutex_
  bool first_event_ = true;                    // guarded by mutex_
  bool tail_written_ = false;                  // guarded by mutex_: the file ends with "]"
  Clock::time_point start_;                    // guarded by mutex_
  std::unordered_map<std::string, int> tids_;  // guarded by mutex_
  // Written under mutex_, read without it.
  std::atomic<bool> active_{false};       // a file is open
  std::atomic<bool> mark_cycles_{false};  // open, and cycle marks were asked for
};

}  // namespace kolo
