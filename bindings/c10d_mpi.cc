// kolo._core's MPI outside the runtime, for kolo's torch.distributed backend:
// joining the ranks that torchrun or torch.multiprocessing.spawn started
// (join_*) and point-to-point messages among them (P2PComm, P2PRequest), over
// libkolo's kolo/c10d.h. Every call that waits lets the GIL go.
#include "c10d_mpi.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kolo/c10d.h"
#include "kolo/status.h"

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

void Check(const Status& s) {
  if (!s.ok()) Throw(s);
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
      done = request.WaitFor(slice, std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (done) return true;
    if (timeout >= 0 && std::chrono::duration<double>(Clock::now() - start).count() >= timeout) {
      return false;
    }
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}

void RegisterJoin(py::module_& m, JoinedRanks* joined) {
  using Release = py::call_guard<py::gil_scoped_release>;
  m.def(
      "join_init_mpi", [](const std::string& uri) { Check(InitJoinableMpi(uri)); },
      py::arg("server_uri"), Release(),
      "MPI_Init_thread as a singleton that reaches the ompi-server at `server_uri`.");
  m.def(
      "join_open_port", [] { return Check(OpenJoinPort()); }, Release(),
      "Rank 0: a port name for the others to connect to.");
  m.def(
      "join_close_port", [](const std::string& port) { CloseJoinPort(port); }, Release());
  m.def(
      "join_accept", [joined](const std::string& port) { Check(joined->Accept(port)); }, Release(),
      "Every rank joined so far: accepts the next rank's connection and merges it in last.");
  m.def(
      "join_connect", [joined](const std::string& port) { Check(joined->Connect(port)); },
      Release(), "This rank: connects to the ranks joined so far and merges in after them.");
  m.def(
      "join_size", [joined] { return joined->size(); },
      "How many ranks are joined (1 before any).");
  m.def(
      "join_rank", [joined] { return joined->rank(); }, "This process's rank among them.");
  m.def(
      "join_comm_handle", [joined] { return joined->comm_handle(); },
      "The joined communicator's handle, for init(comm_handle=...).");
  m.def(
      "join_finalize", [joined] { Check(joined->Finalize()); }, Release(),
      "Frees the joined communicator and finalizes MPI (after kolo's shutdown).");
}

void RegisterPointToPoint(py::module_& m, const JoinedRanks* joined) {
  py::class_<P2PComm, std::shared_ptr<P2PComm>>(
      m, "P2PComm", "A torch.distributed group's communicator for point-to-point messages")
      .def_static(
          "create",
          [joined](const std::vector<int>& ranks, int kolo_rank, int kolo_size) {
            Result<std::shared_ptr<P2PComm>> comm = Status::OK();
            {
              py::gil_scoped_release release;  // collective: waits for the other members
              comm = MakeP2PComm(*joined, ranks, kolo_rank, kolo_size);
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

}  // namespace

void RegisterC10dMpi(py::module_& m) {
  // The process's one JoinedRanks, shared by join_* and P2PComm.create. Made
  // with the module and never destroyed: a join that timed out leaves its
  // thread waiting in MPI with it when the process exits.
  JoinedRanks* joined = MakeJoinedRanks().release();
  RegisterJoin(m, joined);
  RegisterPointToPoint(m, joined);
}

}  // namespace kolo
