// Set-up and tear-down of the runtime: MPI, the placement of this process,
// the process sets with their data movers, and the orderly shutdown.
#include <algorithm>

#include "logging.h"
#include "runtime_impl.h"

namespace kolo {
namespace {

// A rank that takes longer than this inside one shared-memory allreduce has
// died or stopped (every rank negotiated the op before entering it).
constexpr double kShmTimeoutSeconds = 60;

}  // namespace

Status CheckSetRanks(const std::vector<int>& ranks, int size) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.empty() || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() ||
      sorted.front() < 0 || sorted.back() >= size) {
    return Status::InvalidArgument("a process set must list distinct ranks between 0 and " +
                                   std::to_string(size - 1));
  }
  return Status::OK();
}

Result<std::unique_ptr<RuntimeImpl>> RuntimeImpl::Create(const InitOptions& options) {
  ConfigNotes notes;
  Result<Config> config = ParseConfig(KoloEnvironment(), options.settings, &notes);
  if (!config.ok()) return config.status();
  std::unique_ptr<RuntimeImpl> rt(new RuntimeImpl());
  rt->config_ = config.value();
  SetLogLevel(rt->config_.log_level);
  KOLO_RETURN_IF_ERROR(rt->InitMpi(options));
  SetLogRank(rt->placement_.rank);
  if (rt->placement_.rank == 0) {
    for (const std::string& line : notes.Warnings()) KOLO_LOG(kWarning) << line;
    if (std::string line = notes.AliasLine(); !line.empty()) KOLO_LOG(kInfo) << line;
  }
  rt->gpu_ = MakeGpu(rt->config_.hierarchical_allreduce);
  {
    MutexLock round(&rt->round_mutex_);
    KOLO_RETURN_IF_ERROR(rt->InitAutotune(notes));  // a tuned piece size shapes the sets
    KOLO_RETURN_IF_ERROR(rt->InitProcessSets(options));
    if (!rt->config_.timeline_path.empty() && rt->placement_.rank == 0) {
      KOLO_RETURN_IF_ERROR(
          rt->timeline_.Start(rt->config_.timeline_path, rt->config_.timeline_mark_cycles));
    }
    rt->executor_ = std::make_unique<Executor>(&rt->timeline_);
  }
  // A caller that runs a cycle calls MPI from its own thread, which
  // MPI_THREAD_SERIALIZED allows (round_mutex_ orders the calls); InitMpi
  // refused anything less.
  rt->caller_runs_ = rt->config_.caller_runs;
  {
    MutexLock lock(&rt->queue_mutex_);
    rt->next_cycle_at_ =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double, std::milli>(rt->config_.idle_tick_ms));
  }
  RuntimeImpl* raw = rt.get();
  rt->running_ = true;
  rt->thread_ = std::thread([raw] { raw->BackgroundLoop(); });
  return rt;
}

Status RuntimeImpl::InitMpi(const InitOptions& options) {
  int initialized = 0, finalized = 0, thread_level = 0;
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
        MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level), "MPI_Init_thread"));
    owns_mpi_ = true;
  } else {
    MPI_Query_thread(&thread_level);
  }
  placement_.threads_multiple = thread_level == MPI_THREAD_MULTIPLE;
  if (thread_level < MPI_THREAD_SERIALIZED) {
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
  MPI_Comm_rank(dup, &placement_.rank);
  MPI_Comm_size(dup, &placement_.size);

  MPI_Comm local, cross;
  KOLO_RETURN_IF_ERROR(SplitByHost(dup, placement_.rank, &local));
  MpiComm local_owner(local);
  MPI_Comm_rank(local, &placement_.local_rank);
  MPI_Comm_size(local, &placement_.local_size);
  KOLO_RETURN_IF_ERROR(MpiStatus(
      MPI_Comm_split(dup, placement_.local_rank, placement_.rank, &cross), "MPI_Comm_split"));
  MpiComm cross_owner(cross);
  MPI_Comm_rank(cross, &placement_.cross_rank);
  MPI_Comm_size(cross, &placement_.cross_size);
  // Homogeneous: every host runs as many ranks (min == max of local sizes).
  int bounds[2] = {placement_.local_size, -placement_.local_size};
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Allreduce(MPI_IN_PLACE, bounds, 2, MPI_INT, MPI_MIN, dup), "MPI_Allreduce"));
  placement_.homogeneous = bounds[0] == -bounds[1];

  Result<std::unique_ptr<MpiOps>> ops = MpiOps::Create();
  if (!ops.ok()) return ops.status();
  mpi_ops_ = std::move(ops).value();
  return Status::OK();
}

Status RuntimeImpl::InitProcessSets(const InitOptions& options) {
  std::vector<int> all(placement_.size);
  for (int r = 0; r < placement_.size; ++r) all[r] = r;
  Result<int> global = CreateProcessSet(all);
  if (!global.ok()) return global.status();
  for (const std::vector<int>& ranks : options.process_sets) {
    Status valid = CheckSetRanks(ranks, placement_.size);
    if (!valid.ok()) return Status::InvalidArgument("init(): " + valid.message());
    Result<int> id = CreateProcessSet(ranks);
    if (!id.ok()) return id.status();
  }
  return Status::OK();
}

Result<int> RuntimeImpl::CreateProcessSet(const std::vector<int>& ranks) {
  auto info = std::make_shared<ProcessSetInfo>();
  info->id = sets_.empty() ? kGlobalProcessSet : next_set_id_++;
  info->ranks = ranks;
  auto me = std::find(ranks.begin(), ranks.end(), placement_.rank);
  info->rank_in_set = me == ranks.end() ? -1 : static_cast<int>(me - ranks.begin());
  MPI_Comm comm;
  int color = info->rank_in_set >= 0 ? 0 : MPI_UNDEFINED;
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_split(global_comm_.get(), color, std::max(info->rank_in_set, 0), &comm),
                "MPI_Comm_split"));
  if (comm != MPI_COMM_NULL) {
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    HostMoverOptions options;
    options.piece_bytes = config_.piece_bytes;
    options.shared_memory = config_.shm_allreduce;
    options.shm_single_copy = config_.shm_single_copy;
    options.hierarchical = config_.hierarchical_allreduce;
    options.shm_timeout_seconds = kShmTimeoutSeconds;
    // Collective over the set's members, like the split above.
    KOLO_ASSIGN_OR_RETURN(HostMoverChoice host, MakeHostMover(comm, mpi_ops_.get(), options));
    if (host.fallback && info->rank_in_set == 0) {
      KOLO_LOG(kInfo) << "process set " << info->id << ": " << host.why;
    } else {
      KOLO_LOG(kDebug) << "process set " << info->id << ": " << host.why;
    }
    // Autotune may have changed the piece size since init: every member
    // creates the set at the same round, so they agree on it.
    if (piece_bytes_now_ != config_.piece_bytes) host.mover->SetPieceBytes(piece_bytes_now_);
    sets_[info->id] = std::make_unique<ProcessSet>(info, MpiComm(comm), std::move(host.mover),
                                                   gpu_.get(), config_);
  }
  MutexLock lock(&sets_mutex_);
  set_infos_[info->id] = info;
  return info->id;
}

Status RuntimeImpl::RemoveProcessSet(int id) {
  auto it = sets_.find(id);
  if (it != sets_.end()) {
    for (TensorEntry& e : it->second->TakeAll()) {
      Complete(std::move(e), Status::Aborted("process set " + std::to_string(id) +
                                             " was removed while this operation waited"));
    }
    executor_->DrainGpu();  // nothing may still run on the set's NCCL communicators
    CompleteExecuted();
    sets_.erase(it);  // with its NCCL communicators
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

Status RuntimeImpl::Shutdown() {
  MutexLock shutting_down(&shutdown_mutex_);
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
  {
    // No cycle runs any more (the last one ended the cycles); a caller that
    // tries one finds cycles_ended_.
    MutexLock round(&round_mutex_);
    cycles_ended_ = true;
    sets_.clear();  // with their NCCL communicators, before the streams of gpu_
    executor_.reset();
  }
  gpu_.reset();  // streams and buffers
  mpi_ops_.reset();
  global_comm_ = MpiComm();
  if (owns_mpi_) {
    owns_mpi_ = false;
    return MpiStatus(MPI_Finalize(), "MPI_Finalize");
  }
  return Status::OK();
}

}  // namespace kolo
