// What an enqueued operation becomes: a Work (what the caller waits on) and
// one TensorEntry per tensor (what the cycles execute).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/mutex.h"
#include "kolo/runtime_types.h"
#include "message.h"

namespace kolo {

using Clock = std::chrono::steady_clock;

// A setting's milliseconds as the clock's duration.
inline Clock::duration FromMilliseconds(double ms) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(ms));
}

// A name a named operation holds on this rank until its handle is waited for.
struct HeldName {
  int process_set = 0;
  OpType op = OpType::kAllreduce;
  std::string name;
};

// The completion state behind a Handle. A grouped operation has one Work for
// all its tensors: it completes when the last one does, with the first error.
class Work {
 public:
  explicit Work(int parts, std::vector<HeldName> held = {})
      : held_(std::move(held)), remaining_(parts), results_(parts) {}

  // Set at creation, never changed: read by the thread that waits.
  const std::vector<HeldName>& held_names() const { return held_; }

  // Called by the thread that runs the cycles once per part. `result` (may be null) is
  // moved in before waiters wake.
  void Complete(const Status& status, int part, WorkResult* result = nullptr) EXCLUDES(mu_) {
    std::function<void()> then;
    {
      MutexLock lock(&mu_);
      if (!status.ok() && status_.ok()) status_ = status;
      if (result != nullptr) results_[part] = std::move(*result);
      if (--remaining_ != 0) return;
      done_ = true;
      cv_.SignalAll();
      then = std::move(then_);
    }
    if (then) then();  // outside the lock: it takes the result with Wait()
  }
  // Calls `then` once the work is done: at once when it already is, else on
  // the thread that completes it (kolo's, which must not wait inside `then`).
  void WhenDone(std::function<void()> then) EXCLUDES(mu_) {
    {
      MutexLock lock(&mu_);
      if (!done_) {
        then_ = std::move(then);
        return;
      }
    }
    then();
  }
  bool done() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return done_;
  }
  Status Wait(WorkResult* result) EXCLUDES(mu_) {
    Status status;
    WaitUntil(Clock::time_point::max(), &status, result);
    return status;
  }
  // Waits until `deadline`; false if the work is still running then.
  bool WaitUntil(Clock::time_point deadline, Status* status, WorkResult* result) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (!done_) {
      if (deadline == Clock::time_point::max()) {
        cv_.Wait(&mu_);
        continue;
      }
      auto left = deadline - Clock::now();
      if (left <= Clock::duration::zero()) return false;
      cv_.WaitFor(&mu_, left);
    }
    if (result != nullptr) {
      if (results_.size() == 1) {
        *result = std::move(results_[0]);
      } else {
        result->parts = std::move(results_);
      }
    }
    *status = status_;
    return true;
  }

 private:
  const std::vector<HeldName> held_;
  Mutex mu_;
  CondVar cv_;
  int remaining_ GUARDED_BY(mu_);
  bool done_ GUARDED_BY(mu_) = false;
  Status status_ GUARDED_BY(mu_);
  std::vector<WorkResult> results_ GUARDED_BY(mu_);  // one per part
  std::function<void()> then_ GUARDED_BY(mu_);       // WhenDone's, called once
};

// The handles given out and not yet waited for. Thread-safe.
class HandleTable {
 public:
  Handle Add(std::shared_ptr<Work> work) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    Handle h = next_++;
    works_[h] = std::move(work);
    return h;
  }
  // The work behind `h`, or an error naming the handle.
  Result<std::shared_ptr<Work>> Find(Handle h) const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    auto it = works_.find(h);
    if (it == works_.end()) {
      return Status::InvalidArgument("unknown handle " + std::to_string(h) +
                                     " (already waited for, or never returned by kolo)");
    }
    return it->second;
  }
  void Release(Handle h) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    works_.erase(h);
  }

 private:
  mutable Mutex mu_;
  std::unordered_map<Handle, std::shared_ptr<Work>> works_ GUARDED_BY(mu_);
  Handle next_ GUARDED_BY(mu_) = 1;
};

struct TensorEntry {
  Request request;  // request.process_set: the set it runs on
  TensorView input;
  TensorView output;            // allreduce: may alias input; its shape is left empty (the input's)
  std::vector<int64_t> splits;  // alltoall: rows to each rank
  void* stream = nullptr;       // device tensors: the stream that produces them
  std::shared_ptr<void> ready;  // device tensors: Gpu::MarkReady's event
  std::shared_ptr<Work> work;
  int part = 0;  // this tensor's place in a grouped operation
  Clock::time_point enqueued;
  Clock::time_point picked_up;
  Clock::time_point negotiated;
};

}  // namespace kolo
