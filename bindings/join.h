// Joining processes that kolo did not launch (torchrun,
// torch.multiprocessing.spawn) into one MPI communicator, for kolo's
// torch.distributed backend. See join.cc.
#pragma once

#include <mpi.h>
#include <pybind11/pybind11.h>

namespace kolo {

// Adds join_* to kolo._core.
void RegisterJoin(pybind11::module_& m);

// The communicator of every rank: the one the join made, or MPI_COMM_WORLD
// when this process did not join (mpirun / kolorun started it).
MPI_Comm WorldComm();

}  // namespace kolo
