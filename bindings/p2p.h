// Point-to-point messages (send, recv, recv from any source) for kolo's
// torch.distributed backend, registered on kolo._core as P2PComm and
// P2PRequest (ops/p2p.h).
#pragma once

#include <pybind11/pybind11.h>

namespace kolo {

// Adds P2PComm and P2PRequest to kolo._core.
void RegisterPointToPoint(pybind11::module_& m);

}  // namespace kolo
