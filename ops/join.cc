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
// The joined communicator lives from join to join_finalize(); it is the one
// process-wide value here (guarded by a mutex), read by point-to-point
// messages (WorldComm) as MPI_COMM_WORLD is under mpirun.
#include "ops/join.h"

#include <cstdlib>
#include <string>

#include "base/mutex.h"

namespace kolo {
namespace {

std::string MpiText(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, len);
}

Status MpiCall(int rc, const std::string& call) {
  if (rc == MPI_SUCCESS) return Status::OK();
  return Status::Internal("joining kolo's ranks: " + call + " failed: " + MpiText(rc));
}

bool MpiUsable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

Mutex joined_mutex;
MPI_Comm joined GUARDED_BY(joined_mutex) = MPI_COMM_NULL;

// Replaces the joined communicator, freeing the one it had.
void SetJoined(MPI_Comm comm) {
  MutexLock lock(&joined_mutex);
  if (joined != MPI_COMM_NULL) MPI_Comm_free(&joined);
  joined = comm;
}

}  // namespace

namespace join {

MPI_Comm Joined() {
  MutexLock lock(&joined_mutex);
  return joined;
}

// MPI as a singleton that can connect to the others: the server's URI first.
Status InitMpi(const std::string& server_uri) {
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
  KOLO_RETURN_IF_ERROR(
      MpiCall(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &level), "MPI_Init_thread"));
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

Result<std::string> OpenPort() {
  char port[MPI_MAX_PORT_NAME] = {};
  KOLO_RETURN_IF_ERROR(MpiCall(MPI_Open_port(MPI_INFO_NULL, port), "MPI_Open_port"));
  return std::string(port);
}

// One side of a connection, merged into an intracommunicator (`high`: this
// side's ranks come last) that replaces the joined one.
Status Merge(MPI_Comm inter, bool high, const char* call) {
  MPI_Comm merged = MPI_COMM_NULL;
  int rc = MPI_Intercomm_merge(inter, high ? 1 : 0, &merged);
  MPI_Comm_disconnect(&inter);
  KOLO_RETURN_IF_ERROR(MpiCall(rc, std::string("MPI_Intercomm_merge after ") + call));
  MPI_Comm_set_errhandler(merged, MPI_ERRORS_RETURN);
  SetJoined(merged);
  return Status::OK();
}

// The next rank's connection, accepted by every rank joined so far.
Status Accept(const std::string& port) {
  MPI_Comm comm = Joined();
  if (comm == MPI_COMM_NULL) comm = MPI_COMM_SELF;  // rank 0, alone so far
  MPI_Comm inter = MPI_COMM_NULL;
  KOLO_RETURN_IF_ERROR(
      MpiCall(MPI_Comm_accept(port.c_str(), MPI_INFO_NULL, 0, comm, &inter), "MPI_Comm_accept"));
  return Merge(inter, false, "MPI_Comm_accept");
}

// This process's connection to the ranks joined before it.
Status Connect(const std::string& port) {
  if (Joined() != MPI_COMM_NULL) {
    return Status::PreconditionFailed("joining kolo's ranks: this process has joined already");
  }
  MPI_Comm inter = MPI_COMM_NULL;
  KOLO_RETURN_IF_ERROR(
      MpiCall(MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter),
              "MPI_Comm_connect to port " + port));
  return Merge(inter, true, "MPI_Comm_connect");
}

int JoinedSize() {
  MPI_Comm comm = Joined();
  int size = 1;
  if (comm != MPI_COMM_NULL) MPI_Comm_size(comm, &size);
  return size;
}

int JoinedRank() {
  MPI_Comm comm = Joined();
  int rank = 0;
  if (comm != MPI_COMM_NULL) MPI_Comm_rank(comm, &rank);
  return rank;
}

void ClosePort(const std::string& port) {
  if (MpiUsable()) MPI_Close_port(port.c_str());
}

Status Finalize() {
  if (!MpiUsable()) return Status::OK();
  SetJoined(MPI_COMM_NULL);
  return MpiCall(MPI_Finalize(), "MPI_Finalize");
}

}  // namespace join

MPI_Comm WorldComm() {
  MPI_Comm comm = join::Joined();
  return comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm;
}

}  // namespace kolo
