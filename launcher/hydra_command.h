// The mpiexec command line in Hydra's dialect (MPICH, Intel MPI), and the
// variables that Hydra and the ranks read where Open MPI takes options.
// Pure: kolorun and kolo-rank bring the environment and the interfaces.
//
// Measured on MPICH 5.0.2 and Intel MPI 2021.19 (PyPI's wheels): Intel
// MPI's -hosts and -f ignore a host's ":N" (its -ppn, by default the number
// of cores, decides), MPICH's take it; Intel MPI pins every rank to a core
// unless I_MPI_PIN=0; ssh's options reach Hydra through its environment
// only; Hydra leaves a rank that exits with a code without MPI to the end of
// the job, where Open MPI's mpirun ends it.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "command.h"

namespace kolo::launcher {

using Variables = std::map<std::string, std::string>;

// The job's network as kolo-rank gives it to MPI's transports (names or IPv4
// networks, as kBindInterfaces; "lo" on one host).
inline constexpr const char* kMpiInterfaces = "KOLORUN_MPI_INTERFACES";

// The argv that runs `plan` on Hydra's mpiexec (BuildMpirunCommand's, for kHydra).
std::vector<std::string> BuildHydraCommand(const LaunchPlan& plan);

// What mpiexec reads from its own environment: ssh's port and key
// (HYDRA_LAUNCHER_EXTRA_ARGS; Intel MPI's I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS)
// and, for Intel MPI inside a scheduler's job, how its proxies start there
// (I_MPI_HYDRA_BOOTSTRAP, chosen as Intel's mpirun script chooses it; MPICH's
// mpiexec finds it itself). A variable already in `environment` wins.
Variables HydraLauncherVariables(const LaunchPlan& plan, const Variables& environment);

// What every rank of a Hydra job gets besides kolorun's own variables:
// Intel MPI's pinning for --binding, the chosen MPI's library first on the
// loader's path (`mpi_library_dir`: Open MPI 5's mpirun does the same for its
// own), and kMpiInterfaces. A variable already in `environment` wins.
Variables HydraRankVariables(const LaunchPlan& plan, const std::string& mpi_library_dir,
                             const Variables& environment);

// kolo-rank's side of kMpiInterfaces: UCX_NET_DEVICES (MPICH's UCX) and
// FI_TCP_IFACE (libfabric's TCP provider: MPICH's OFI, Intel MPI) naming this
// host's interfaces on the job's network `spec`; `interfaces` are this
// host's (name, IPv4 address) pairs. Nothing when none matches.
Variables TransportInterfaces(const std::string& spec,
                              const std::vector<std::pair<std::string, std::string>>& interfaces);

}  // namespace kolo::launcher
