// Running the job: mpirun as kolorun's child, its output printed as whole
// lines per rank, the rendezvous watched, signals forwarded, the teardown
// bounded, and the last line naming why the job ended.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "rendezvous.h"

namespace kolo::launcher {

struct Job {
  std::vector<std::string> mpirun_argv;
  std::map<std::string, std::string> mpirun_env;  // set in mpirun's environment
  std::vector<std::string> rank_hosts;            // rank -> host, for messages
  std::string output_dir;                         // --output-filename, or ""
  double start_timeout = 30;                      // seconds for every rank to register
  bool verbose = false;                           // Open MPI's own lines on the console too
};

// Runs `job` to its end; returns kolorun's exit code.
int Supervise(const Job& job, RendezvousServer& server);

}  // namespace kolo::launcher
