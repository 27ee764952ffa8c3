// Where the GPU path launches a collective and in what shape: pure functions
// of what the collective is given, so that the choices are tested without a
// device (test/unit/gpu_plans_test.cc) and ops/cuda/nccl_gpu.cc only carries
// them out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kolo {

// The stream a collective runs on.
struct LaunchStream {
  // The callers' own stream (null: the legacy default stream), or else
  // kolo's stream for the device.
  bool callers = false;
  void* stream = nullptr;  // where callers is true
};

// With stream-ordered completion (KOLO_ENABLE_ASYNC_COMPLETION) a collective
// whose tensors all come from one stream runs on that stream, as if the
// caller had queued it there itself: nothing to wait for before it, nothing
// for the caller's stream to wait for after it. Tensors from several streams,
// or none (a joined rank's zeros), and every collective without stream-ordered
// completion, run on kolo's stream after the callers' (their ready events).
// `streams`: the stream of each tensor this rank has.
inline LaunchStream ChooseLaunchStream(bool stream_ordered, const std::vector<void*>& streams) {
  if (!stream_ordered || streams.empty()) return {};
  for (void* s : streams) {
    if (s != streams[0]) return {};
  }
  return {true, streams[0]};
}

// Work on one device runs in the order it was launched, the fusion buffer and
// the communicators being shared: a launch on another stream than the last
// one waits for the last one first.
inline bool WaitsForPreviousLaunch(bool has_previous, void* previous_stream, void* stream) {
  return has_previous && previous_stream != stream;
}

// A grouped allreduce of `counts` elements of `elem` bytes goes as one NCCL
// group of allreduces, each from its tensor into its output, when every
// tensor is at least `min_bytes` (0: never): the fusion buffer's copy in and
// out would then cost more than the group's separate operations. Not where
// the collective reduces in steps (hierarchical allreduce, Adasum) or a
// joined rank takes part with zeros: those need one buffer.
inline bool AllreduceAsNcclGroup(const std::vector<int64_t>& counts, size_t elem, int64_t min_bytes,
                                 bool in_steps, bool joined) {
  if (counts.size() < 2 || min_bytes <= 0 || in_steps || joined) return false;
  for (int64_t c : counts) {
    if (c * static_cast<int64_t>(elem) < min_bytes) return false;
  }
  return true;
}

}  // namespace kolo
