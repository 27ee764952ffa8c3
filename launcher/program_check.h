// Is the program there? Before anything starts, kolorun checks on every host
// that kolo-rank and the user's program can be started the way kolo-rank
// will start them (execvp: a path as it is, a bare name on the ranks' PATH).
// This file is the pure part: the shell line run on a remote host, what its
// answer means, and the messages; preflight.cc runs it.
#pragma once

#include <string>
#include <vector>

namespace kolo::launcher {

struct ProgramCheck {
  std::string rank_exec;  // kolo-rank's absolute path (the same on every host)
  std::string program;    // the user's program, as given
  std::string path;       // the PATH the ranks get
  std::string cwd;        // where a relative path is looked up
  std::vector<std::string> Programs() const;
};

// Whether `path` is a regular file this process may execute.
bool IsExecutableFile(const std::string& path);

// PATH's entries in order; an empty entry (the working directory to execvp)
// stays empty.
std::vector<std::string> SplitPath(const std::string& path);

// What is wrong with one program on one host: "missing", "isdir", "notexec",
// "notfound" (a bare name on no PATH entry), or "" when it can be started.
using ProgramState = std::string;

// The state of `program` on this machine, found as execvp would.
ProgramState LocalProgramState(const std::string& program, const std::string& path,
                               const std::string& cwd);

// The command line (for ssh or the remote agent) that prints one
// "<state> <program>" line per problem and then kKolorunCheckDone. POSIX sh,
// whatever the remote user's login shell is.
std::string RemoteCheckCommand(const ProgramCheck& check);
inline constexpr const char* kKolorunCheckDone = "KOLORUN-CHECK-DONE";

// The problems a remote host's answer reports, as (state, program) pairs;
// false when the answer is not complete (the check did not run to its end).
bool ParseRemoteCheck(const std::string& output,
                      std::vector<std::pair<ProgramState, std::string>>* out);

// One line about one problem: which host, which program, what is wrong, what to do.
std::string ProgramProblemMessage(const std::string& host, const ProgramCheck& check,
                                  const ProgramState& state, const std::string& program);

// The argv that runs `command` on `host`: ssh (with -p / -i when given), or
// the remote agent named by plm_rsh_agent in `mpi_args` / the environment.
std::vector<std::string> RemoteShellArgv(const std::vector<std::string>& agent,
                                         const std::string& host, int ssh_port,
                                         const std::string& identity_file,
                                         const std::string& command, double timeout_seconds);

// The remote agent that mpirun will use: plm_rsh_agent's (or Open MPI 5's
// plm_ssh_agent's) value from the mpirun arguments, or Hydra's -launcher-exec
// (Intel MPI's -bootstrap-exec), else the environment's (`environment_value`:
// OMPI_MCA_plm_rsh_agent, HYDRA_LAUNCHER_EXEC, I_MPI_HYDRA_BOOTSTRAP_EXEC), split into words;
// empty for ssh.
std::vector<std::string> RemoteAgent(const std::vector<std::string>& mpi_args,
                                     const std::string& environment_value);

}  // namespace kolo::launcher
