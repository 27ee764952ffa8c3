// The value types of kolo's public C++ API: options, results, placement.
// kolo/runtime.h (the Runtime class) includes this; the runtime's inner code
// includes only this, so that no arrow inside runtime/ points back up at the
// public class. No MPI type appears here: the API is the same over every MPI
// ABI's build of libkolo.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

// An opaque ticket for one enqueued operation.
using Handle = int64_t;

// The global process set (all ranks) always has id 0.
constexpr int kGlobalProcessSet = 0;

struct InitOptions {
  // The communicator to run on, as a handle (kolo/mpi_handle.h: HandleOfComm;
  // mpi4py's MPI._handleof), or 0 for MPI_COMM_WORLD. kolo duplicates it. When
  // MPI is not initialized yet, kolo initializes it and finalizes it at
  // Shutdown(); when Create() fails after that, MPI stays initialized until the
  // process exits (a failed start neither waits there for the ranks that did
  // start nor keeps a later Create() from starting). A handle, not an MPI_Comm,
  // so that this API is the same for every MPI ABI (docs/mpi.md).
  uintptr_t comm = 0;
  // Horovod's init(comm=[ranks]): the ranks of MPI_COMM_WORLD to run on
  // instead of `comm`, in this order (kolo's rank i is world rank
  // world_ranks[i]). Collective over the listed ranks only: every one of them
  // passes the same list, and a process that is not in it fails to start.
  // Empty: run on `comm`.
  std::vector<int> world_ranks;
  // Process sets registered at init, each a list of ranks of `comm`; they get
  // ids 1, 2, ... in this order.
  std::vector<std::vector<int>> process_sets;
  // Settings that override the environment (name -> value), e.g.
  // {"KOLO_CYCLE_TIME", "2"}; parsed and validated like the environment.
  std::vector<std::pair<std::string, std::string>> settings;
};

struct CollectiveOptions {
  // Must be the same on every rank; empty means "<op>.noname.<n>", numbered
  // per process set and op in call order (after the set's first barrier or
  // join, "<op>.noname.e<k>.<n>": every barrier and join counts afresh).
  std::string name;
  // Unnamed collectives: where the caller made the call (e.g. "train.py:57 in
  // step"). Ranks that pair an unnamed collective from different places and
  // disagree about it are out of step, not merely mismatched; the error says so
  // and names the places. Optional.
  std::string call_site;
  int process_set = kGlobalProcessSet;
  // Device tensors: the CUDA stream (cudaStream_t) whose work produces them,
  // e.g. the framework's current stream; null is the legacy default stream.
  // kolo's stream waits for it without blocking the caller.
  void* cuda_stream = nullptr;
  // The caller waits for the operation right after enqueuing it (a blocking
  // call such as kolo.torch.allreduce): kolo does not wake its background
  // thread for it, and the waiting caller runs the negotiation round and the
  // collective on its own thread when the background thread is idle
  // (KOLO_CALLER_RUNS; docs/architecture.md, "Threads and who owns what").
  // Only a hint: an operation so marked and not waited for at once still runs,
  // at the background thread's next cycle (within KOLO_IDLE_TICK_MS).
  bool caller_waits = false;
};

struct AllreduceOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kAverage;
  double prescale_factor = 1.0;   // applied to the input before reducing
  double postscale_factor = 1.0;  // applied to the result (after the 1/n of kAverage)
};

struct ReducescatterOptions : CollectiveOptions {
  ReduceOp op = ReduceOp::kAverage;  // kSum or kAverage
  double prescale_factor = 1.0;
  double postscale_factor = 1.0;
};

// What an operation produced beyond its in-place outputs.
struct WorkResult {
  // allgather, alltoall, reducescatter: the output tensor (host memory).
  std::vector<uint8_t> data;
  std::vector<int64_t> shape;
  DataType dtype = DataType::kFloat32;
  // alltoall: rows received from each rank.
  std::vector<int64_t> received_splits;
  // join: the last rank that joined; add_process_set: the new set's id.
  int value = -1;
  // Device tensors (device != kCpuDevice): the output lives in device memory
  // owned by `device_data` (`data` stays empty); copy it out with
  // CopyDeviceResult() or keep the reference.
  int device = kCpuDevice;
  std::shared_ptr<void> device_data;
  // Grouped allgather / reducescatter: every tensor's result, in input order
  // (the fields above stay empty).
  std::vector<WorkResult> parts;
};

// Where this process sits in the job (fixed at Create).
struct Placement {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // among the ranks on this host
  int cross_rank = 0, cross_size = 1;  // among the ranks with this local rank
  bool threads_multiple = false;       // MPI_THREAD_MULTIPLE is available
  bool homogeneous = true;             // every host runs as many ranks
};

// The settings that autotune (KOLO_AUTOTUNE) controls, as this rank uses them.
struct TunedSettings {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  int64_t piece_bytes = 0;
  bool tuning = false;     // the search is still running
  bool from_file = false;  // read from KOLO_AUTOTUNE_FILE at init
  int64_t changes = 0;     // how many times rank 0's new settings took effect here
};

// Which threads ran this rank's cycles (negotiation round and collectives)
// since init: what tests and benchmarks check of KOLO_CALLER_RUNS.
struct CycleStats {
  int64_t by_background = 0;  // cycles the background thread started
  int64_t by_callers = 0;     // cycles a waiting caller started on its own thread
  // Of those, rounds a caller left to the background thread because other
  // ranks had not joined them within its patience.
  int64_t left_unfinished = 0;
};

}  // namespace kolo
