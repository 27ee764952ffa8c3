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
  bool verbose = false;                           // the MPI's own lines on the console too
  OutputTags tags = OutputTags::kOpenMpi;         // how mpirun tags the ranks' output
  std::string mpi_name = "Open MPI";              // whose messages mpirun's own lines are
  std::string launcher_name = "mpirun";           // the program, as kolorun's lines name it
  // kolorun ends the job itself once a rank fails, not waiting for mpirun:
  // Hydra leaves a rank that exits with a code without MPI to the job's end.
  bool end_on_rank_failure = false;
  bool append_output = false;  // add to --output-filename's files (a later elastic incarnation)
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
  std::string mpi_log;  // the file the MPI's own lines went to ("" when none)
  std::string mpi_first_line;
  int mpi_lines = 0;
  std::string mpi_name = "Open MPI";
  std::string launcher_name = "mpirun";
};

// Called at least every 200 ms on kolorun's thread while a job runs, with the
// rank failures seen so far; it must not block. Returning true ends the job
// (the bounded teardown) as a rank's failure does.
using EachTurn = std::function<bool(const std::vector<RankExit>& exits)>;

// Runs `job` to its end, calling `each_turn` (when set) every turn.
JobOutcome RunJob(const Job& job, RendezvousServer& server, const EachTurn& each_turn);
// kolorun's last line for `outcome` (nothing when the job succeeded and
// the MPI said nothing) and its exit code.
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
