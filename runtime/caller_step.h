// What a caller that waits for its operation does next while it holds the
// cycle lock (RuntimeImpl::RunCyclesFor): a pure function of what it sees, so
// that the choice is tested without threads, MPI or a GPU
// (test/unit/gpu_plans_test.cc).
#pragma once

namespace kolo {

enum class CallerStep {
  // Its operation is done, kolo stopped, or its slice of waiting is over (the
  // binding waits in slices to run signal handlers): it lets go of the lock.
  kStop,
  // Work runs on a GPU (its operation, or one started before it): watch the
  // devices' events. A negotiation round per look would cost every rank a
  // round; the events cost this thread alone. For a while only: past its
  // patience the caller stops (kStop) and the background thread, which also
  // runs the rounds that notice a lost rank, watches the rest.
  kPollDevice,
  // Negotiate and run what is ready, its operation among it once every rank
  // asked for it.
  kRunCycle,
};

// `steps`: how many steps this caller took since it took the lock; the first
// one is taken whatever the time, so that a caller whose slice is over before
// it started still runs the cycle it came for. `device_patience_over`: it has
// watched device work for longer than it may.
constexpr CallerStep NextCallerStep(bool done, bool stopped, bool device_busy, bool past_until,
                                    bool device_patience_over, int steps) {
  if (done || stopped) return CallerStep::kStop;
  if (steps > 0 && past_until) return CallerStep::kStop;
  if (!device_busy) return CallerStep::kRunCycle;
  return device_patience_over ? CallerStep::kStop : CallerStep::kPollDevice;
}

}  // namespace kolo
