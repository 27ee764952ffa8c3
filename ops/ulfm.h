// Open MPI 5's fault tolerance (ULFM: MPIX_Comm_revoke, MPIX_Comm_shrink,
// MPIX_Comm_agree), found at run time: kolo builds against any Open MPI
// (4.1 has no ULFM) and runs on the libmpi that the job's mpirun brings
// (docs/install.md, "Which MPI"). A job may use them only when the library
// has them and the job runs with fault tolerance on (kolorun's in-place
// elastic mode: `--with-ft ulfm`, KOLO_ELASTIC_IN_PLACE=1).
#pragma once

#include <mpi.h>

#include <string>

#include "kolo/status.h"

namespace kolo {

struct UlfmCalls {
  int (*revoke)(MPI_Comm) = nullptr;
  int (*shrink)(MPI_Comm, MPI_Comm*) = nullptr;
  int (*agree)(MPI_Comm, int*) = nullptr;
  bool found() const { return revoke != nullptr && shrink != nullptr && agree != nullptr; }
};

// The loaded libmpi's ULFM calls (all null when it has none), looked up once.
const UlfmCalls& Ulfm();

// Why this process cannot recover in place ("" when it can): the library has
// no ULFM, or the job did not turn fault tolerance on (KOLO_ELASTIC_IN_PLACE).
std::string UlfmUnavailableReason();

// Revokes `comm` (every pending and future operation on it fails on every
// rank), when ULFM is usable; a null or already revoked one is left alone.
void RevokeIfUsable(MPI_Comm comm);

// The survivors of `comm` (revoked, with failed processes) as a new
// communicator, ranked in their old order: collective over the survivors.
Result<MPI_Comm> ShrinkSurvivors(MPI_Comm comm);

}  // namespace kolo
