// Joining processes that kolo did not launch (torchrun,
// torch.multiprocessing.spawn) into one MPI communicator, for kolo's
// torch.distributed backend. See join.cc.
#pragma once

#include <mpi.h>

#include <string>

#include "kolo/status.h"

namespace kolo {
namespace join {

// MPI_Init_thread as a singleton that reaches the ompi-server at `server_uri`.
Status InitMpi(const std::string& server_uri);
// Rank 0: a port name for the others to connect to.
Result<std::string> OpenPort();
void ClosePort(const std::string& port);
// Every rank joined so far: accepts the next rank's connection and merges it in last.
Status Accept(const std::string& port);
// This rank: connects to the ranks joined so far and merges in after them.
Status Connect(const std::string& port);
// How many ranks are joined (1 before any), and this process's rank among them.
int JoinedSize();
int JoinedRank();
// The joined communicator; MPI_COMM_NULL before the first join.
MPI_Comm Joined();
// Frees the joined communicator and finalizes MPI (after kolo's shutdown).
Status Finalize();

}  // namespace join

// The communicator of every rank: the one the join made, or MPI_COMM_WORLD
// when this process did not join (mpirun / kolorun started it).
MPI_Comm WorldComm();

}  // namespace kolo
