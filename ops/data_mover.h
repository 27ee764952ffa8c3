// How bytes move between the ranks of one process set.
//
// Two interfaces, one dispatch point. A HostMover moves host memory and
// returns when the collective is done; the executor fuses tensors into its
// buffer around it. The GPU path (gpu.h) moves device memory asynchronously:
// it fuses on the device, allocates its outputs there and is polled for
// completion. One interface for both would make one of them pretend. The
// executor picks between them in one place, by the response's device, from
// the Movers of the response's process set; MakeHostMover picks the host
// mover once per set, from the set's topology.
#pragma once

#include "ops/gpu.h"
#include "ops/host_mover.h"

namespace kolo {

// What the executor needs to move one process set's bytes.
struct Movers {
  HostMover* host = nullptr;         // host tensors
  Gpu* device = nullptr;             // device tensors
  GpuComms* device_comms = nullptr;  // the set's, for `device`
  int rank = 0;                      // this process within the set
  int size = 1;
};

}  // namespace kolo
