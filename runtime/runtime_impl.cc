// The cycles: a cycle takes the queue (which callers fill, runtime_queue.cc),
// negotiates each process set, runs the control operations itself and hands
// data responses, with their entries, to the executor, which gives them back
// finished. Every entry completes in Complete(). The background thread runs
// the cycles, or a caller that waits for its operation while no thread runs
// one (RunCyclesFor).
#include "runtime_impl.h"

#include <algorithm>
#include <exception>

#include "caller_step.h"
#include "fusion_planner.h"
#include "logging.h"

namespace kolo {

void RuntimeImpl::RestartUnnamed(int set) {
  MutexLock lock(&queue_mutex_);
  UnnamedState& state = unnamed_[set];
  ++state.epoch;
  state.next = 0;
}

void RuntimeImpl::Resync(ProcessSet& set, const Response& r) {
  if (std::find(r.ranks.begin(), r.ranks.end(), set.rank()) == r.ranks.end()) return;
  const int id = set.info().id;
  const auto doomed = [&](const Request& q) {
    return q.process_set == id && q.unnamed() && q.unnamed_epoch == r.unnamed_epoch &&
           q.unnamed_index >= r.unnamed_from;
  };
  std::vector<TensorEntry> cancelled;
  {
    MutexLock lock(&queue_mutex_);
    UnnamedState& state = unnamed_[id];
    // After a barrier the old epoch's numbers are gone already.
    if (state.epoch == r.unnamed_epoch) state.next = r.unnamed_from;
    auto split = std::stable_partition(queue_.begin(), queue_.end(),
                                       [&](const TensorEntry& e) { return !doomed(e.request); });
    for (auto it = split; it != queue_.end(); ++it) cancelled.push_back(std::move(*it));
    queue_.erase(split, queue_.end());
  }
  for (TensorEntry& e : set.TakeUnnamed(r.unnamed_epoch, r.unnamed_from)) {
    cancelled.push_back(std::move(e));
  }
  const Status status = Status::PreconditionFailed(r.error);
  for (TensorEntry& e : cancelled) {
    if (e.work) Complete(std::move(e), status);  // not a refusal still queued
  }
}

void RuntimeImpl::Complete(TensorEntry&& entry, const Status& status, WorkResult* result) {
  if (status.ok() && entry.negotiated != Clock::time_point()) {
    metrics_.CountCollective(entry.request.op, entry.request.process_set,
                             static_cast<int64_t>(entry.input.NumBytes()));
    metrics_.AddWaiting(entry.negotiated - entry.enqueued);
  }
  if (timeline_.active() && entry.picked_up != Clock::time_point()) {
    // A refusal or an operation cancelled before its negotiation ended has
    // no later phase.
    const std::string row = TimelineRow(entry.request);
    timeline_.Span(row, "QUEUE", entry.enqueued, entry.picked_up);
    if (entry.negotiated != Clock::time_point()) {
      const OpType op = entry.request.op;
      timeline_.Span(row, NegotiatePhase(op), entry.picked_up, entry.negotiated);
      timeline_.Span(row, status.ok() ? ExecutePhase(op) : std::string("ERROR"), entry.negotiated,
                     Clock::now());
    }
  }
  // The name is free before the handle completes: the caller may reuse it as
  // soon as Wait() returns. An unnamed entry holds none (Enqueue).
  if (!entry.request.unnamed()) {
    MutexLock lock(&queue_mutex_);
    auto& names = names_[entry.request.process_set];
    auto use = names.find(entry.request.name);
    if (use != names.end()) {
      use->second.in_flight = false;
      if (use->second.unwaited == 0) names.erase(use);
    }
  }
  entry.work->Complete(status, entry.part, result);
}

void RuntimeImpl::CompleteExecuted() {
  executor_->TakeFinished(&finished_);
  for (Finished& f : finished_) {
    Complete(std::move(f.entry), f.status, f.result ? &*f.result : nullptr);
  }
  finished_.clear();  // the entries hold their Work and buffers' events
}

Clock::time_point RuntimeImpl::CycleDueAt() const {
  return queue_.empty() ? next_cycle_at_ : std::min(next_cycle_at_, queue_due_);
}

bool RuntimeImpl::CycleDue() {
  MutexLock lock(&queue_mutex_);
  return shutdown_requested_ || Clock::now() >= CycleDueAt();
}

void RuntimeImpl::WaitForWork() {
  MutexLock lock(&queue_mutex_);
  // Enqueue and the callers move the due time; every wake-up reads it again.
  while (!shutdown_requested_) {
    auto left = CycleDueAt() - Clock::now();
    if (left <= Clock::duration::zero()) break;
    queue_cv_.WaitFor(&queue_mutex_, left);
  }
}

void RuntimeImpl::BackgroundLoop() {
  for (;;) {
    WaitForWork();
    MutexLock round(&round_mutex_);
    if (cycles_ended_) break;
    // A caller may have run the cycle this thread woke up for.
    if (!CycleDue()) continue;
    ++cycles_by_background_;  // counted as it starts: its work may complete in it
    CycleEnd end = RunGuardedCycle(Clock::duration::max());
    ScheduleNextCycle(end, /*wake=*/false);
    if (end == CycleEnd::kStop) break;
  }
  MutexLock round(&round_mutex_);
  executor_->DrainGpu();
  CompleteExecuted();
}

void RuntimeImpl::RunCyclesFor(Work& work, Clock::time_point until) {
  if (caller_runs_ && round_mutex_.TryLock()) {
    if (cycles_ended_) {  // kolo stopped: what is left completes without cycles
      round_mutex_.Unlock();
      return;
    }
    CycleEnd end = CycleEnd::kRan;
    Clock::time_point watching_since;  // when it began to watch device work
    for (int steps = 0;; ++steps) {
      const auto now = Clock::now();
      const bool device_busy = executor_->gpu_busy();
      if (!device_busy) {
        watching_since = Clock::time_point();
      } else if (watching_since == Clock::time_point()) {
        watching_since = now;
      }
      const CallerStep step =
          NextCallerStep(work.done(), cycles_ended_, device_busy, now >= until,
                         device_busy && now - watching_since > kCallerDevicePatience, steps);
      if (step == CallerStep::kStop) break;
      if (step == CallerStep::kPollDevice) {
        // Device work in flight: this thread watches it finish (the
        // operation's entries complete here), no round with the other ranks.
        executor_->PollGpu();
        CompleteExecuted();
        continue;
      }
      ++cycles_by_callers_;
      end = RunGuardedCycle(kCallerPatience);
      if (end == CycleEnd::kUnfinished) ++left_unfinished_;
      if (end != CycleEnd::kRan) break;
    }
    // The background thread must go on with what this left: a round still in
    // flight, the end of the cycles, or entries that wait on other ranks.
    ScheduleNextCycle(end, /*wake=*/true);
    round_mutex_.Unlock();
    return;
  }
  // Another thread runs the cycles (or caller-runs is off): the work may have
  // been queued without waking the background thread.
  DueNow();
}

void RuntimeImpl::DueNow() {
  {
    MutexLock lock(&queue_mutex_);
    next_cycle_at_ = Clock::now();
    queue_due_ = next_cycle_at_;
  }
  queue_cv_.Signal();
}

void RuntimeImpl::ScheduleNextCycle(CycleEnd end, bool wake) {
  if (end == CycleEnd::kStop) cycles_ended_ = true;
  bool pending = executor_->gpu_busy();
  for (auto& [id, set] : sets_) pending |= set->has_pending();
  const auto now = Clock::now();
  const double wait_ms = end != CycleEnd::kRan ? 0
                         : pending             ? config_.cycle_time_ms
                                               : config_.idle_tick_ms;
  bool queued;
  {
    MutexLock lock(&queue_mutex_);
    next_cycle_at_ = now + FromMilliseconds(wait_ms);
    queued = !queue_.empty();
  }
  if (wake && (pending || queued || end != CycleEnd::kRan)) queue_cv_.Signal();
}

RuntimeImpl::CycleEnd RuntimeImpl::RunGuardedCycle(Clock::duration patience) {
  // Nothing may escape a cycle (std::terminate would take the training
  // process with it): an exception fails every pending and future operation.
  try {
    return RunCycle(patience);
  } catch (const std::exception& e) {
    KOLO_LOG(kError) << "kolo's background thread stopped on an exception: " << e.what();
    FailEverything(Status::Internal(std::string("kolo's background thread stopped on an "
                                                "exception (") +
                                    e.what() + "); kolo cannot run collectives any more"));
  } catch (...) {
    FailEverything(Status::Internal(
        "kolo's background thread stopped on an unknown exception; kolo cannot run collectives "
        "any more"));
  }
  return CycleEnd::kStop;
}

// One cycle: take the queue, negotiate every set this rank belongs to (in id
// order, the same on every rank), run what is ready. A cycle that stopped at
// an unfinished round resumes at that set.
RuntimeImpl::CycleEnd RuntimeImpl::RunCycle(Clock::duration patience) {
  std::vector<TensorEntry> incoming;
  bool shutdown;
  {
    MutexLock lock(&queue_mutex_);
    incoming.swap(queue_);
    shutdown = shutdown_requested_;
  }
  const auto now = Clock::now();
  if (timeline_.mark_cycles()) timeline_.Instant("CYCLE_START", now);
  for (TensorEntry& e : incoming) {
    e.picked_up = now;
    auto it = sets_.find(e.request.process_set);
    if (!e.request.refusal.empty()) {  // no work: only the other ranks are told
      if (it != sets_.end()) it->second->Refuse(std::move(e.request));
      continue;
    }
    if (it == sets_.end()) {
      Complete(std::move(e),
               Status::InvalidArgument("process set " + std::to_string(e.request.process_set) +
                                       " was removed before this operation ran"));
      continue;
    }
    if (!mismatched_.empty()) {  // the name is taken again: what it was is past
      const std::string& name = e.request.name;
      mismatched_.erase(std::remove_if(mismatched_.begin(), mismatched_.end(),
                                       [&](const Request& r) { return r.name == name; }),
                        mismatched_.end());
    }
    it->second->Add(std::move(e));
  }
  if (resume_set_ == kNoSet) {
    cycle_sets_.clear();
    for (auto& [id, set] : sets_) cycle_sets_.push_back(id);
  }
  std::vector<int> ids;
  for (int id : cycle_sets_) {
    if (id >= resume_set_) ids.push_back(id);
  }
  resume_set_ = kNoSet;
  for (int id : ids) {
    auto it = sets_.find(id);
    if (it == sets_.end()) continue;  // removed during this cycle
    ProcessSet& set = *it->second;
    NegotiationOutcome outcome;
    const auto negotiation_start = Clock::now();
    Status s = set.Negotiate(id == kGlobalProcessSet && shutdown, now, &outcome, patience);
    const auto negotiated = Clock::now();
    metrics_.AddNegotiation(negotiated - negotiation_start);
    if (!s.ok()) {
      KOLO_LOG(kError) << "negotiation failed, kolo stops: " << s.message();
      RevokeAll();
      FailEverything(Status::Internal("kolo's background thread stopped: " + s.message()));
      return CycleEnd::kStop;
    }
    if (outcome.unfinished) {
      resume_set_ = id;
      return CycleEnd::kUnfinished;
    }
    if (outcome.shutdown) {
      FailEverything(Status::Aborted(
          shutdown ? "kolo was shut down before this operation completed"
                   : "kolo was shut down by rank " + std::to_string(outcome.shutdown_rank) +
                         " (it called shutdown() or its process ended) before this operation "
                         "completed"));
      return CycleEnd::kStop;
    }
    // Says which cycles paid for a full negotiation (the cache did not serve).
    if (outcome.slow_path && timeline_.mark_cycles()) timeline_.Instant("SLOW_PATH", now);
    if (id == kGlobalProcessSet) AutotuneRound(set, outcome, now);
    if (outcome.stalls_changed) metrics_.SetStalls(id, set.stalled());
    if (!outcome.last_arrivals.empty()) metrics_.CountLastArrivals(outcome.last_arrivals);
    Dispatch(set, std::move(outcome.responses), negotiated);
  }
  executor_->PollGpu();
  CompleteExecuted();
  timeline_.Flush();
  return CycleEnd::kRan;
}

void RuntimeImpl::Dispatch(ProcessSet& set, std::vector<Response> responses,
                           Clock::time_point now) {
  // The first operation starts moving as the round ends: no clock read of its own.
  auto moving_start = now;
  std::vector<Response> plan = FusionPlanner::Plan(
      std::move(responses), config_.fusion_threshold_bytes, config_.in_place_threshold_bytes);
  for (size_t i = 0; i < plan.size(); ++i) {
    Response& r = plan[i];
    switch (r.op) {
      case OpType::kAllreduce:
      case OpType::kAllgather:
      case OpType::kBroadcast:
      case OpType::kAlltoall:
      case OpType::kReducescatter: {
        executor_->Execute(set.TakeJob(std::move(r), now), set.movers());
        metrics_.AddMoving(Clock::now() - moving_start);
        CompleteExecuted();
        if (i + 1 < plan.size()) moving_start = Clock::now();
        break;
      }
      default:
        RunControl(set, r, now);
        if (i + 1 < plan.size()) moving_start = Clock::now();
    }
  }
}

void RuntimeImpl::RunControl(ProcessSet& set, const Response& r, Clock::time_point now) {
  // Completes this rank's entry for the response's first name, if it has one.
  auto finish = [&](const Status& status, WorkResult* result = nullptr) {
    if (std::optional<TensorEntry> e = set.Take(r.names[0], now)) {
      Complete(std::move(*e), status, result);
    }
  };
  switch (r.op) {
    case OpType::kError:
      // A refusing rank holds no entry for the collective it refused; one of
      // the name there is its next collective.
      if (std::find(r.ranks.begin(), r.ranks.end(), set.rank()) != r.ranks.end()) return;
      for (const std::string& name : r.names) {
        if (std::optional<TensorEntry> e = set.Take(name, now)) {
          if (r.error.rfind(kProcessSetMismatch, 0) == 0) {
            if (mismatched_.size() == kMismatchesKept) mismatched_.pop_front();
            mismatched_.push_back(e->request);
          }
          Complete(std::move(*e), Status::PreconditionFailed(r.error));
        }
      }
      // An unnamed collective pairs by number: this rank's may have another name.
      if (r.unnamed_from >= 0) {
        for (TensorEntry& e : set.TakeUnnamed(r.unnamed_epoch, r.unnamed_from, r.unnamed_from)) {
          Complete(std::move(e), Status::PreconditionFailed(r.error));
        }
      }
      return;
    case OpType::kMissing: {
      // The coordinator waits for this rank. Holding the name on another set
      // is a mismatch the coordinator can only see if it is told.
      const bool asked = std::find(r.ranks.begin(), r.ranks.end(), set.rank()) != r.ranks.end();
      const Request* other = asked && set.Find(r.names[0]) == nullptr
                                 ? HeldElsewhere(r.names[0], set.info().id)
                                 : nullptr;
      if (other != nullptr) {
        Request answer = *other;
        answer.rank = set.rank();
        set.Announce(std::move(answer));
      }
      return;
    }
    case OpType::kResync:
      Resync(set, r);
      return;
    case OpType::kBarrier:
      // Negotiation already proved that every rank reached the barrier.
      RestartUnnamed(set.info().id);
      finish(Status::OK());
      return;
    case OpType::kJoin: {
      RestartUnnamed(set.info().id);
      WorkResult result;
      result.value = r.value;
      finish(Status::OK(), &result);
      return;
    }
    case OpType::kAddProcessSet: {
      Result<int> id = CreateProcessSet(r.ranks);
      WorkResult result;
      if (id.ok()) result.value = id.value();
      finish(id.status(), &result);
      return;
    }
    case OpType::kRemoveProcessSet: {
      // Runs on the global set, which cannot be removed.
      Status s = RemoveProcessSet(r.ranks.empty() ? -1 : r.ranks[0]);
      finish(s);
      return;
    }
    default:
      KOLO_LOG(kError) << "kolo's background loop got a " << OpTypeName(r.op)
                       << " response it does not handle";
  }
}

const Request* RuntimeImpl::HeldElsewhere(const std::string& name, int except) const {
  for (const auto& [id, set] : sets_) {
    if (id == except) continue;
    if (const TensorEntry* e = set->Find(name)) return &e->request;
  }
  for (auto it = mismatched_.rbegin(); it != mismatched_.rend(); ++it) {
    if (it->name == name && it->process_set != except) return &*it;
  }
  return nullptr;
}

void RuntimeImpl::FailEverything(const Status& status) {
  CompleteExecuted();  // what the executor finished before it stopped (an exception)
  std::vector<TensorEntry> queued;
  {
    MutexLock lock(&queue_mutex_);
    running_ = false;
    stop_reason_ = status.message();
    queued.swap(queue_);
  }
  for (TensorEntry& e : queued) {
    if (e.work) Complete(std::move(e), status);  // not a refusal
  }
  for (auto& [id, set] : sets_) {
    for (TensorEntry& e : set->TakeAll()) Complete(std::move(e), status);
  }
}

}  // namespace kolo
