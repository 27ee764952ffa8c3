// kolo._core's P2PComm and P2PRequest (ops/p2p.h): the torch.distributed
// backend's point-to-point messages, waited for without the GIL.
#include "p2p.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "ops/p2p.h"

namespace py = pybind11;

namespace kolo {
namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting Python thread looks at its signals (Ctrl-C, alarms).
constexpr double kSignalCheckSeconds = 0.1;

// Bad arguments are ValueError, everything else RuntimeError.
[[noreturn]] void Throw(const Status& s) {
  if (s.code() == StatusCode::kInvalidArgument) throw py::value_error(s.message());
  throw std::runtime_error(s.message());
}

template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) Throw(r.status());
  return std::move(r).value();
}

// Waits without the GIL for up to `timeout` seconds (negative: no limit),
// letting Python run its signal handlers every kSignalCheckSeconds. True once
// the request finished.
bool Wait(P2PRequest& request, double timeout) {
  const auto start = Clock::now();
  for (;;) {
    double slice = kSignalCheckSeconds;
    if (timeout >= 0) {
      const double left = timeout - std::chrono::duration<double>(Clock::now() - start).count();
      slice = std::max(0.0, std::min(slice, left));
    }
    bool done = false;
    {
      py::gil_scoped_release release;
      done = request.WaitFor(slice);
    }
    if (done) return true;
    if (timeout >= 0 && std::chrono::duration<double>(Clock::now() - start).count() >= timeout) {
      return false;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

}  // namespace

void RegisterPointToPoint(py::module_& m) {
  py::class_<P2PComm, std::shared_ptr<P2PComm>>(
      m, "P2PComm", "A torch.distributed group's communicator for point-to-point messages")
      .def_static(
          "create",
          [](const std::vector<int>& ranks, int kolo_rank, int kolo_size) {
            Result<std::shared_ptr<P2PComm>> comm = Status::OK();
            {
              py::gil_scoped_release release;  // collective: waits for the other members
              comm = P2PComm::Create(ranks, kolo_rank, kolo_size);
            }
            return Check(std::move(comm));
          },
          "Collective over `ranks` (global ranks, in group order) only.")
      .def("isend", [](P2PComm& c, uintptr_t data, int64_t bytes, int peer,
                       int tag) { return Check(c.Start(false, data, bytes, peer, tag)); })
      .def(
          "irecv",
          [](P2PComm& c, uintptr_t data, int64_t bytes, int peer, int tag) {
            return Check(c.Start(true, data, bytes, peer, tag));
          },
          "peer -1 receives from any rank.")
      .def("free", &P2PComm::Free)
      .def_property_readonly("rank", &P2PComm::rank)
      .def_property_readonly("size", &P2PComm::size)
      .def_property_readonly("tag_ub", &P2PComm::tag_ub);

  py::class_<P2PRequest, std::shared_ptr<P2PRequest>>(m, "P2PRequest")
      .def("test",
           [](P2PRequest& r) {
             py::gil_scoped_release release;
             return r.Test();
           })
      .def("wait", &Wait, py::arg("timeout") = -1.0,
           "True once finished (see error), False after `timeout` seconds (negative: none).")
      .def(
          "cancel",
          [](P2PRequest& r) {
            py::gil_scoped_release release;
            return r.Cancel();
          },
          "Withdraws an unmatched receive (True); False when it finished first.")
      .def_property_readonly("error",
                             [](P2PRequest& r) -> py::object {
                               Status s = r.status();
                               if (s.ok()) return py::none();
                               return py::str(s.message());
                             })
      .def_property_readonly("source", &P2PRequest::source)
      .def_property_readonly("is_recv", &P2PRequest::is_recv)
      .def_property_readonly("peer", &P2PRequest::peer);
}

}  // namespace kolo
