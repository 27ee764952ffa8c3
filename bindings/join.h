// kolo._core's join_* functions: joining processes that kolo did not launch
// (torchrun, torch.multiprocessing.spawn) into one MPI communicator, for
// kolo's torch.distributed backend (ops/join.h).
#pragma once

#include <pybind11/pybind11.h>

namespace kolo {

// Adds join_* to kolo._core.
void RegisterJoin(pybind11::module_& m);

}  // namespace kolo
