#include "ops/ulfm.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "ops/mpi.h"

namespace kolo {

const UlfmCalls& Ulfm() {
  static const UlfmCalls calls = [] {
    UlfmCalls c;
    // Open MPI's libmpi is loaded with the process (kolo links it), so its
    // symbols are in the global scope.
    c.revoke = reinterpret_cast<int (*)(MPI_Comm)>(dlsym(RTLD_DEFAULT, "MPIX_Comm_revoke"));
    c.shrink =
        reinterpret_cast<int (*)(MPI_Comm, MPI_Comm*)>(dlsym(RTLD_DEFAULT, "MPIX_Comm_shrink"));
    c.agree = reinterpret_cast<int (*)(MPI_Comm, int*)>(dlsym(RTLD_DEFAULT, "MPIX_Comm_agree"));
    return c;
  }();
  return calls;
}

std::string UlfmUnavailableReason() {
#ifndef OPEN_MPI
  // MPICH's MPIX_Comm_shrink is not ULFM's, and kolorun runs no MPICH job in place.
  return "this process's MPI is of the MPICH family (kolo shrinks in place only with Open MPI "
         "5's ULFM)";
#endif
  const char* in_place = std::getenv("KOLO_ELASTIC_IN_PLACE");
  if (in_place == nullptr || std::strcmp(in_place, "1") != 0) {
    return "the job runs without fault tolerance (KOLO_ELASTIC_IN_PLACE is not 1: kolorun sets "
           "it for elastic jobs on Open MPI 5)";
  }
  if (!Ulfm().found()) {
    return "this process's MPI library has no MPIX_Comm_shrink (ULFM is Open MPI 5's)";
  }
  return "";
}

void RevokeIfUsable(MPI_Comm comm) {
  if (comm == MPI_COMM_NULL || !UlfmUnavailableReason().empty() || !MpiUsable()) return;
  Ulfm().revoke(comm);  // fails only on a comm already revoked, which is as good
}

Result<MPI_Comm> ShrinkSurvivors(MPI_Comm comm) {
  const std::string why_not = UlfmUnavailableReason();
  if (!why_not.empty()) return Status::PreconditionFailed("cannot shrink in place: " + why_not);
  MPI_Comm shrunk = MPI_COMM_NULL;
  KOLO_RETURN_IF_ERROR(MpiStatus(Ulfm().shrink(comm, &shrunk), "MPIX_Comm_shrink"));
  MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
  return shrunk;
}

}  // namespace kolo
