// Set-up and tear-down of the runtime: MPI, the placement of this process,
// the process sets with their data movers, and the orderly shutdown.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <mutex>

#include "kolo/mpi_handle.h"
#include "logging.h"
#include "ops/ulfm.h"
#include "replacements.h"
#include "runtime_impl.h"

namespace kolo {
namespace {

// A rank that takes longer than this inside one shared-memory allreduce has
// died or stopped (every rank negotiated the op before entering it).
constexpr double kShmTimeoutSeconds = 60;

std::string Joined(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string RankListText(const std::vector<int>& ranks) { return "[" + Joined(ranks) + "]"; }

// FNV-1a over the list, to compare lists across ranks in one allreduce.
uint64_t ListDigest(const std::vector<int>& ranks) {
  uint64_t h = 1469598103934665603ULL;
  for (int r : ranks) {
    for (int b = 0; b < 4; ++b) {
      h ^= (static_cast<uint32_t>(r) >> (8 * b)) & 0xff;
      h *= 1099511628211ULL;
    }
  }
  return h;
}

// Every listed rank passed the same list (the same ranks in the same order),
// or an error that says who passed which; collective over `members`.
Status CheckSameList(const std::vector<int>& ranks, MPI_Comm members, const std::string& call) {
  const uint64_t digest = ListDigest(ranks);
  uint64_t bounds[2] = {digest, ~digest};  // min of the digests, and ~max
  KOLO_RETURN_IF_ERROR(MpiStatus(
      MPI_Allreduce(MPI_IN_PLACE, bounds, 2, MPI_UINT64_T, MPI_MIN, members), "MPI_Allreduce"));
  if (bounds[0] == ~bounds[1]) return Status::OK();
  // They differ: every member gathers every list and writes the same message.
  const int n = static_cast<int>(ranks.size());
  int size = 0;
  MPI_Comm_size(members, &size);
  std::vector<int> all(static_cast<size_t>(n) * size);
  KOLO_RETURN_IF_ERROR(MpiStatus(
      MPI_Allgather(ranks.data(), n, MPI_INT, all.data(), n, MPI_INT, members), "MPI_Allgather"));
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  std::map<std::vector<int>, std::vector<int>> passed_by;  // list -> world ranks that passed it
  for (int i = 0; i < size; ++i) {
    passed_by[std::vector<int>(all.begin() + i * n, all.begin() + (i + 1) * n)].push_back(
        sorted[i]);
  }
  std::string who;
  for (const auto& [list, world] : passed_by) {
    who += (who.empty() ? "" : "; ") +
           std::string(world.size() == 1 ? "world rank " : "world ranks ") + Joined(world) +
           " passed " + RankListText(list);
  }
  return Status::InvalidArgument(call + ": the listed ranks passed different lists (" + who +
                                 "); every listed rank must pass the same list, whose order "
                                 "gives kolo's ranks");
}

// Horovod's init(comm=[ranks]): a communicator of the listed ranks of
// MPI_COMM_WORLD, ranked in the list's order. MPI_Comm_create_group is
// collective over the listed ranks only, so a process that is not listed need
// not take part; it gets an error here, where Horovod's falls back to
// MPI_COMM_WORLD and waits forever in MPI_Comm_dup for the listed ranks.
Status CommOfWorldRanks(const std::vector<int>& ranks, MpiComm* out) {
  int world_size = 0, me = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  const std::string call = "init(comm=" + RankListText(ranks) + ")";
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.front() < 0 ||
      sorted.back() >= world_size) {
    return Status::InvalidArgument(call +
                                   ": the list must hold distinct ranks of MPI_COMM_WORLD, "
                                   "between 0 and " +
                                   std::to_string(world_size - 1));
  }
  const auto mine = std::find(ranks.begin(), ranks.end(), me);
  if (mine == ranks.end()) {
    return Status::InvalidArgument(
        call + ": this process is rank " + std::to_string(me) +
        " of MPI_COMM_WORLD, which the list does not hold. Only the listed ranks start kolo with "
        "it; give this process a list that holds its rank (e.g. the other ranks' own group), or "
        "do not call init() here");
  }
  MPI_Group world_group = MPI_GROUP_NULL, group = MPI_GROUP_NULL;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  MPI_Group_incl(world_group, static_cast<int>(sorted.size()), sorted.data(), &group);
  MPI_Comm created = MPI_COMM_NULL;
  // In ascending order: ranks whose lists order the same ranks differently
  // still build one communicator, and learn so below.
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, /*tag=*/0, &created);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  KOLO_RETURN_IF_ERROR(MpiStatus(rc, "MPI_Comm_create_group"));
  MpiComm members(created);
  MPI_Comm_set_errhandler(created, MPI_ERRORS_RETURN);
  KOLO_RETURN_IF_ERROR(CheckSameList(ranks, created, call));
  MPI_Comm ordered = MPI_COMM_NULL;
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_split(created, 0, static_cast<int>(mine - ranks.begin()), &ordered),
                "MPI_Comm_split"));
  *out = MpiComm(ordered);
  return Status::OK();
}

// A start that failed after kolo initialized MPI leaves MPI initialized:
// MPI_Finalize would wait there for every other process of the job to
// finalize too. It is finalized when the process exits.
void FinalizeMpiAtExit() {
  static std::once_flag registered;
  std::call_once(registered, [] {
    std::atexit([] {
      if (MpiUsable()) MPI_Finalize();
    });
  });
}

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
  Status started = rt->Start(options, notes);
  if (!started.ok()) {
    if (rt->owns_mpi_) FinalizeMpiAtExit();
    rt->owns_mpi_ = false;
    return started;
  }
  return rt;
}

Status RuntimeImpl::Start(const InitOptions& options, const ConfigNotes& notes) {
  KOLO_RETURN_IF_ERROR(InitMpi(options));
  SetLogRank(placement_.rank);
  if (placement_.rank == 0) {
    for (const std::string& line : notes.Warnings()) KOLO_LOG(kWarning) << line;
    if (std::string line = notes.AliasLine(); !line.empty()) KOLO_LOG(kInfo) << line;
  }
  GpuOptions gpu;
  gpu.hierarchical = config_.hierarchical_allreduce;
  gpu.stream_ordered = config_.async_completion;
  gpu.group_min_bytes = config_.nccl_group_min_bytes;
  gpu_ = MakeGpu(gpu);
  {
    MutexLock round(&round_mutex_);
    KOLO_RETURN_IF_ERROR(InitAutotune(notes));  // a tuned piece size shapes the sets
    KOLO_RETURN_IF_ERROR(InitProcessSets(options));
    if (!config_.timeline_path.empty() && placement_.rank == 0) {
      KOLO_RETURN_IF_ERROR(timeline_.Start(config_.timeline_path, config_.timeline_mark_cycles));
    }
    executor_ = std::make_unique<Executor>(&timeline_, config_.async_completion);
  }
  // A caller that runs a cycle calls MPI from its own thread, which
  // MPI_THREAD_SERIALIZED allows (round_mutex_ orders the calls); InitMpi
  // refused anything less.
  caller_runs_ = config_.caller_runs;
  {
    MutexLock lock(&queue_mutex_);
    next_cycle_at_ = Clock::now() + FromMilliseconds(config_.idle_tick_ms);
    start_delay_ = FromMilliseconds(config_.cycle_time_ms);
  }
  running_ = true;
  thread_ = std::thread([this] { BackgroundLoop(); });
  reporter_ = MetricsReporter::Start(config_.monitor_report, placement_.rank, &metrics_);
  return Status::OK();
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
  MPI_Comm base = CommFromHandle(options.comm);
  MpiComm listed;
  if (options.comm == 0 && options.world_ranks.empty()) {
    // A process that kolo started to grow a job in place joins its ranks
    // (runtime/replacements.h); any other process gets MPI_COMM_NULL here.
    Result<MPI_Comm> joined = JoinAsReplacement();
    if (!joined.ok()) return joined.status();
    if (joined.value() != MPI_COMM_NULL) {
      listed = MpiComm(joined.value());
      base = listed.get();
    }
  }
  if (!options.world_ranks.empty()) {
    if (options.comm != 0) {
      return Status::InvalidArgument("init(): pass a communicator or a list of ranks, not both");
    }
    KOLO_RETURN_IF_ERROR(CommOfWorldRanks(options.world_ranks, &listed));
    base = listed.get();
  }
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
    // The negotiation round's exchange: its bit vector is a flags word and two
    // bits per cache entry (process_set_negotiation.cc). Collective too.
    BitRoundOptions round_options;
    round_options.shared_memory = config_.shm_negotiation;
    round_options.max_words =
        1 + 2 * static_cast<int>((std::max<int64_t>(config_.cache_capacity, 0) + 63) / 64);
    round_options.global_rank = placement_.rank;
    std::string round_why;
    KOLO_ASSIGN_OR_RETURN(std::unique_ptr<BitRound> round,
                          MakeBitRound(comm, round_options, &round_why));
    KOLO_LOG(kDebug) << "process set " << info->id << ": negotiation rounds through " << round_why;
    if (info->id == kGlobalProcessSet) global_round_ = round.get();
    sets_[info->id] = std::make_unique<ProcessSet>(info, MpiComm(comm), std::move(host.mover),
                                                   std::move(round), gpu_.get(), config_);
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
  StopLocally(/*lost_ranks=*/false);
  global_comm_ = MpiComm();
  if (owns_mpi_) {
    owns_mpi_ = false;
    return MpiStatus(MPI_Finalize(), "MPI_Finalize");
  }
  return Status::OK();
}

void RuntimeImpl::StopLocally(bool lost_ranks) {
  shut_down_ = true;
  {
    MutexLock lock(&queue_mutex_);
    shutdown_requested_ = true;
  }
  queue_cv_.Signal();
  if (thread_.joinable()) thread_.join();
  reporter_.reset();  // after the last cycle: its final snapshot has every count
  running_ = false;
  timeline_.Stop();
  {
    // No cycle runs any more (the last one ended the cycles); a caller that
    // tries one finds cycles_ended_.
    MutexLock round(&round_mutex_);
    cycles_ended_ = true;
    // A finalize of an NCCL communicator would wait for the dead: abort them.
    if (lost_ranks) RevokeAll();
    sets_.clear();  // with their NCCL communicators, before the streams of gpu_
    executor_.reset();
  }
  gpu_.reset();  // streams and buffers
  mpi_ops_.reset();
}

void RuntimeImpl::RevokeAll() {
  if (!UlfmUnavailableReason().empty()) return;
  RevokeIfUsable(global_comm_.get());
  for (auto& [id, set] : sets_) {
    RevokeIfUsable(set->comm());
    set->round().Abort();
    if (set->movers().host != nullptr) set->movers().host->Abort();
    if (set->movers().device_comms != nullptr) set->movers().device_comms->Abort();
  }
}

Result<MPI_Comm> RuntimeImpl::ShrinkAfterFailure() {
  MutexLock shutting_down(&shutdown_mutex_);
  if (shut_down_) return Status::PreconditionFailed("kolo was shut down on this rank");
  const std::string why_not = UlfmUnavailableReason();
  if (!why_not.empty()) return Status::PreconditionFailed("cannot recover in place: " + why_not);
  // The background thread may wait in a collective on the global set: the
  // revoke ends it there (and on every rank), and its cycle revokes the rest.
  RevokeIfUsable(global_comm_.get());
  if (global_round_ != nullptr) global_round_->Abort();  // a round through shared memory
  StopLocally(/*lost_ranks=*/true);
  Result<MPI_Comm> shrunk = ShrinkSurvivors(global_comm_.get());
  global_comm_ = MpiComm();
  // MPI_Finalize would wait for the processes that died: MPI ends with the
  // process (docs/elastic.md, "Reset in place").
  owns_mpi_ = false;
  return shrunk;
}

Result<MPI_Comm> RuntimeImpl::HandOverForGrowth() {
  MutexLock shutting_down(&shutdown_mutex_);
  if (shut_down_) return Status::PreconditionFailed("kolo was shut down on this rank");
  StopLocally(/*lost_ranks=*/false);
  MPI_Comm ranks = MPI_COMM_NULL;
  Status duplicated = MpiStatus(MPI_Comm_dup(global_comm_.get(), &ranks), "MPI_Comm_dup");
  global_comm_ = MpiComm();
  // MPI stays initialized for the grown runtime; like the survivors of a
  // shrink, the process ends without MPI_Finalize.
  owns_mpi_ = false;
  if (!duplicated.ok()) return duplicated;
  MPI_Comm_set_errhandler(ranks, MPI_ERRORS_RETURN);
  return ranks;
}

}  // namespace kolo
