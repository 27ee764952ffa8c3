// Host sources of the clouds that start a job's machines for it, read as a
// scheduler's allocation is: Kubeflow's MPI Operator (the launcher pod of an
// MPIJob) and Amazon SageMaker. ResolveHosts (hosts.h) tries them after the
// schedulers. Pure functions of text and environment, tested without
// processes; file contents come through a FileReader.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hosts.h"
#include "kolo/status.h"

namespace kolo::launcher {

// ---- Kubeflow MPI Operator (MPIJob v2beta1) --------------------------------

// Where the operator mounts its ConfigMap in the launcher pod.
constexpr const char* kMpiOperatorDir = "/etc/mpi";

// The hostfile of an MPIJob's launcher pod: the file named by the first of
// OMPI_MCA_orte_default_hostfile, PRTE_MCA_prte_default_hostfile,
// HYDRA_HOST_FILE and I_MPI_HYDRA_HOST_FILE that is set (the operator sets
// the one its mpiImplementation reads; Open MPI 5 reads none of the orte_*
// ones, so kolorun reads the file itself and passes the hosts to any MPI),
// else /etc/mpi/hostfile when K_MPI_JOB_ROLE=launcher. Nothing elsewhere.
struct MpiOperatorHostfile {
  std::string path;
  // How kolorun names the source: "MPI Operator (PATH)" in a launcher pod,
  // "VARIABLE (PATH)" when only a variable says so (set by hand).
  std::string source;
  // discover_hosts.sh beside the hostfile (the same ConfigMap): the running
  // workers, one per line, for elastic jobs.
  std::string discovery_script;
};
std::optional<MpiOperatorHostfile> FindMpiOperatorHostfile(
    const std::map<std::string, std::string>& env);

// The allocation of a launcher pod: the hosts of `pod`'s hostfile
// (ParseHostfile reads both of the operator's forms: "host slots=N" for
// mpiImplementation OpenMPI, "host:N" for Intel and MPICH, whatever MPI the
// image runs), each of which must get a rank (started_for_job).
Result<Allocation> MpiOperatorAllocation(const MpiOperatorHostfile& pod, FileReader read_file);

// An error when `env` is an MPIJob's worker pod (K_MPI_JOB_ROLE=worker): the
// workers run sshd and the launcher runs kolorun; kolorun started in every
// worker would run one separate job per worker.
Status RefuseMpiOperatorWorker(const std::map<std::string, std::string>& env);

// True where a cloud starts the job's machines together with kolorun's (an
// MPIJob's launcher pod, K_MPI_JOB_ROLE=launcher; a SageMaker training job):
// the other hosts' sshd may come up after kolorun starts, and kolorun waits
// for it kCloudSshWaitSeconds unless --ssh-wait says otherwise. (An MPIJob's
// launcher starts before its workers unless its launcherCreationPolicy is
// WaitForWorkersReady, and a worker's name resolves only once its pod runs.)
bool HostsStartWithTheJob(const std::map<std::string, std::string>& env);
constexpr double kCloudSshWaitSeconds = 60;

// ---- Amazon SageMaker ------------------------------------------------------

// The file that SageMaker writes into every host of a training job.
constexpr const char* kSageMakerResourceConfig = "/opt/ml/input/config/resourceconfig.json";

// SM_HOSTS: a JSON list of host names, ["algo-1","algo-2"].
Result<std::vector<std::string>> ParseSageMakerHostList(const std::string& json);

// resourceconfig.json: {"current_host": "algo-1", "hosts": ["algo-1", ...],
// ...}; the other fields are not read.
struct SageMakerResourceConfig {
  std::string current_host;
  std::vector<std::string> hosts;
};
Result<SageMakerResourceConfig> ParseSageMakerResourceConfig(const std::string& json);

// A SageMaker training job's host: SM_HOSTS or SM_CURRENT_HOST (set by
// SageMaker's training toolkit) or TRAINING_JOB_ARN (set by SageMaker in
// every training container) is in `env`.
bool InSageMaker(const std::map<std::string, std::string>& env);

// The hosts of a SageMaker training job: SM_HOSTS, else resourceconfig.json
// (read through `read_file`); each with SM_NUM_GPUS slots, or SM_NUM_CPUS
// on a CPU instance (SM_NUM_GPUS=0); without either (a container without
// SageMaker's training toolkit), a job of one host takes `one_host_slots`,
// and one of more hosts is an error. Every host must get a rank
// (started_for_job). kolorun launches from the first host only: on another
// one (SM_CURRENT_HOST, else the file's current_host) it is an error, since
// SageMaker starts the entry point on every host and each would launch the
// whole job again.
Result<Allocation> SageMakerAllocation(const std::map<std::string, std::string>& env,
                                       FileReader read_file, int one_host_slots);

}  // namespace kolo::launcher
