// The collectives of kolo._core, each taking a reader and the framework's
// tensors (collective_entries.cc).
#pragma once

#include <pybind11/pybind11.h>

namespace kolo {

// Adds the collectives, join, barrier, process-set registration and
// refusals to kolo._core.
void RegisterCollectives(pybind11::module_& m);

}  // namespace kolo
