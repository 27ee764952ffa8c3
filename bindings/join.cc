// kolo._core's join_* functions (ops/join.h): joining the ranks that
// torchrun or torch.multiprocessing.spawn started, without the GIL.
#include "join.h"

#include <cstdint>
#include <string>

#include "kolo/status.h"
#include "ops/join.h"

namespace py = pybind11;

namespace kolo {
namespace {

void Check(const Status& s) {
  if (s.ok()) return;
  if (s.code() == StatusCode::kInvalidArgument) throw py::value_error(s.message());
  throw std::runtime_error(s.message());
}

}  // namespace

void RegisterJoin(py::module_& m) {
  using Release = py::call_guard<py::gil_scoped_release>;
  m.def(
      "join_init_mpi", [](const std::string& uri) { Check(join::InitMpi(uri)); },
      py::arg("server_uri"), Release(),
      "MPI_Init_thread as a singleton that reaches the ompi-server at `server_uri`.");
  m.def(
      "join_open_port",
      [] {
        Result<std::string> port = join::OpenPort();
        Check(port.status());
        return port.value();
      },
      Release(), "Rank 0: a port name for the others to connect to.");
  m.def(
      "join_close_port", [](const std::string& port) { join::ClosePort(port); }, Release());
  m.def(
      "join_accept", [](const std::string& port) { Check(join::Accept(port)); }, Release(),
      "Every rank joined so far: accepts the next rank's connection and merges it in last.");
  m.def(
      "join_connect", [](const std::string& port) { Check(join::Connect(port)); }, Release(),
      "This rank: connects to the ranks joined so far and merges in after them.");
  m.def("join_size", &join::JoinedSize, "How many ranks are joined (1 before any).");
  m.def("join_rank", &join::JoinedRank, "This process's rank among them.");
  m.def(
      "join_comm_handle", [] { return reinterpret_cast<uintptr_t>(join::Joined()); },
      "The joined communicator's handle, for init(comm_handle=...).");
  m.def(
      "join_finalize", [] { Check(join::Finalize()); }, Release(),
      "Frees the joined communicator and finalizes MPI (after kolo's shutdown).");
}

}  // namespace kolo
