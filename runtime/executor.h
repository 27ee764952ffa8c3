// Runs decided responses on this rank: fusion copies, the collective, scaling,
// completion of the handles. Called only on the background thread.
#pragma once

#include <functional>
#include <vector>

#include "process_set.h"
#include "timeline.h"

namespace kolo {

class Executor {
 public:
  // `on_done` runs before an entry's work completes (the runtime forgets the
  // name, so the caller may reuse it as soon as Wait() returns).
  Executor(const Config& config, Timeline* timeline,
           std::function<void(const TensorEntry&)> on_done)
      : config_(config), timeline_(timeline), on_done_(std::move(on_done)) {}

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

 private:
  void Allreduce(ProcessSet& set, const Response& r);
  void Allgather(ProcessSet& set, const Response& r);
  void Broadcast(ProcessSet& set, const Response& r);
  void Alltoall(ProcessSet& set, const Response& r);
  void Reducescatter(ProcessSet& set, const Response& r);
  void Phase(const TensorEntry& e, const char* phase, Clock::time_point begin);

  Config config_;
  Timeline* timeline_;
  std::function<void(const TensorEntry&)> on_done_;
};

}  // namespace kolo
