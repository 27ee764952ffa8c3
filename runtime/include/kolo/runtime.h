// The public C++ API of libkolo.
//
//   auto rt = kolo::Runtime::Create({});          // MPI_Init_thread + background thread
//   kolo::TensorView t{data, kolo::DataType::kFloat32, {1024}};
//   kolo::AllreduceOptions opts;  opts.name = "grad.fc1";
//   auto h = rt.value()->EnqueueAllreduce(t, t, opts);   // returns at once
//   kolo::Status s = rt.value()->Wait(h.value());         // error names ranks and values
//
// Enqueue* calls validate their input on the calling thread and hand the work
// to the background thread, which is the only thread that calls MPI. A call
// refused for a bad input fails at once here and is announced to the other
// ranks, whose matching collective fails too (nobody waits for it).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kolo/runtime_types.h"
#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

class RuntimeImpl;
class ReplacementSpawn;
class HandleTable;

// Whether this build has the GPU path (CUDA and NCCL).
bool BuiltWithCuda();
// NCCL's version code (e.g. 21805 for 2.18.5) in a GPU build, else 0.
int NcclVersion();
// Why a lost rank cannot be recovered from in place in this process ("" when
// it can): its MPI has no ULFM, or the job runs without fault tolerance.
std::string InPlaceRecoveryUnavailable();
// The MPI ABI this libkolo was built for: "ompi" (Open MPI, libmpi.so.40),
// "mpich" (the MPICH ABI, libmpi.so.12) or "mpiabi" (the MPI-5 standard ABI,
// libmpi_abi.so.1); docs/mpi.md.
const char* MpiAbi();
// CUDA devices this process can use: 0 without a GPU build, driver or GPU.
int GpuCount();
// Copies a device result (allgather, alltoall, reducescatter) into `dst`, a
// device buffer of at least the result's size on the result's device.
Status CopyDeviceResult(const WorkResult& result, void* dst);

class Runtime {
 public:
  // Initializes MPI if needed, reads the configuration (environment, then
  // `options.settings`), creates the communicators and starts the background
  // thread. Collective over `options.comm`. In a process that kolo started to
  // grow a job in place, kAborted when that job ended before this process
  // joined it (ReleaseReplacements): it is not needed.
  static Result<std::unique_ptr<Runtime>> Create(const InitOptions& options);

  // Shuts down coordinated with the other ranks: every pending handle on every
  // rank completes with kAborted, the background thread is joined, and MPI is
  // finalized when kolo initialized it. Idempotent.
  Status Shutdown();
  ~Runtime();  // calls Shutdown() and logs a failure; never throws

  // After a rank or host was lost, with fault tolerance on (Open MPI 5's ULFM,
  // kolorun's in-place elastic mode): revokes this runtime's communicators,
  // stops it without talking to the other ranks (and without MPI_Finalize,
  // which would wait for the dead), and returns a new runtime (default
  // options) on the survivors, ranked in their old order. Collective over the
  // survivors. Fails, naming why, where the job cannot recover in place
  // (ops/ulfm.h: this runtime is then left as it was), or when the shrink
  // itself failed (this runtime is then stopped).
  Result<std::unique_ptr<Runtime>> ResumeOnSurvivors();

  // Growing in place (Open MPI 5, runtime/replacements.h): this rank (rank 0)
  // starts `command args` as new processes, one on each entry of `hosts`,
  // each with `environment` ("NAME=value"), and returns at once; the spawn
  // goes on in a thread of its own while the job trains. The hosts of `added`
  // are added to mpirun's allocation. Fails where the job cannot grow in
  // place (ops/ulfm.h) or when a spawn is under way already.
  Status StartReplacements(const std::string& command, const std::vector<std::string>& args,
                           const std::vector<std::string>& hosts,
                           const std::vector<std::string>& environment,
                           const std::vector<std::string>& added);
  // Where the started processes are: kNone (none started), kStarting (their
  // MPI_Init has not returned), kReady, or kFailed (`why` says why; the spawn
  // is then forgotten).
  enum class Replacements { kNone, kStarting, kReady, kFailed };
  Replacements replacements(std::string* why);
  // Gives up processes still starting (one that died before MPI_Init leaves
  // MPI_Comm_spawn waiting): the spawn's thread is left to itself.
  void AbandonReplacements();
  // Collective over every rank and the new processes (rank 0 has said
  // kReady): stops this runtime in order and returns one on all of them, this
  // job's ranks first in their order, the new processes after them. When the
  // new processes do not come (one died after MPI_Init, or stopped), the one
  // returned runs on this job's ranks alone, and its replacements() on rank 0
  // says kFailed once, with why.
  Result<std::unique_ptr<Runtime>> GrowInPlace();
  // Rank 0, when the job ends before the new processes joined: waits up to
  // `patience` for them to initialize MPI (MPI_Comm_spawn returns only then),
  // and tells them that there is nothing to join, so that they end with exit
  // code 0 (their Create returns kAborted). Fails, naming why, when they did
  // not initialize MPI within `patience` (the spawn is then given up: a new
  // process whose parent has gone fails in MPI_Init), failed to start, or did
  // not answer. Nothing to do (OK) when none are starting.
  Status ReleaseReplacements(std::chrono::milliseconds patience);

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  bool is_running() const;
  // Why kolo stopped without Shutdown() here (another rank shut it down, a
  // failed negotiation), or empty.
  std::string stop_reason();
  const Placement& placement() const { return placement_; }
  int rank() const { return placement_.rank; }
  int size() const { return placement_.size; }
  int local_rank() const { return placement_.local_rank; }
  int local_size() const { return placement_.local_size; }
  int cross_rank() const { return placement_.cross_rank; }
  int cross_size() const { return placement_.cross_size; }
  bool mpi_threads_supported() const { return placement_.threads_multiple; }
  bool is_homogeneous() const { return placement_.homogeneous; }

  // Ranks of a process set (in set order), or an error if it does not exist.
  Result<std::vector<int>> ProcessSetRanks(int process_set) const;
  // The rank of this process within a process set, -1 if not a member.
  Result<int> ProcessSetRank(int process_set) const;

  // `output` may alias `input` (in place). Same shape and dtype.
  Result<Handle> EnqueueAllreduce(const TensorView& input, const TensorView& output,
                                  const AllreduceOptions& options);
  // A group is negotiated as one unit: all members become ready together and
  // are fused together. Members are named "<name>.<i>" (name may be empty).
  Result<Handle> EnqueueGroupedAllreduce(const std::vector<TensorView>& inputs,
                                         const std::vector<TensorView>& outputs,
                                         const AllreduceOptions& options);
  // Concatenates every rank's input along dim 0; the first dimension may differ.
  Result<Handle> EnqueueAllgather(const TensorView& input, const CollectiveOptions& options);
  // Allgathers of several tensors, negotiated as one unit like a grouped
  // allreduce; the result's `parts` holds each output in input order.
  Result<Handle> EnqueueGroupedAllgather(const std::vector<TensorView>& inputs,
                                         const CollectiveOptions& options);
  // In place: `tensor` on `root_rank` (a rank of the process set) is copied to all.
  Result<Handle> EnqueueBroadcast(const TensorView& tensor, int root_rank,
                                  const CollectiveOptions& options);
  // `splits[i]` rows of `input` go to rank i of the set; empty = even split.
  Result<Handle> EnqueueAlltoall(const TensorView& input, const std::vector<int64_t>& splits,
                                 const CollectiveOptions& options);
  // Reduces, then rank i keeps the i-th block of rows; when dim 0 does not
  // divide, the first (dim0 % n) ranks get one row more.
  Result<Handle> EnqueueReducescatter(const TensorView& input, const ReducescatterOptions& options);
  // Reducescatters of several tensors as one unit; results in `parts`.
  Result<Handle> EnqueueGroupedReducescatter(const std::vector<TensorView>& inputs,
                                             const ReducescatterOptions& options);
  Result<Handle> EnqueueBarrier(const CollectiveOptions& options);
  // For uneven data: after joining, this rank takes part in other ranks'
  // allreduces with zeros until every rank has joined. The result's `value` is
  // the last rank to join.
  Result<Handle> EnqueueJoin(const CollectiveOptions& options);

  // Collective over all ranks: every rank must call it with the same ranks.
  // The result's `value` is the new id.
  Result<Handle> EnqueueAddProcessSet(const std::vector<int>& ranks);
  Result<Handle> EnqueueRemoveProcessSet(int process_set);

  // The caller refused a collective before reaching Enqueue* (its own check of
  // the input failed, e.g. kolo.torch's dtype check): tells the other ranks of
  // the set, whose matching collective then fails naming this rank and
  // `reason` instead of waiting for it. An unnamed one takes its number, as a
  // valid call would. `op`: "allreduce", "allgather", "broadcast", "alltoall"
  // or "reducescatter"; `count`: the tensors of a grouped call, else 1.
  // Enqueue* announce their own refusals. Does nothing when this rank is not
  // a member of the set (no member waits for it) or kolo is not running.
  void AnnounceRefusal(const std::string& op, int count, const CollectiveOptions& options,
                       const std::string& reason);

  // True once the operation finished (successfully or not).
  bool Poll(Handle handle) const;
  // Blocks until the operation finishes and releases the handle. `result`
  // receives outputs of allgather, alltoall, reducescatter, join (grouped
  // ones: in `parts`). A named collective's name stays taken (for the same
  // collective) until its handle is waited for or released.
  Status Wait(Handle handle, WorkResult* result = nullptr);
  // The caller will not wait for `handle` (say, an error abandoned it): it is
  // forgotten, and its name is free again once the operation completes.
  void Release(Handle handle);
  // Like Wait, but returns nullopt after `timeout_seconds` if the operation is
  // still running (the handle stays valid), so a caller can handle signals.
  // Wait and WaitFor with a timeout above 0 may run kolo's cycle on the
  // calling thread (KOLO_CALLER_RUNS); WaitFor(h, 0) only looks.
  std::optional<Status> WaitFor(Handle handle, double timeout_seconds,
                                WorkResult* result = nullptr);
  // Instead of waiting: calls `done` with what Wait would return, once, and
  // releases the handle. `done` runs on kolo's background thread (or at once,
  // on this one, when the operation already finished, or with the error when
  // `handle` is unknown); it must not wait for another collective. For
  // callers that cannot block a thread per operation (TensorFlow's async
  // kernels). Like a caller that waits, it starts the operation's round at
  // once instead of after a cycle time for other operations to fuse with.
  void WhenDone(Handle handle, std::function<void(Status, WorkResult)> done);

  // What autotune has set so far (the configured settings when it is off).
  TunedSettings CurrentTunedSettings() const;
  CycleStats cycle_stats() const;

  // One training step done (a binding's optimizer step, a Keras batch): counted
  // for the monitor (docs/monitoring.md).
  void CountStep();
  // This rank's counters so far: "steps", "negotiate_us", "move_us", "wait_us",
  // and "<op>.<set slot>.count" / ".bytes" for every operation counted.
  std::vector<std::pair<std::string, int64_t>> Counters() const;

  // Starts / stops writing a Chrome-trace timeline (rank 0 only; no-op elsewhere).
  Status StartTimeline(const std::string& path, bool mark_cycles);
  Status StopTimeline();

 private:
  explicit Runtime(std::unique_ptr<RuntimeImpl> impl);
  std::unique_ptr<RuntimeImpl> impl_;     // the queue and the background thread
  std::unique_ptr<HandleTable> handles_;  // what callers wait on
  Placement placement_;
  // Rank 0's spawn of new processes, from StartReplacements to GrowInPlace;
  // only the caller's thread (the binding's lifecycle lock) touches it.
  std::unique_ptr<ReplacementSpawn> spawn_;
  // Why the new processes of the growth that made this runtime did not join
  // (rank 0; "" when they did), until replacements() has said it.
  std::string not_joined_;
};

}  // namespace kolo
