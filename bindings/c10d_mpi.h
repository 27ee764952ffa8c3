// kolo._core's MPI outside the runtime, for kolo's torch.distributed
// backend: joining the ranks that torchrun or torch.multiprocessing.spawn
// started, and point-to-point messages among them. See c10d_mpi.cc.
#pragma once

#include <pybind11/pybind11.h>

namespace kolo {

// Adds join_*, P2PComm and P2PRequest to kolo._core.
void RegisterC10dMpi(pybind11::module_& m);

}  // namespace kolo
