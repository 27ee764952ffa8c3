// The runtime behind kolo::Runtime: the tensor queue that the caller threads
// fill, and the background thread that empties it, negotiates every process
// set, handles the control operations and hands data responses to the
// executor; it completes every entry itself, the executor's when it returns
// them (Complete).
//
// Threads and data: the caller threads touch only the fields guarded by
// queue_mutex_ and sets_mutex_ (and Work objects, guarded by their own
// mutex). The process sets, the executor and the GPU path belong to the
// thread that runs the cycles, which holds round_mutex_: the background
// thread, or a caller that waits for a host operation while the background
// thread is idle (RunCyclesFor: no thread hand-off for a lone small operation).
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "autotune.h"
#include "base/mutex.h"
#include "config.h"
#include "executor.h"
#include "kolo/runtime_types.h"
#include "metrics.h"
#include "metrics_reporter.h"
#include "process_set.h"
#include "timeline.h"

namespace kolo {

// Checks the ranks of a new process set: distinct, within 0..size-1, at least one.
Status CheckSetRanks(const std::vector<int>& ranks, int size);

class RuntimeImpl {
 public:
  static Result<std::unique_ptr<RuntimeImpl>> Create(const InitOptions& options);
  ~RuntimeImpl();

  Status Shutdown() EXCLUDES(shutdown_mutex_);
  Result<MPI_Comm> ShrinkAfterFailure() EXCLUDES(shutdown_mutex_);
  // Growing in place: stops this runtime in order (every rank calls it at the
  // same point) and returns a duplicate of its global communicator, which the
  // caller owns, for the merge with the new processes.
  Result<MPI_Comm> HandOverForGrowth() EXCLUDES(shutdown_mutex_);
  bool running() const { return running_.load(); }
  std::string stop_reason() EXCLUDES(queue_mutex_) {
    MutexLock lock(&queue_mutex_);
    return stop_reason_;
  }
  const Placement& placement() const { return placement_; }

  Result<std::shared_ptr<const ProcessSetInfo>> SetInfo(int id) const EXCLUDES(sets_mutex_);

  // Validates, names and queues one or more entries sharing one Work. Entries
  // without a name are unnamed: they get the set's next automatic name here,
  // once valid, "<op>.noname.<n>" ("grouped_<op>..." for several; after the
  // set's first barrier or join "<op>.noname.e<k>.<n>"), numbered in call
  // order across all collectives of the set; a group's members "<name>.<i>".
  // `caller_waits`: the caller waits for it at once and runs the cycle itself
  // (RunCyclesFor), so the background thread is not woken.
  Result<std::shared_ptr<Work>> Enqueue(std::vector<TensorEntry> entries, bool caller_waits = false)
      EXCLUDES(queue_mutex_);
  // Called by a caller thread about to wait for `work`: when caller-runs is
  // on, the work is on host memory and no thread runs cycles now, runs cycles
  // on this thread until the work is done, the round waits on other ranks
  // longer than kCallerPatience (the background thread finishes it), `until`
  // has passed (the caller has signals to check: the binding waits in slices
  // of 0.1 s), or kolo stops. Otherwise wakes the background thread (its work
  // may be queued unannounced) and returns; the caller then waits on `work`
  // as before.
  void RunCyclesFor(Work& work, Clock::time_point until = Clock::time_point::max())
      EXCLUDES(round_mutex_, queue_mutex_);
  // Somebody waits for the queue (a callback, Runtime::WhenDone): the next
  // cycle is due now, on the background thread.
  void DueNow() EXCLUDES(queue_mutex_);
  // This rank refused the collective of `entries` on its calling thread (a bad
  // input; `reason` says which): the entries (requests only; unnamed ones get
  // their number here, as a valid call would) go to their set's coordinator as
  // refusals, so that the other ranks' matching collective fails within a
  // negotiation round instead of waiting for this rank.
  void Refuse(std::vector<TensorEntry> entries, const std::string& reason) EXCLUDES(queue_mutex_);
  // The handle of `work` was waited for: the names it held are free again.
  void Release(const Work& work) EXCLUDES(queue_mutex_);

  Timeline& timeline() { return timeline_; }
  // This rank's counters (the bindings count training steps here).
  Metrics& metrics() { return metrics_; }
  TunedSettings tuned_settings() const EXCLUDES(tuned_mutex_);
  CycleStats cycle_stats() const {
    return {cycles_by_background_.load(), cycles_by_callers_.load(), left_unfinished_.load()};
  }

 private:
  RuntimeImpl() = default;
  // Set-up and tear-down (runtime_setup.cc). Start does everything Create
  // does after reading the configuration, up to starting the background thread.
  Status Start(const InitOptions& options, const ConfigNotes& notes);
  Status InitMpi(const InitOptions& options);
  Status InitProcessSets(const InitOptions& options) REQUIRES(round_mutex_);
  // Collective over the global comm.
  Result<int> CreateProcessSet(const std::vector<int>& ranks) REQUIRES(round_mutex_);
  Status RemoveProcessSet(int id) REQUIRES(round_mutex_);

  // The cycles (runtime_impl.cc), run by the background thread or by a
  // caller in RunCyclesFor.
  enum class CycleEnd {
    kRan,         // a whole cycle ran
    kUnfinished,  // a set's round waits on other ranks beyond `patience`: resume it next cycle
    kStop,        // kolo stops (shutdown, or a failure that fails everything)
  };
  void BackgroundLoop() EXCLUDES(round_mutex_, queue_mutex_);
  // Waits until a cycle is due (CycleDueAt) or shutdown.
  void WaitForWork() EXCLUDES(queue_mutex_);
  bool CycleDue() EXCLUDES(queue_mutex_);
  // Runs one cycle; an exception fails everything and ends the cycles.
  CycleEnd RunGuardedCycle(Clock::duration patience) REQUIRES(round_mutex_) EXCLUDES(queue_mutex_);
  CycleEnd RunCycle(Clock::duration patience) REQUIRES(round_mutex_) EXCLUDES(queue_mutex_);
  // After a cycle: when the next one is due (soon while tensors wait, else
  // after the idle tick), and whether to wake the background thread for it.
  void ScheduleNextCycle(CycleEnd end, bool wake) REQUIRES(round_mutex_) EXCLUDES(queue_mutex_);
  // Runs what one negotiation round decided on `set`; `now`: when the round ended.
  void Dispatch(ProcessSet& set, std::vector<Response> responses, Clock::time_point now)
      REQUIRES(round_mutex_);
  // Barrier, join, errors, process-set changes, and the coordinator's
  // question about a missing tensor.
  void RunControl(ProcessSet& set, const Response& r, Clock::time_point now) REQUIRES(round_mutex_);
  // The request this rank has pending under `name` on a set other than
  // `except`, or one it had there that failed as a process-set mismatch
  // (the other set may ask only after that set decided); null if neither.
  const Request* HeldElsewhere(const std::string& name, int except) const REQUIRES(round_mutex_);
  void FailEverything(const Status& status) REQUIRES(round_mutex_) EXCLUDES(queue_mutex_);
  // With fault tolerance on (ops/ulfm.h), after a failed negotiation: revokes
  // the global and every set's communicator and aborts the sets' host movers,
  // so that no other rank waits on this one in a collective it has left.
  void RevokeAll() REQUIRES(round_mutex_);
  // Shutdown's local part: the background thread joined, the sets, executor,
  // GPU state and MPI ops released (the global communicator stays); after
  // `lost_ranks`, everything revoked and aborted first (RevokeAll).
  void StopLocally(bool lost_ranks) REQUIRES(shutdown_mutex_);
  // The one place an entry completes (data, control, error, cancelled):
  // its timeline spans end, its name is free again, its Work gets `status`
  // (and `result`) and wakes the caller once every part has one.
  void Complete(TensorEntry&& entry, const Status& status, WorkResult* result = nullptr)
      EXCLUDES(queue_mutex_);
  // Completes what the executor finished since the last call.
  void CompleteExecuted() REQUIRES(round_mutex_) EXCLUDES(queue_mutex_);
  // A completed barrier or join on `set`: every rank reached it at the same
  // point of its program, so its unnamed collectives are numbered afresh from
  // here, in a new epoch.
  void RestartUnnamed(int set) EXCLUDES(queue_mutex_);
  // A RESYNC (the ranks' unnamed collectives are out of step): when this rank
  // is among its ranks, fails its unnamed collectives of the response's epoch
  // numbered unnamed_from or later, and numbers its next one unnamed_from.
  void Resync(ProcessSet& set, const Response& r) REQUIRES(round_mutex_) EXCLUDES(queue_mutex_);

  // Autotune (runtime_autotune.cc). At Create, collective over the global
  // communicator and before the sets exist: reads KOLO_AUTOTUNE_FILE (rank 0
  // reads, every rank parses the same text) and starts the tuner on rank 0.
  Status InitAutotune(const ConfigNotes& notes) REQUIRES(round_mutex_);
  // After each negotiation round of the global set, before its Dispatch, on
  // every rank: applies the settings rank 0 published in that round (so all
  // ranks change them between the same two cycles) and, on rank 0, feeds the
  // tuner.
  void AutotuneRound(ProcessSet& global, const NegotiationOutcome& outcome, Clock::time_point now)
      REQUIRES(round_mutex_);
  void ApplyTuned(const TunedParams& params, bool final) REQUIRES(round_mutex_)
      EXCLUDES(tuned_mutex_, queue_mutex_);

  // Fusion threshold and cycle time change when autotune applies settings, in
  // a cycle: read in cycles only, after Create.
  Config config_;
  bool caller_runs_ = false;  // KOLO_CALLER_RUNS, set at Create (read by callers after)
  // The global set's negotiation exchange, set at Create: ShrinkAfterFailure
  // aborts it from a user thread (BitRound::Abort may be called from any).
  BitRound* global_round_ = nullptr;
  bool owns_mpi_ = false;
  Placement placement_;
  MpiComm global_comm_;  // duplicated; never used after the sets are built but to split
  std::unique_ptr<MpiOps> mpi_ops_;
  std::unique_ptr<Gpu> gpu_;  // before the sets and the executor, which use it

  // How long a caller in RunCyclesFor waits for the other ranks' bit vectors
  // before it leaves the round to the background thread: ranks in step arrive
  // within microseconds; a caller must not stop signal handlers for longer.
  static constexpr Clock::duration kCallerPatience = std::chrono::milliseconds(1);
  // How long such a caller watches device work (RunCyclesFor, NextCallerStep)
  // before it leaves the rest to the background thread: longer than a small
  // collective takes, short enough that a lost rank is noticed by the rounds.
  static constexpr Clock::duration kCallerDevicePatience = std::chrono::milliseconds(20);
  // Held by the thread that runs a cycle (the background thread, or a caller
  // in RunCyclesFor), and by Create and Shutdown around what they build and
  // tear down. What it guards is what a cycle works on.
  Mutex round_mutex_;
  std::map<int, std::unique_ptr<ProcessSet>> sets_ GUARDED_BY(round_mutex_);
  // This rank's requests that failed as a process-set mismatch, by name, the
  // latest kMismatchesKept: the answer to another set's MISSING for them.
  static constexpr size_t kMismatchesKept = 64;
  std::deque<Request> mismatched_ GUARDED_BY(round_mutex_);
  int next_set_id_ GUARDED_BY(round_mutex_) = 1;
  std::unique_ptr<Executor> executor_ GUARDED_BY(round_mutex_);
  // CompleteExecuted()'s, kept for its capacity.
  std::vector<Finished> finished_ GUARDED_BY(round_mutex_);
  Timeline timeline_;
  Metrics metrics_;  // atomics: written by any thread, read by the reporter
  std::unique_ptr<MetricsReporter> reporter_;  // started and stopped with the runtime
  // The allreduce piece size the sets use now; config_.piece_bytes stays the
  // size their shared-memory slots were made for.
  int64_t piece_bytes_now_ GUARDED_BY(round_mutex_) = 0;
  std::unique_ptr<TuningRun> tuning_ GUARDED_BY(round_mutex_);  // rank 0, while autotune runs
  // A cycle that stopped at a set whose round was unfinished resumes there
  // (kNoSet: the next cycle starts afresh), over the sets it began with: a set
  // created during it (by a response of the global set's round) has its first
  // round in the next cycle on every rank, never in a resumed one. A rank that
  // resumed would otherwise take the new set's first round before the global
  // set's next one, and the new set's other members the other way round: each
  // side waiting in a round the other does not reach.
  static constexpr int kNoSet = -1;
  int resume_set_ GUARDED_BY(round_mutex_) = kNoSet;
  std::vector<int> cycle_sets_ GUARDED_BY(round_mutex_);
  std::atomic<int64_t> cycles_by_background_{0}, cycles_by_callers_{0}, left_unfinished_{0};
  // A cycle returned kStop: no thread runs another one.
  bool cycles_ended_ GUARDED_BY(round_mutex_) = false;

  mutable Mutex tuned_mutex_;
  TunedSettings tuned_ GUARDED_BY(tuned_mutex_);

  mutable Mutex sets_mutex_;
  std::map<int, std::shared_ptr<const ProcessSetInfo>> set_infos_ GUARDED_BY(sets_mutex_);

  Mutex queue_mutex_;
  CondVar queue_cv_;
  std::vector<TensorEntry> queue_ GUARDED_BY(queue_mutex_);
  // Per set, what holds each name: an operation in flight, and the named
  // collectives whose handle has not been waited for (a bit per OpType). A name
  // may be used again by the same collective only once the first one's handle
  // was waited for: otherwise whether it counts as pending would depend on how
  // fast the first one completed.
  struct NameUse {
    bool in_flight = false;
    uint32_t unwaited = 0;
  };
  std::unordered_map<int, std::unordered_map<std::string, NameUse>> names_ GUARDED_BY(queue_mutex_);
  // How one process set numbers its unnamed collectives.
  struct UnnamedState {
    int64_t epoch = 0;  // barriers and joins completed
    int64_t next = 0;   // the next number within the epoch
  };
  std::map<int, UnnamedState> unnamed_ GUARDED_BY(queue_mutex_);
  bool shutdown_requested_ GUARDED_BY(queue_mutex_) = false;
  // When the background thread runs its next cycle without being woken: soon
  // after the last cycle (by any thread) while tensors wait, else after the
  // idle tick; a cycle that must resume, or ended, sets it to now.
  Clock::time_point next_cycle_at_ GUARDED_BY(queue_mutex_);
  // When the queued operations are due, read only while queue_ holds some:
  // KOLO_CYCLE_TIME after the first one that nobody waits for yet (the others
  // that come meanwhile join it, as in Horovod's cycle), at once for a caller
  // that waits, a refusal or a wake-up.
  Clock::time_point queue_due_ GUARDED_BY(queue_mutex_);
  // KOLO_CYCLE_TIME as callers read it (autotune changes config_'s copy on
  // the cycle's thread).
  Clock::duration start_delay_ GUARDED_BY(queue_mutex_){};
  // When the next cycle is due: the earlier of next_cycle_at_ and queue_due_.
  Clock::time_point CycleDueAt() const REQUIRES(queue_mutex_);
  std::string stop_reason_ GUARDED_BY(queue_mutex_);

  std::atomic<bool> running_{false};
  std::thread thread_;
  // Shutdown() may be called from several user threads at once (and from the
  // destructor): the first one shuts down, the others wait for it.
  Mutex shutdown_mutex_;
  bool shut_down_ GUARDED_BY(shutdown_mutex_) = false;
};

}  // namespace kolo
