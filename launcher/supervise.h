// Running the job: mpirun as kolorun's child, its output printed as whole
// lines per rank, the rendezvous watched, signals forwarded, the teardown
// bounded, and the last line naming why the job ended.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "monitor.h"
#include "output.h"
#include "progress_line.h"
#include "rendezvous.h"

namespace kolo::launcher {

struct Job {
  std::vector<std::string> mpirun_argv;
  std::map<std::string, std::string> mpirun_env;  // set in mpirun's environment
  std::vector<std::string> rank_hosts;            // rank -> host, for messages
  std::string output_dir;                         // --output-filename, or ""
  double start_timeout = 30;                      // seconds for every rank to register
  bool verbose = false;                           // Open MPI's own lines on the console too
  bool space_after_tag = false;  // PRRTE's --tag-output: "[1,0]<stdout>: " (output.h)
  bool append_output = false;    // add to --output-filename's files (a later elastic incarnation)
  // In-place elastic mode (Open MPI 5's fault tolerance): a failed rank does
  // not end the job, whose survivors go on; `each_turn` decides instead.
  bool ranks_may_fail = false;
  Monitor* monitor = nullptr;        // --monitor or the status line: told of rank exits
  ProgressLine* progress = nullptr;  // the terminal's status line, or none
};

// How one job ended: what kolorun's report says, and what elastic mode decides from.
struct JobOutcome {
  std::string ended;            // why kolorun ended the job itself, or ""
  int stop_signal = 0;          // SIGINT / SIGTERM that stopped kolorun, or 0
  std::vector<RankExit> exits;  // kolo-rank's failure markers, in the order they came
  int mpirun_status = 0;        // mpirun's wait status
  // Hosts none of whose ranks reported back when mpirun had not stopped the
  // job 10 s after a rank failed (a host cut off, or its daemon hung).
  std::vector<std::string> silent_hosts;
  // When the first failure marker came, else when mpirun ended.
  std::chrono::steady_clock::time_point failure_time;
  std::string open_mpi_log;  // the file Open MPI's own lines went to ("" when none)
  std::string open_mpi_first_line;
  int open_mpi_lines = 0;
};

// Called at least every 200 ms on kolorun's thread while a job runs, with the
// rank failures seen so far; it must not block. Returning true ends the job
// (the bounded teardown) as a rank's failure does.
using EachTurn = std::function<bool(const std::vector<RankExit>& exits)>;

// Runs `job` to its end, calling `each_turn` (when set) every turn.
JobOutcome RunJob(const Job& job, RendezvousServer& server, const EachTurn& each_turn);
// kolorun's last line for `outcome` (nothing when the job succeeded and
// Open MPI said nothing) and its exit code.
int Report(const JobOutcome& outcome);
// Runs `job` to its end; returns kolorun's exit code.
inline int Supervise(const Job& job, RendezvousServer& server) {
  return Report(RunJob(job, server, nullptr));
}

// "rank 2 on host h was killed by signal 9 (SIGKILL)" / "... exited with code 3".
std::string DescribeRankExit(const RankExit& e, const std::string& host);
// The exit code kolorun ends with for a rank's failure: its code, or 128 + signal.
int RankExitCode(const RankExit& e);

// SIGINT and SIGTERM to kolorun stop the job (RunJob installs the handler);
// true once one came.
void CatchStopSignals();
int StopSignal();

}  // namespace kolo::launcher
