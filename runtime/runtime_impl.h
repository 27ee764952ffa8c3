// The runtime's internals: configuration, communicators, the tensor queue,
// the handles, and the background thread that negotiates and executes.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "config.h"
#include "executor.h"
#include "kolo/runtime.h"
#include "mutex.h"
#include "process_set.h"
#include "timeline.h"

namespace kolo {

class RuntimeImpl {
 public:
  static Result<std::unique_ptr<RuntimeImpl>> Create(const InitOptions& options);
  ~RuntimeImpl();

  Status Shutdown();
  bool running() const { return running_.load(); }

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }
  int cross_rank() const { return cross_rank_; }
  int cross_size() const { return cross_size_; }
  bool threads_multiple() const { return thread_level_ == MPI_THREAD_MULTIPLE; }
  bool homogeneous() const { return homogeneous_; }

  Result<std::shared_ptr<const ProcessSetInfo>> SetInfo(int id) const EXCLUDES(sets_mutex_);

  // Validates, names and queues one or more entries sharing one Work.
  Result<Handle> Enqueue(std::vector<TensorEntry> entries) EXCLUDES(queue_mutex_);

  // The automatic name of an unnamed collective on a set.
  struct AutoName {
    std::string name;
    int64_t epoch = 0;
  };
  // The next automatic name on a set: "<prefix>.noname.<n>" (from the second
  // epoch on "<prefix>.noname.e<k>.<n>"), counted per prefix. Enqueue refuses
  // unnamed entries while the set is out of step (see CancelUnnamed).
  AutoName NextAutoName(const std::string& prefix, int set) EXCLUDES(queue_mutex_);
  // A barrier or join on `set`: every rank reaches it at the same point of its
  // program, so unnamed collectives are counted afresh from here (a new epoch),
  // and a set that was out of step is in step again.
  void RestartUnnamed(int set) EXCLUDES(queue_mutex_);

  bool Poll(Handle h) const EXCLUDES(handles_mutex_);
  Status Wait(Handle h, WorkResult* result) EXCLUDES(handles_mutex_);
  std::optional<Status> WaitFor(Handle h, double timeout_seconds, WorkResult* result)
      EXCLUDES(handles_mutex_);

  Timeline& timeline() { return timeline_; }

 private:
  RuntimeImpl() = default;
  Status InitMpi(const InitOptions& options);
  Status InitProcessSets(const InitOptions& options);
  Result<int> CreateProcessSet(const std::vector<int>& ranks);  // collective over the global comm
  Status RemoveProcessSet(int id);

  Result<std::shared_ptr<Work>> FindWork(Handle h) const EXCLUDES(handles_mutex_);
  void BackgroundLoop();
  bool RunCycle();  // false once the loop must end
  void WaitForWork(bool anything_pending) EXCLUDES(queue_mutex_);
  void FailEverything(const Status& status) EXCLUDES(queue_mutex_);
  void ForgetName(const TensorEntry& entry) EXCLUDES(queue_mutex_);
  // Applies `responses`' verdict that the unnamed collectives of `set` are out
  // of step (a kError with cancel_unnamed_epoch): fails this rank's pending
  // unnamed collectives of that epoch and earlier, and refuses new ones until
  // the next barrier or join (unless this rank already passed one).
  void CancelUnnamed(ProcessSet& set, const std::vector<Response>& responses)
      EXCLUDES(queue_mutex_);

  Config config_;
  bool owns_mpi_ = false;
  int thread_level_ = 0;
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1, cross_rank_ = 0, cross_size_ = 1;
  bool homogeneous_ = true;  // every host runs as many ranks
  MpiComm global_comm_;      // duplicated; never used after the sets are built but to split
  std::unique_ptr<MpiOps> mpi_ops_;
  std::unique_ptr<Gpu> gpu_;  // before the executor, which uses it

  // Owned by the background thread once it runs (before: by Create).
  std::map<int, std::unique_ptr<ProcessSet>> sets_;
  int next_set_id_ = 1;
  std::unique_ptr<Executor> executor_;
  Timeline timeline_;

  mutable Mutex sets_mutex_;
  std::map<int, std::shared_ptr<const ProcessSetInfo>> set_infos_ GUARDED_BY(sets_mutex_);

  Mutex queue_mutex_;
  CondVar queue_cv_{&queue_mutex_};
  std::vector<TensorEntry> queue_ GUARDED_BY(queue_mutex_);
  std::unordered_map<int, std::unordered_set<std::string>> pending_names_ GUARDED_BY(queue_mutex_);
  // How one process set names its unnamed collectives.
  struct UnnamedState {
    int64_t epoch = 0;                        // barriers and joins passed
    std::map<std::string, int64_t> counters;  // per prefix, within the epoch
    std::string out_of_step;                  // why new ones are refused; empty: in step
  };
  std::map<int, UnnamedState> unnamed_ GUARDED_BY(queue_mutex_);
  bool shutdown_requested_ GUARDED_BY(queue_mutex_) = false;
  std::string stop_reason_ GUARDED_BY(queue_mutex_);

  mutable Mutex handles_mutex_;
  std::unordered_map<Handle, std::shared_ptr<Work>> handles_ GUARDED_BY(handles_mutex_);
  Handle next_handle_ GUARDED_BY(handles_mutex_) = 1;

  std::atomic<bool> running_{false};
  std::thread thread_;
  bool shut_down_ = false;  // Shutdown() ran (user thread only)
};

}  // namespace kolo
