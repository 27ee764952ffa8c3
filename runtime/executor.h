// Runs decided responses on this rank: fusion copies, the collective, scaling,
// completion of the handles. Called only on the background thread.
#pragma once

#include <functional>
#include <vector>

#include "../ops/gpu.h"
#include "process_set.h"
#include "timeline.h"

namespace kolo {

class Executor {
 public:
  // `on_done` runs before an entry's work completes (the runtime forgets the
  // name, so the caller may reuse it as soon as Wait() returns).
  // `gpu` runs responses on device tensors; it outlives the executor.
  Executor(const Config& config, Timeline* timeline, Gpu* gpu,
           std::function<void(const TensorEntry&)> on_done)
      : config_(config), timeline_(timeline), gpu_(gpu), on_done_(std::move(on_done)) {}

  // Executes `responses` (already fused) in order. Process-set changes are
  // returned through `add_set` / `remove_set`, which the runtime applies.
  // `held_elsewhere(name)` finds a request of this rank pending under `name`
  // on another process set (null if none), to answer a MISSING response.
  void Execute(ProcessSet& set, const std::vector<Response>& responses,
               const std::function<Result<int>(const std::vector<int>&)>& add_set,
               const std::function<Status(int)>& remove_set,
               const std::function<const Request*(const std::string&)>& held_elsewhere);

  // Completes one entry with `status` (and `result`).
  void Finish(TensorEntry entry, const Status& status, WorkResult* result = nullptr);

  // GPU work runs on kolo's streams while the loop goes on; these complete
  // the entries whose work finished (or failed). Drain waits for all of it.
  bool gpu_busy() const { return !in_flight_.empty(); }
  void PollGpu();
  void DrainGpu();

 private:
  // GPU collectives enqueued but not finished: their entries complete when
  // the token says so.
  struct InFlight {
    Gpu::Token token;
    std::vector<TensorEntry> entries;
    WorkResult result;
    GpuOutput output;
    const char* phase;
    Clock::time_point start;
  };
  void ExecuteGpu(ProcessSet& set, const Response& r);

  void Allreduce(ProcessSet& set, const Response& r);
  void Allgather(ProcessSet& set, const Response& r);
  void Broadcast(ProcessSet& set, const Response& r);
  void Alltoall(ProcessSet& set, const Response& r);
  void Reducescatter(ProcessSet& set, const Response& r);
  void Phase(const TensorEntry& e, const char* phase, Clock::time_point begin);

  Config config_;
  Timeline* timeline_;
  Gpu* gpu_;
  std::function<void(const TensorEntry&)> on_done_;
  std::vector<InFlight> in_flight_;
};

}  // namespace kolo
