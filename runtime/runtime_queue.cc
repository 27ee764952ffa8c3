// The callers' side of the queue, on their own threads: naming entries (the
// set's next unnamed number), refusing a name already pending, queuing the
// entries of an operation or of a refusal, and freeing names once their
// handle is waited for. The cycles take the queue (runtime_impl.cc).
#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "runtime_impl.h"

namespace kolo {

namespace {

// Names an unnamed operation's entries (the set's next number) and says which
// names a named collective holds until its handle is waited for (barrier, join
// and the process-set operations have fixed names and hold none).
std::vector<HeldName> NameEntries(std::vector<TensorEntry>& entries, int64_t epoch, int64_t* next) {
  std::vector<HeldName> held;
  if (!entries[0].request.name.empty()) {
    if (entries[0].request.op > OpType::kReducescatter) return held;
    held.reserve(entries.size());
    for (const TensorEntry& e : entries) {
      held.push_back({e.request.process_set, e.request.op, e.request.name});
    }
    return held;
  }
  const int64_t n = (*next)++;
  const bool grouped = entries.size() > 1;
  const std::string base =
      (grouped ? "grouped_" : "") + std::string(OpTypeName(entries[0].request.op)) + ".noname." +
      (epoch > 0 ? "e" + std::to_string(epoch) + "." : std::string()) + std::to_string(n);
  for (size_t i = 0; i < entries.size(); ++i) {
    Request& q = entries[i].request;
    q.name = grouped ? base + "." + std::to_string(i) : base;
    if (grouped) q.group = base;
    q.unnamed_epoch = epoch;
    q.unnamed_index = n;
  }
  return held;
}

}  // namespace

void RuntimeImpl::Refuse(std::vector<TensorEntry> entries, const std::string& reason) {
  for (TensorEntry& e : entries) {
    e.request.refusal = reason.empty() ? std::string("(no reason given)") : reason;
    e.work.reset();
    e.ready.reset();
  }
  {
    MutexLock lock(&queue_mutex_);
    if (!running_ || shutdown_requested_) return;
    // An unnamed refusal takes its number like a valid call, so that the
    // ranks' unnamed collectives stay in step.
    UnnamedState& state = unnamed_[entries[0].request.process_set];
    (void)NameEntries(entries, state.epoch, &state.next);
    for (TensorEntry& e : entries) queue_.push_back(std::move(e));
    queue_due_ = Clock::now();  // the other ranks wait to hear it
  }
  queue_cv_.Signal();
}

Result<std::shared_ptr<Work>> RuntimeImpl::Enqueue(std::vector<TensorEntry> entries,
                                                   bool caller_waits) {
  // Device tensors: checked, and their readiness recorded on the caller's
  // stream, here on the caller's thread (with stream-ordered completion only
  // checked: the launch records it, or runs on that stream). A failure is a
  // refusal: the other ranks are told.
  for (TensorEntry& e : entries) {
    if (e.input.device == kCpuDevice) continue;
    auto refuse = [&](Status why) {
      const std::string what =
          std::string(OpTypeName(e.request.op)) +
          (e.request.name.empty() ? std::string(" (unnamed)") : " of '" + e.request.name + "'");
      Status refused(why.code(), what + ": " + why.message());
      Refuse(std::move(entries), refused.message());
      return refused;
    };
    Status usable = gpu_->CheckDevice(e.input.device, e.input.dtype);
    if (!usable.ok()) return refuse(Status::InvalidArgument(usable.message()));
    if (config_.async_completion) {
      Status stream = gpu_->CheckStream(e.input.device, e.stream);
      if (!stream.ok()) return refuse(stream);
      continue;
    }
    auto ready = gpu_->MarkReady(e.input.device, e.stream);
    if (!ready.ok()) {
      // InvalidArgument: a CUDA graph captures the stream (Gpu::CheckStream).
      if (ready.status().code() == StatusCode::kInvalidArgument) return refuse(ready.status());
      return refuse(Status::Internal("could not record an event on the tensor's stream (" +
                                     ready.status().message() + "); is the stream on " +
                                     DeviceName(e.input.device) + "?"));
    }
    e.ready = std::move(ready).value();
  }
  const int set = entries[0].request.process_set;
  const OpType op = entries[0].request.op;
  std::shared_ptr<Work> work;
  bool wake = false;
  auto now = Clock::now();
  {
    MutexLock lock(&queue_mutex_);
    if (!running_ || shutdown_requested_) {
      return Status::Aborted("kolo is not running" + (stop_reason_.empty()
                                                          ? std::string(" (shutdown() was called)")
                                                          : " (" + stop_reason_ + ")"));
    }
    auto& names = names_[set];
    const uint32_t op_bit = 1u << static_cast<unsigned>(op);
    // A name twice in one operation is in flight at its second use. A group's
    // members are told apart by a hash set, not by comparing each with all before it.
    std::unordered_set<std::string_view> seen;
    if (entries.size() > 1) seen.reserve(entries.size());
    for (size_t i = 0; i < entries.size(); ++i) {
      const std::string& name = entries[i].request.name;
      if (name.empty()) continue;  // numbered below, never taken
      bool in_flight = entries.size() > 1 && !seen.insert(name).second;
      auto use = names.find(name);
      in_flight |= use != names.end() && use->second.in_flight;
      if (in_flight || (use != names.end() && (use->second.unwaited & op_bit))) {
        return Status::InvalidArgument(
            "a collective named '" + name + "' is already pending on this rank" +
            (in_flight ? std::string()
                       : " (it finished, but its handle has not been synchronized yet)") +
            "; names must be unique among operations in flight (synchronize the first one, or "
            "use another name)");
      }
    }
    // Numbered only once valid: a call refused on one rank does not count.
    UnnamedState& state = unnamed_[set];
    std::vector<HeldName> held = NameEntries(entries, state.epoch, &state.next);
    const uint32_t held_bit = held.empty() ? 0 : op_bit;
    for (const TensorEntry& e : entries) {
      // An unnamed entry's name is a number nothing else takes: no use to record.
      if (e.request.unnamed()) continue;
      NameUse& use = names[e.request.name];
      use.in_flight = true;
      use.unwaited |= held_bit;
    }
    work = std::make_shared<Work>(static_cast<int>(entries.size()), std::move(held));
    // Nobody waits yet: the operation waits a cycle time for others to fuse
    // with (so a start returns before its collective runs, as in Horovod).
    if (caller_waits) {
      queue_due_ = now;
    } else if (queue_.empty()) {
      queue_due_ = now + start_delay_;
      wake = true;  // the background thread may sleep past it
    }
    for (TensorEntry& e : entries) {
      e.work = work;
      e.enqueued = now;
    }
    // An empty queue takes the operation's entries as they are. Else the entries are
    // appended, the queue growing once for a group, not step by step (the cycles take
    // the whole queue, its capacity too).
    if (queue_.empty()) {
      queue_.swap(entries);
    } else {
      const size_t need = queue_.size() + entries.size();
      if (need > queue_.capacity()) queue_.reserve(std::max(need, 2 * queue_.capacity()));
      for (TensorEntry& e : entries) queue_.push_back(std::move(e));
    }
  }
  // A caller that waits at once runs the cycle itself (RunCyclesFor), or wakes
  // the background thread there. A start that joins a batch already due
  // later wakes nobody.
  if (caller_waits ? !caller_runs_ : wake) queue_cv_.Signal();
  return work;
}

void RuntimeImpl::Release(const Work& work) {
  if (work.held_names().empty()) return;
  MutexLock lock(&queue_mutex_);
  for (const HeldName& h : work.held_names()) {
    auto& names = names_[h.process_set];
    auto use = names.find(h.name);
    if (use == names.end()) continue;
    use->second.unwaited &= ~(1u << static_cast<unsigned>(h.op));
    if (!use->second.in_flight && use->second.unwaited == 0) names.erase(use);
  }
}

}  // namespace kolo
