#include "runtime_impl.h"

#include <algorithm>

#include "../ops/shm_allreduce.h"
#include "logging.h"

namespace kolo {
namespace {

// A rank that takes longer than this inside one shared-memory allreduce has
// died or stopped (every rank negotiated the op before entering it).
constexpr double kShmTimeoutSeconds = 60;

}  // namespace

Result<std::unique_ptr<RuntimeImpl>> RuntimeImpl::Create(const InitOptions& options) {
  ConfigNotes notes;
  Result<Config> config = ParseConfig(KoloEnvironment(), options.settings, &notes);
  if (!config.ok()) return config.status();
  std::unique_ptr<RuntimeImpl> rt(new RuntimeImpl());
  rt->config_ = config.value();
  SetLogLevel(rt->config_.log_level);
  KOLO_RETURN_IF_ERROR(rt->InitMpi(options));
  SetLogRank(rt->rank_);
  if (rt->rank_ == 0) {
    for (const std::string& line : notes.Warnings()) KOLO_LOG(kWarning) << line;
    if (std::string line = notes.AliasLine(); !line.empty()) KOLO_LOG(kInfo) << line;
  }
  KOLO_RETURN_IF_ERROR(rt->InitProcessSets(options));
  if (!rt->config_.timeline_path.empty() && rt->rank_ == 0) {
    KOLO_RETURN_IF_ERROR(
        rt->timeline_.Start(rt->config_.timeline_path, rt->config_.timeline_mark_cycles));
  }
  RuntimeImpl* raw = rt.get();
  rt->gpu_ = MakeGpu(rt->config_.hierarchical_allreduce);
  rt->executor_ = std::make_unique<Executor>(rt->config_, &rt->timeline_, rt->gpu_.get(),
                                             [raw](const TensorEntry& e) { raw->ForgetName(e); });
  rt->running_ = true;
  rt->thread_ = std::thread([raw] { raw->BackgroundLoop(); });
  return rt;
}

Status RuntimeImpl::InitMpi(const InitOptions& options) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    return Status::PreconditionFailed(
        "MPI was already finalized in this process (by an earlier kolo shutdown() or by the "
        "application); MPI cannot be initialized twice. Initialize MPI yourself and pass its "
        "communicator to init() to shut kolo down and start it again.");
  }
  if (!initialized) {
    KOLO_RETURN_IF_ERROR(MpiStatus(
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_), "MPI_Init_thread"));
    owns_mpi_ = true;
  } else {
    MPI_Query_thread(&thread_level_);
  }
  if (thread_level_ < MPI_THREAD_SERIALIZED) {
    return Status::PreconditionFailed(
        "MPI was initialized with a thread level below MPI_THREAD_SERIALIZED; kolo calls MPI "
        "from its background thread. Initialize MPI with MPI_Init_thread(..., "
        "MPI_THREAD_MULTIPLE, ...) or let kolo initialize it.");
  }
  MPI_Comm base = options.comm == MPI_COMM_NULL ? MPI_COMM_WORLD : options.comm;
  MPI_Comm dup;
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(base, &dup), "MPI_Comm_dup"));
  global_comm_ = MpiComm(dup);
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  MPI_Comm_rank(dup, &rank_);
  MPI_Comm_size(dup, &size_);

  MPI_Comm local, cross;
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_split_type(dup, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
                "MPI_Comm_split_type"));
  MpiComm local_owner(local);
  MPI_Comm_rank(local, &local_rank_);
  MPI_Comm_size(local, &local_size_);
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_split(dup, local_rank_, rank_, &cross), "MPI_Comm_split"));
  MpiComm cross_owner(cross);
  MPI_Comm_rank(cross, &cross_rank_);
  MPI_Comm_size(cross, &cross_size_);
  // Homogeneous: every host runs as many ranks (min == max of local sizes).
  int bounds[2] = {local_size_, -local_size_};
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Allreduce(MPI_IN_PLACE, bounds, 2, MPI_INT, MPI_MIN, dup), "MPI_Allreduce"));
  homogeneous_ = bounds[0] == -bounds[1];

  Result<std::unique_ptr<MpiOps>> ops = MpiOps::Create();
  if (!ops.ok()) return ops.status();
  mpi_ops_ = std::move(ops).value();
  return Status::OK();
}

Status RuntimeImpl::InitProcessSets(const InitOptions& options) {
  std::vector<int> all(size_);
  for (int r = 0; r < size_; ++r) all[r] = r;
  Result<int> global = CreateProcessSet(all);
  if (!global.ok()) return global.status();
  for (const std::vector<int>& ranks : options.process_sets) {
    std::vector<int> sorted = ranks;
    std::sort(sorted.begin(), sorted.end());
    if (sorted.empty() || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() ||
        sorted.front() < 0 || sorted.back() >= size_) {
      return Status::InvalidArgument(
          "a process set given to init() must list distinct ranks "
          "between 0 and " +
          std::to_string(size_ - 1));
    }
    Result<int> id = CreateProcessSet(ranks);
    if (!id.ok()) return id.status();
  }
  return Status::OK();
}

Result<int> RuntimeImpl::CreateProcessSet(const std::vector<int>& ranks) {
  auto info = std::make_shared<ProcessSetInfo>();
  info->id = sets_.empty() ? kGlobalProcessSet : next_set_id_++;
  info->ranks = ranks;
  auto me = std::find(ranks.begin(), ranks.end(), rank_);
  info->rank_in_set = me == ranks.end() ? -1 : static_cast<int>(me - ranks.begin());
  MPI_Comm comm;
  int color = info->rank_in_set >= 0 ? 0 : MPI_UNDEFINED;
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_split(global_comm_.get(), color, std::max(info->rank_in_set, 0), &comm),
                "MPI_Comm_split"));
  if (comm != MPI_COMM_NULL) {
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    std::unique_ptr<ShmAllreduce> shm;
    if (config_.shm_allreduce && config_.piece_bytes > 0) {
      // Collective over the set's members, like the split above.
      auto made = ShmAllreduce::Create(comm, config_.piece_bytes, kShmTimeoutSeconds);
      if (made.ok()) {
        shm = std::move(made).value();
      } else {
        KOLO_LOG(kDebug) << "process set " << info->id
                         << ": allreduce through MPI: " << made.status().message();
      }
    }
    std::unique_ptr<Hierarchy> hierarchy;
    if (config_.hierarchical_allreduce && !shm) {
      std::string why_not;
      auto made = Hierarchy::Create(comm, &why_not);
      if (!made.ok()) return made.status();
      hierarchy = std::move(made).value();
      if (!hierarchy && info->rank_in_set == 0) {
        KOLO_LOG(kInfo) << "process set " << info->id << ": KOLO_HIERARCHICAL_ALLREDUCE=1, but "
                        << why_not << "; allreduce is flat";
      }
    }
    sets_[info->id] = std::make_unique<ProcessSet>(info, MpiComm(comm), mpi_ops_.get(), config_,
                                                   std::move(shm), std::move(hierarchy));
  }
  MutexLock lock(&sets_mutex_);
  set_infos_[info->id] = info;
  return info->id;
}

Status RuntimeImpl::RemoveProcessSet(int id) {
  auto it = sets_.find(id);
  if (it != sets_.end()) {
    for (TensorEntry& e : it->second->TakeAll()) {
      executor_->Finish(std::move(e), Status::Aborted("process set " + std::to_string(id) +
                                                      " was removed while this operation waited"));
    }
    executor_->DrainGpu();  // nothing may still run on the set's NCCL communicators
    gpu_->Forget(it->second->comm());
    sets_.erase(it);
  }
  MutexLock lock(&sets_mutex_);
  set_infos_.erase(id);
  return Status::OK();
}

Result<std::shared_ptr<const ProcessSetInfo>> RuntimeImpl::SetInfo(int id) const {
  MutexLock lock(&sets_mutex_);
  auto it = set_infos_.find(id);
  if (it == set_infos_.end()) {
    return Status::InvalidArgument("process set " + std::to_string(id) +
                                   " does not exist (it was never added, or was removed)");
  }
  return it->second;
}

RuntimeImpl::~RuntimeImpl() {
  Status s = Shutdown();
  if (!s.ok()) KOLO_LOG(kError) << "shutdown failed: " << s.message();
}

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

Result<Handle> RuntimeImpl::Enqueue(std::vector<TensorEntry> entries) {
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
  Handle handle;
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
    MutexLock handles_lock(&handles_mutex_);
    handle = next_handle_++;
    handles_[handle] = work;
  }
  queue_cv_.Signal();
  return handle;
}

void RuntimeImpl::ForgetName(const TensorEntry& entry) {
  MutexLock lock(&queue_mutex_);
  pending_names_[entry.request.process_set].erase(entry.request.name);
}

bool RuntimeImpl::Poll(Handle h) const {
  std::shared_ptr<Work> work;
  {
    MutexLock lock(&handles_mutex_);
    auto it = handles_.find(h);
    if (it == handles_.end()) return true;
    work = it->second;
  }
  return work->done();
}

Result<std::shared_ptr<Work>> RuntimeImpl::FindWork(Handle h) const {
  MutexLock lock(&handles_mutex_);
  auto it = handles_.find(h);
  if (it == handles_.end()) {
    return Status::InvalidArgument("unknown handle " + std::to_string(h) +
                                   " (already waited for, or never returned by kolo)");
  }
  return it->second;
}

Status RuntimeImpl::Wait(Handle h, WorkResult* result) {
  KOLO_ASSIGN_OR_RETURN(std::shared_ptr<Work> work, FindWork(h));
  Status s = work->Wait(result);
  MutexLock lock(&handles_mutex_);
  handles_.erase(h);
  return s;
}

std::optional<Status> RuntimeImpl::WaitFor(Handle h, double timeout_seconds, WorkResult* result) {
  Result<std::shared_ptr<Work>> work = FindWork(h);
  if (!work.ok()) return work.status();
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(timeout_seconds));
  Status s;
  if (!work.value()->WaitUntil(deadline, &s, result)) return std::nullopt;
  MutexLock lock(&handles_mutex_);
  handles_.erase(h);
  return s;
}

void RuntimeImpl::WaitForWork(bool anything_pending) {
  auto timeout = std::chrono::duration<double, std::milli>(anything_pending ? config_.cycle_time_ms
                                                                            : config_.idle_tick_ms);
  auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(timeout);
  MutexLock lock(&queue_mutex_);
  while (queue_.empty() && !shutdown_requested_) {
    auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) break;
    queue_cv_.WaitFor(left);
  }
}

void RuntimeImpl::BackgroundLoop() {
  bool anything_pending = false;
  for (;;) {
    WaitForWork(anything_pending);
    anything_pending = false;
    if (!RunCycle()) break;
    for (auto& [id, set] : sets_) anything_pending |= set->has_pending();
    anything_pending |= executor_->gpu_busy();
  }
  executor_->DrainGpu();
}

// One cycle: take the queue, negotiate every set this rank belongs to (in id
// order, the same on every rank), execute what is ready.
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
    executor_->Execute(
        set, outcome.responses,
        [this](const std::vector<int>& ranks) { return CreateProcessSet(ranks); },
        [this](int removed) { return RemoveProcessSet(removed); },
        [this, id](const std::string& name) -> const Request* {
          for (auto& [other_id, other] : sets_) {
            if (other_id == id) continue;
            if (const TensorEntry* e = other->Find(name)) return &e->request;
          }
          return nullptr;
        });
    if (sets_.count(id)) CancelUnnamed(set, outcome.responses);
  }
  executor_->PollGpu();
  timeline_.Flush();
  return true;
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

Status RuntimeImpl::Shutdown() {
  if (shut_down_) return Status::OK();
  shut_down_ = true;
  {
    MutexLock lock(&queue_mutex_);
    shutdown_requested_ = true;
  }
  queue_cv_.Signal();
  if (thread_.joinable()) thread_.join();
  running_ = false;
  timeline_.Stop();
  sets_.clear();
  executor_.reset();
  gpu_.reset();  // NCCL communicators, streams and buffers
  mpi_ops_.reset();
  global_comm_ = MpiComm();
  if (owns_mpi_) {
    owns_mpi_ = false;
    return MpiStatus(MPI_Finalize(), "MPI_Finalize");
  }
  return Status::OK();
}

}  // namespace kolo
