// The queue and the background thread: callers enqueue entries; the loop
// takes them, negotiates each process set, runs the control operations itself
// and hands data responses, with their entries, to the executor.
#include "runtime_impl.h"

#include <algorithm>
#include <exception>

#include "fusion_planner.h"
#include "logging.h"

namespace kolo {

namespace {

Status OutOfStep(int set, const std::string& why) {
  return Status::PreconditionFailed(
      "Unnamed collectives on process set " + std::to_string(set) +
      " are refused until every rank calls barrier() (or join()): the ranks' unnamed "
      "collectives went out of step when " +
      why + ". Name your collectives (name=...) so that they pair by name.");
}

// The first sentence of a coordinator's error: what went wrong, without the advice.
std::string FirstSentence(const std::string& text) {
  size_t end = text.find(". ");
  if (end == std::string::npos) end = text.size() - (!text.empty() && text.back() == '.');
  return text.substr(0, end);
}

}  // namespace

RuntimeImpl::AutoName RuntimeImpl::NextAutoName(const std::string& prefix, int set) {
  MutexLock lock(&queue_mutex_);
  UnnamedState& state = unnamed_[set];
  int64_t n = state.counters[prefix]++;
  AutoName out;
  out.epoch = state.epoch;
  out.name = prefix + ".noname." +
             (state.epoch > 0 ? "e" + std::to_string(state.epoch) + "." : std::string()) +
             std::to_string(n);
  return out;
}

void RuntimeImpl::RestartUnnamed(int set) {
  MutexLock lock(&queue_mutex_);
  UnnamedState& state = unnamed_[set];
  ++state.epoch;
  state.counters.clear();
  state.out_of_step.clear();
}

void RuntimeImpl::CancelUnnamed(ProcessSet& set, const std::vector<Response>& responses) {
  const Response* verdict = nullptr;
  for (const Response& r : responses) {
    if (r.op != OpType::kError || r.cancel_unnamed_epoch < 0) continue;
    if (verdict == nullptr || r.cancel_unnamed_epoch > verdict->cancel_unnamed_epoch) verdict = &r;
  }
  if (verdict == nullptr) return;
  const int id = set.info().id;
  const int64_t epoch = verdict->cancel_unnamed_epoch;
  const std::string why =
      "'" + verdict->names[0] + "' failed (" + FirstSentence(verdict->error) + ")";
  std::vector<TensorEntry> cancelled;
  {
    MutexLock lock(&queue_mutex_);
    UnnamedState& state = unnamed_[id];
    // A rank that already passed a later barrier is in step again.
    if (state.epoch <= epoch && state.out_of_step.empty()) state.out_of_step = why;
    auto doomed = std::stable_partition(queue_.begin(), queue_.end(), [&](const TensorEntry& e) {
      return e.request.process_set != id || !e.request.unnamed() || e.request.unnamed_epoch > epoch;
    });
    for (auto it = doomed; it != queue_.end(); ++it) cancelled.push_back(std::move(*it));
    queue_.erase(doomed, queue_.end());
  }
  for (TensorEntry& e : set.TakeUnnamed(epoch)) cancelled.push_back(std::move(e));
  const Status status =
      Status::PreconditionFailed("Cancelled: the ranks' unnamed collectives on process set " +
                                 std::to_string(id) + " went out of step when " + why +
                                 ". Every rank's barrier() counts them afresh; name your "
                                 "collectives (name=...) so that they pair by name.");
  for (TensorEntry& e : cancelled) executor_->Finish(std::move(e), status);
}

Result<std::shared_ptr<Work>> RuntimeImpl::Enqueue(std::vector<TensorEntry> entries) {
  // Device tensors: checked, and their readiness recorded on the caller's
  // stream, here on the caller's thread.
  for (TensorEntry& e : entries) {
    if (e.input.device == kCpuDevice) continue;
    const std::string what = std::string(OpTypeName(e.request.op)) + " of '" + e.request.name + "'";
    Status usable = gpu_->CheckDevice(e.input.device, e.input.dtype);
    if (!usable.ok()) return Status::InvalidArgument(what + ": " + usable.message());
    auto ready = gpu_->MarkReady(e.input.device, e.stream);
    if (!ready.ok()) {
      return Status::Internal(what + ": could not record an event on the tensor's stream (" +
                              ready.status().message() + "); is the stream on " +
                              DeviceName(e.input.device) + "?");
    }
    e.ready = std::move(ready).value();
  }
  auto work = std::make_shared<Work>(static_cast<int>(entries.size()));
  auto now = Clock::now();
  {
    MutexLock lock(&queue_mutex_);
    if (!running_ || shutdown_requested_) {
      return Status::Aborted("kolo is not running" + (stop_reason_.empty()
                                                          ? std::string(" (shutdown() was called)")
                                                          : " (" + stop_reason_ + ")"));
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      const Request& request = entries[i].request;
      if (request.unnamed()) {
        // Refused while the set's unnamed collectives are out of step (also
        // when named just before this rank learned it).
        const UnnamedState& state = unnamed_[request.process_set];
        if (!state.out_of_step.empty() && request.unnamed_epoch <= state.epoch) {
          return OutOfStep(request.process_set, state.out_of_step);
        }
      }
      auto& names = pending_names_[entries[i].request.process_set];
      const std::string& name = entries[i].request.name;
      bool repeated = false;
      for (size_t j = 0; j < i; ++j) repeated |= entries[j].request.name == name;
      if (names.count(name) || repeated) {
        return Status::InvalidArgument(
            "a collective named '" + name +
            "' is already pending on this rank; names must be "
            "unique among operations in flight (wait for the first one, or use another name)");
      }
    }
    for (TensorEntry& e : entries) {
      pending_names_[e.request.process_set].insert(e.request.name);
      e.work = work;
      e.enqueued = now;
      queue_.push_back(std::move(e));
    }
  }
  queue_cv_.Signal();
  return work;
}

void RuntimeImpl::ForgetName(const TensorEntry& entry) {
  MutexLock lock(&queue_mutex_);
  pending_names_[entry.request.process_set].erase(entry.request.name);
}

void RuntimeImpl::WaitForWork(bool anything_pending) {
  auto timeout = std::chrono::duration<double, std::milli>(anything_pending ? config_.cycle_time_ms
                                                                            : config_.idle_tick_ms);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  MutexLock lock(&queue_mutex_);
  while (queue_.empty() && !shutdown_requested_) {
    auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) break;
    queue_cv_.WaitFor(&queue_mutex_, left);
  }
}

void RuntimeImpl::BackgroundLoop() {
  bool anything_pending = false;
  for (;;) {
    WaitForWork(anything_pending);
    anything_pending = false;
    // Nothing may escape this thread (std::terminate would take the training
    // process with it): an exception fails every pending and future operation.
    try {
      if (!RunCycle()) break;
    } catch (const std::exception& e) {
      KOLO_LOG(kError) << "kolo's background thread stopped on an exception: " << e.what();
      FailEverything(Status::Internal(std::string("kolo's background thread stopped on an "
                                                  "exception (") +
                                      e.what() + "); kolo cannot run collectives any more"));
      break;
    } catch (...) {
      FailEverything(Status::Internal(
          "kolo's background thread stopped on an unknown exception; kolo cannot run collectives "
          "any more"));
      break;
    }
    for (auto& [id, set] : sets_) anything_pending |= set->has_pending();
    anything_pending |= executor_->gpu_busy();
  }
  executor_->DrainGpu();
}

// One cycle: take the queue, negotiate every set this rank belongs to (in id
// order, the same on every rank), run what is ready.
bool RuntimeImpl::RunCycle() {
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
    if (it == sets_.end()) {
      executor_->Finish(std::move(e), Status::InvalidArgument(
                                          "process set " + std::to_string(e.request.process_set) +
                                          " was removed before this operation ran"));
      continue;
    }
    it->second->Add(std::move(e));
  }
  std::vector<int> ids;
  for (auto& [id, set] : sets_) ids.push_back(id);
  for (int id : ids) {
    auto it = sets_.find(id);
    if (it == sets_.end()) continue;  // removed during this cycle
    ProcessSet& set = *it->second;
    NegotiationOutcome outcome;
    Status s = set.Negotiate(id == kGlobalProcessSet && shutdown, now, &outcome);
    if (!s.ok()) {
      KOLO_LOG(kError) << "negotiation failed, kolo stops: " << s.message();
      FailEverything(Status::Internal("kolo's background thread stopped: " + s.message()));
      return false;
    }
    if (outcome.shutdown) {
      FailEverything(Status::Aborted(
          shutdown ? "kolo was shut down before this operation completed"
                   : "kolo was shut down by another rank before this operation completed"));
      return false;
    }
    // Says which cycles paid for a full negotiation (the cache did not serve).
    if (outcome.slow_path && timeline_.mark_cycles()) timeline_.Instant("SLOW_PATH", now);
    if (id == kGlobalProcessSet) AutotuneRound(set, outcome, now);
    Dispatch(set, outcome.responses);
    if (sets_.count(id)) CancelUnnamed(set, outcome.responses);
  }
  executor_->PollGpu();
  timeline_.Flush();
  return true;
}

void RuntimeImpl::Dispatch(ProcessSet& set, const std::vector<Response>& responses) {
  const auto now = Clock::now();
  for (Response& r : FusionPlanner::Plan(responses, config_.fusion_threshold_bytes,
                                         config_.in_place_threshold_bytes)) {
    switch (r.op) {
      case OpType::kAllreduce:
      case OpType::kAllgather:
      case OpType::kBroadcast:
      case OpType::kAlltoall:
      case OpType::kReducescatter:
        executor_->Execute(set.TakeJob(std::move(r), now), set.movers());
        break;
      default:
        RunControl(set, r, now);
    }
  }
}

void RuntimeImpl::RunControl(ProcessSet& set, const Response& r, Clock::time_point now) {
  // Completes this rank's entry for the response's first name, if it has one.
  auto finish = [&](const Status& status, WorkResult* result = nullptr) {
    if (std::optional<TensorEntry> e = set.Take(r.names[0], now)) {
      executor_->Finish(std::move(*e), status, result);
    }
  };
  switch (r.op) {
    case OpType::kError:
      for (const std::string& name : r.names) {
        if (std::optional<TensorEntry> e = set.Take(name, now)) {
          executor_->Finish(std::move(*e), Status::PreconditionFailed(r.error));
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
    case OpType::kBarrier:
      // Negotiation already proved that every rank reached the barrier.
      finish(Status::OK());
      return;
    case OpType::kJoin: {
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
  return nullptr;
}

void RuntimeImpl::FailEverything(const Status& status) {
  std::vector<TensorEntry> queued;
  {
    MutexLock lock(&queue_mutex_);
    running_ = false;
    stop_reason_ = status.message();
    queued.swap(queue_);
  }
  for (TensorEntry& e : queued) executor_->Finish(std::move(e), status);
  for (auto& [id, set] : sets_) {
    for (TensorEntry& e : set->TakeAll()) executor_->Finish(std::move(e), status);
  }
}

}  // namespace kolo
