// Joining processes that kolo did not launch into one MPI communicator.
//
// Under torchrun or torch.multiprocessing.spawn every process is an MPI
// singleton: MPI_COMM_WORLD holds itself alone. MPI's dynamic processes join
// them: rank 0 opens a port, the others connect to it one at a time in rank
// order, and each connection is accepted by every rank joined so far and
// merged into one intracommunicator, the new rank last, so that MPI's ranks
// are torch.distributed's. Open MPI 4.1 connects singletons only through an
// ompi-server that all of them know (OMPI_MCA_pmix_server_uri, set here before
// MPI_Init); concurrent connections to one port are not paired reliably
// (they hang), hence one at a time. The Python side (kolo/common/join.py)
// starts the server, passes its URI and the port name through
// torch.distributed's store, orders the turns, and bounds the whole by the
// init timeout: every call here blocks without the GIL.
//
// The joined communicator lives in a JoinedRanks from the first join to
// Finalize(); the binding holds the one JoinedRanks, and point-to-point
// messages (runtime/p2p.h) run on its world() as on MPI_COMM_WORLD under mpirun.
#include "join.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kolo/mpi_handle.h"
#include "p2p.h"

namespace kolo {
namespace {

Status JoinStatus(int rc, const std::string& call) {
  Status s = MpiStatus(rc, call.c_str());
  if (s.ok()) return s;
  return Status::Internal("joining kolo's ranks: " + s.message());
}

}  // namespace

// MPI as a singleton that can connect to the others: the server's URI first.
Status InitJoinableMpi(const std::string& server_uri) {
  int initialized = 0, finalized = 0, level = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized || finalized) {
    return Status::PreconditionFailed(
        "kolo cannot join the ranks of this torch.distributed job: MPI was already "
        "initialized in this process (by importing mpi4py.MPI, or by an earlier kolo), so it "
        "cannot reach the other ranks any more. Initialize the process group before anything "
        "starts MPI, or start the job with kolorun (kolorun -np N python script.py)");
  }
  if (setenv("OMPI_MCA_pmix_server_uri", server_uri.c_str(), 1) != 0) {
    return Status::Internal("joining kolo's ranks: setenv(OMPI_MCA_pmix_server_uri) failed");
  }
  KOLO_RETURN_IF_ERROR(JoinStatus(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &level),
                                  "MPI_Init_thread"));
  // Failures come back as statuses from here on, not as aborts.
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 1) {
    return Status::PreconditionFailed(
        "kolo was asked to join ranks started by torch.distributed's launcher, but this process "
        "is one of " +
        std::to_string(size) + " in MPI_COMM_WORLD (mpirun started it)");
  }
  return Status::OK();
}

Result<std::string> OpenJoinPort() {
  char port[MPI_MAX_PORT_NAME] = {};
  KOLO_RETURN_IF_ERROR(JoinStatus(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port"));
  return std::string(port);
}

void CloseJoinPort(const std::string& port) {
  if (MpiUsable()) MPI_Close_port(port.c_str());
}

Status MpiJoinedRanks::Merge(MPI_Comm inter, bool high, const char* call) {
  MPI_Comm merged = MPI_COMM_NULL;
  int rc = MPI_Intercomm_merge(inter, high ? 1 : 0, &merged);
  MPI_Comm_disconnect(&inter);
  KOLO_RETURN_IF_ERROR(JoinStatus(rc, std::string("MPI_Intercomm_merge after ") + call));
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  MutexLock lock(&mu_);
  comm_ = MpiComm(merged);  // frees the one it replaces
  return Status::OK();
}

// The next rank's connection, accepted by every rank joined so far.
Status MpiJoinedRanks::Accept(const std::string& port) {
  MPI_Comm joined = comm();
  if (joined == MPI_COMM_NULL) joined = MPI_COMM_SELF;  // rank 0, alone so far
  MPI_Comm inter = MPI_COMM_NULL;
  KOLO_RETURN_IF_ERROR(JoinStatus(MPI_Comm_accept(port.c_str(), MPI_INFO_NULL, 0, joined, &inter),
                                  "MPI_Comm_accept"));
  return Merge(inter, false, "MPI_Comm_accept");
}

// This process's connection to the ranks joined before it.
Status MpiJoinedRanks::Connect(const std::string& port) {
  if (comm() != MPI_COMM_NULL) {
    return Status::PreconditionFailed("joining kolo's ranks: this process has joined already");
  }
  MPI_Comm inter = MPI_COMM_NULL;
  KOLO_RETURN_IF_ERROR(
      JoinStatus(MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter),
                 "MPI_Comm_connect to port " + port));
  return Merge(inter, true, "MPI_Comm_connect");
}

int MpiJoinedRanks::size() const {
  MPI_Comm joined = comm();
  int size = 1;
  if (joined != MPI_COMM_NULL) MPI_Comm_size(joined, &size);
  return size;
}

int MpiJoinedRanks::rank() const {
  MPI_Comm joined = comm();
  int rank = 0;
  if (joined != MPI_COMM_NULL) MPI_Comm_rank(joined, &rank);
  return rank;
}

uintptr_t MpiJoinedRanks::comm_handle() const {
  const MPI_Comm joined = comm();
  return joined == MPI_COMM_NULL ? 0 : HandleOfComm(joined);
}

std::unique_ptr<JoinedRanks> MakeJoinedRanks() { return std::make_unique<MpiJoinedRanks>(); }

Result<std::shared_ptr<P2PComm>> MakeP2PComm(const JoinedRanks& joined,
                                             const std::vector<int>& ranks, int kolo_rank,
                                             int kolo_size) {
  // Every JoinedRanks is this file's (MakeJoinedRanks).
  const auto& mpi = static_cast<const MpiJoinedRanks&>(joined);
  return MpiP2PComm::Create(mpi.world(), ranks, kolo_rank, kolo_size);
}

MPI_Comm MpiJoinedRanks::comm() const {
  MutexLock lock(&mu_);
  return comm_.get();
}

MPI_Comm MpiJoinedRanks::world() const {
  MPI_Comm joined = comm();
  return joined == MPI_COMM_NULL ? MPI_COMM_WORLD : joined;
}

Status MpiJoinedRanks::Finalize() {
  if (!MpiUsable()) return Status::OK();
  {
    MutexLock lock(&mu_);
    comm_ = MpiComm();  // frees the joined communicator
  }
  return JoinStatus(MPI_Finalize(), "MPI_Finalize");
}

}  // namespace kolo
