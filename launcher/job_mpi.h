// The MPI a job runs on, found once per kolorun run: the mpirun chosen by
// the rule of mpi_choice.h, who it is (its `--version`), the program each
// job starts, and where that MPI's library is; and what follows from it for
// an elastic job's recovery.
#pragma once

#include <map>
#include <string>

#include "elastic.h"
#include "mpi_choice.h"

namespace kolo::launcher {

// The directory holding this executable (kolo-rank lives beside kolorun).
std::string SelfDir();

struct JobMpi {
  MpiChoice choice;
  MpiIdentity identity;
  // The folder of the chosen MPI's libmpi.so.12 (Hydra: beside its bin/),
  // which the ranks load first; "" for Open MPI, whose mpirun says so itself.
  std::string library_dir;
};

// `setting` is --mpi-home's value, else "" (KOLO_MPI_HOME is then read from
// `environment`).
Result<JobMpi> FindJobMpi(const std::string& setting,
                          const std::map<std::string, std::string>& environment);

// --check-build's line: "/venv/bin/mpiexec.hydra: MPICH 5.0.2 (Hydra), from KOLO_MPI_HOME".
std::string DescribeJobMpi(const JobMpi& mpi);

// Whether an elastic job recovers lost ranks in place (Open MPI 5's fault
// tolerance, unless KOLO_ELASTIC_IN_PLACE=0) or restarts every worker, and
// the job's first line that says so and why.
void ChooseRecovery(const JobMpi& mpi, const std::map<std::string, std::string>& environment,
                    ElasticRun* run);

}  // namespace kolo::launcher
