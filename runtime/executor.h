// Moves the bytes of one decided response: fusion copies, scaling, the
// collective on the host or device mover. Knows nothing of process sets,
// names or handles, and never calls back into the loop: every entry it is
// given comes back, finished, through TakeFinished(), and the loop completes
// it. Called only by the thread that runs the cycle (round_mutex_).
#pragma once

#include <algorithm>
#include <vector>

#include "job.h"
#include "ops/data_mover.h"
#include "timeline.h"

namespace kolo {

class Executor {
 public:
  // `timeline` (may be null) gets the execution phases of each entry.
  // `async_completion` (KOLO_ENABLE_ASYNC_COMPLETION): a device allreduce or
  // broadcast finishes its entries once it is queued, their streams ordered
  // after it (Gpu::OrderAfter); its work is still watched for errors.
  Executor(Timeline* timeline, bool async_completion)
      : timeline_(timeline), async_completion_(async_completion) {}

  // Runs `job` on `movers`: host tensors are finished when it returns, device
  // tensors in a later PollGpu() (or, with async completion, allreduce and
  // broadcast once queued). An exception (out of memory) finishes the job's
  // entries with its message and is rethrown.
  void Execute(Job job, const Movers& movers);

  // GPU work runs on kolo's streams while the loop goes on; these finish the
  // entries whose work finished (or failed). Drain waits for all of it.
  // Some operation waits for its GPU work (work that completed already, with
  // async completion, is only watched: it holds up no caller).
  bool gpu_busy() const {
    return std::any_of(in_flight_.begin(), in_flight_.end(),
                       [](const InFlight& f) { return !f.entries.empty(); });
  }
  void PollGpu();
  void DrainGpu();

  // Moves the entries finished since the last call into `*out` (cleared
  // first; both vectors keep their capacity, so the hot path allocates
  // nothing).
  void TakeFinished(std::vector<Finished>* out) {
    out->clear();
    out->swap(finished_);
  }

 private:
  // A GPU collective enqueued but not finished: its entries finish when
  // the token says so (none left with async completion: only an error is
  // logged then).
  struct InFlight {
    Gpu* gpu = nullptr;
    Gpu::Token token;
    std::vector<TensorEntry> entries;
    WorkResult result;
    GpuOutput output;
    const char* phase = "";
    Clock::time_point start;
  };

  // Records `entry` as finished with `status` (and `result`).
  void Finish(TensorEntry&& entry, const Status& status, WorkResult* result = nullptr);
  // Each finishes the entries it is given (moving them out of the job).
  void Run(Job& job, const Movers& movers);
  void Allreduce(Job& job, const Movers& movers);
  // A fused allreduce that the host mover reduces straight from and into the
  // tensors (HostMover::TakesParts), without the fusion buffer.
  void AllreduceParts(Job& job, const Movers& movers);
  // A set of one rank: each tensor's reduction is its own data, scaled as asked.
  void AllreduceAlone(Job& job, const Movers& movers);
  void Allgather(TensorEntry& e, const Response& r, HostMover& mover);
  void Broadcast(TensorEntry& e, const Response& r, HostMover& mover);
  void Alltoall(TensorEntry& e, const Response& r, HostMover& mover);
  void Reducescatter(TensorEntry& e, const Response& r, const Movers& movers);
  void ExecuteOnDevice(Job& job, const Movers& movers);
  Result<Gpu::Token> StartOnDevice(const Response& r, const TensorEntry* first,
                                   const std::vector<GpuTensor>& tensors, const Movers& movers,
                                   InFlight& f);
  // The clock for a phase's start, read only while the timeline records
  // (a clock read costs as much as a small allreduce's wait for its peer).
  Clock::time_point PhaseStart() const;
  void Phase(const TensorEntry& e, const char* phase, Clock::time_point begin);
  // A buffer that persists across cycles (no page faults per step).
  uint8_t* FusionBuffer(size_t bytes);

  Timeline* timeline_;
  bool async_completion_;
  std::vector<Finished> finished_;  // since the last TakeFinished()
  std::vector<InFlight> in_flight_;
  std::vector<uint8_t> fusion_buffer_;
};

}  // namespace kolo
