// Moves the bytes of one decided response and completes its entries: fusion
// copies, scaling, the collective on the host or device mover. Knows nothing
// of process sets or negotiation; called only on the background thread.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "message.h"
#include "ops/data_mover.h"
#include "timeline.h"
#include "work.h"

namespace kolo {

// A data response (allreduce, allgather, broadcast, alltoall, reducescatter)
// with this rank's entries, one per name in response order. An allreduce
// member a joined rank does not hold has no entry: the rank reduces zeros.
struct Job {
  Response response;
  std::vector<std::optional<TensorEntry>> entries;
};

class Executor {
 public:
  // `on_done` runs before an entry's work completes (the runtime forgets the
  // name, so the caller may reuse it as soon as Wait() returns).
  Executor(Timeline* timeline, std::function<void(const TensorEntry&)> on_done)
      : timeline_(timeline), on_done_(std::move(on_done)) {}

  // Runs `job` on `movers` and completes its entries: host tensors before it
  // returns, device tensors in a later PollGpu(). An exception (out of memory)
  // fails the job's entries with its message and is rethrown.
  void Execute(Job job, const Movers& movers);

  // Completes one entry with `status` (and `result`).
  void Finish(TensorEntry entry, const Status& status, WorkResult* result = nullptr);

  // GPU work runs on kolo's streams while the loop goes on; these complete
  // the entries whose work finished (or failed). Drain waits for all of it.
  bool gpu_busy() const { return !in_flight_.empty(); }
  void PollGpu();
  void DrainGpu();

 private:
  // A GPU collective enqueued but not finished: its entries complete when
  // the token says so.
  struct InFlight {
    Gpu* gpu = nullptr;
    Gpu::Token token;
    std::vector<TensorEntry> entries;
    WorkResult result;
    GpuOutput output;
    const char* phase = "";
    Clock::time_point start;
  };

  // Each completes the entries it is given (moving them out of the job).
  void Run(Job& job, const Movers& movers);
  void Allreduce(Job& job, const Movers& movers);
  void Allgather(TensorEntry& e, const Response& r, HostMover& mover);
  void Broadcast(TensorEntry& e, const Response& r, HostMover& mover);
  void Alltoall(TensorEntry& e, const Response& r, HostMover& mover);
  void Reducescatter(TensorEntry& e, const Response& r, const Movers& movers);
  void ExecuteOnDevice(Job& job, const Movers& movers);
  Result<Gpu::Token> StartOnDevice(const Response& r, const TensorEntry* first,
                                   const std::vector<GpuTensor>& tensors, const Movers& movers,
                                   InFlight& f);
  void Phase(const TensorEntry& e, const char* phase, Clock::time_point begin);
  // A buffer that persists across cycles (no page faults per step).
  uint8_t* FusionBuffer(size_t bytes);

  Timeline* timeline_;
  std::function<void(const TensorEntry&)> on_done_;
  std::vector<InFlight> in_flight_;
  std::vector<uint8_t> fusion_buffer_;
};

}  // namespace kolo
