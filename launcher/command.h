// The mpirun command line, built as an argv vector (never a shell string).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "hosts.h"

namespace kolo::launcher {

struct LaunchPlan {
  std::string mpirun = "mpirun";
  int np = 1;
  std::vector<HostSlots> hosts;  // already clipped to the ranks that run
  bool as_root = false;
  bool oversubscribe = false;    // some host gets more ranks than it has cores
  std::string binding = "none";  // mpirun --bind-to value
  int ssh_port = 0;
  std::string ssh_identity_file;
  std::vector<std::string> network_interfaces;
  // Variables every rank gets: name -> value (set on kolorun's side, sent with -x).
  std::map<std::string, std::string> env;
  std::vector<std::string> extra_mpi_args;  // --mpi-args, already split
  std::string rank_exec;                    // the per-rank wrapper that maps the environment
  std::vector<std::string> command;         // the user's program and its arguments
};

// The argv that runs `plan`; `plan.env`'s variables are passed by name with
// `-x NAME` (their values must be in mpirun's environment, see ChildEnvironment).
std::vector<std::string> BuildMpirunCommand(const LaunchPlan& plan);

// The names of variables forwarded from kolorun's own environment to every
// rank: KOLO_*, NCCL_*, PATH, LD_LIBRARY_PATH, PYTHONPATH, PYTHONUNBUFFERED, and
// the user's -x names.
std::vector<std::string> ForwardedNames(const std::map<std::string, std::string>& environment,
                                        const std::vector<std::string>& user_names);

// Splits --mpi-args like a shell would for plain words and quotes ('..', "..").
Result<std::vector<std::string>> SplitArgs(const std::string& text);

// Renders argv so that it can be pasted into a shell (for --dry-run).
std::string ShellQuote(const std::vector<std::string>& argv);

// kolorun --pin-gpus: the CUDA_VISIBLE_DEVICES of the rank with `local_rank`
// on its host. `visible` is the variable as the rank found it (empty when
// unset): the rank keeps the local_rank-th entry of that list, or device
// `local_rank` when unset. An error when the list is too short.
Result<std::string> PinnedGpu(const std::string& visible, int local_rank);

}  // namespace kolo::launcher
