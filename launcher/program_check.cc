#include "program_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <sstream>

#include "command.h"

namespace kolo::launcher {

bool IsExecutableFile(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::vector<std::string> SplitPath(const std::string& path) {
  std::vector<std::string> dirs;
  size_t start = 0;
  while (start <= path.size()) {
    size_t colon = std::min(path.find(':', start), path.size());
    dirs.push_back(path.substr(start, colon - start));
    start = colon + 1;
  }
  return dirs;
}

std::vector<std::string> ProgramCheck::Programs() const {
  std::vector<std::string> programs;
  if (!rank_exec.empty()) programs.push_back(rank_exec);
  programs.push_back(program);
  return programs;
}

ProgramState LocalProgramState(const std::string& program, const std::string& path,
                               const std::string& cwd) {
  if (program.find('/') != std::string::npos) {
    const std::string full = program[0] == '/' ? program : cwd + "/" + program;
    struct stat st {};
    if (stat(full.c_str(), &st) != 0) return "missing";
    if (S_ISDIR(st.st_mode)) return "isdir";
    return access(full.c_str(), X_OK) == 0 ? "" : "notexec";
  }
  // execvp's search; an empty entry is the working directory.
  for (const std::string& dir : SplitPath(path)) {
    const std::string base = dir.empty() ? cwd : dir[0] == '/' ? dir : cwd + "/" + dir;
    if (IsExecutableFile(base + "/" + program)) return "";
  }
  return "notfound";
}

std::string RemoteCheckCommand(const ProgramCheck& check) {
  // Mirrors LocalProgramState. Ranks start in kolorun's working directory
  // where it exists on the host, else in the home directory (mpirun's rule).
  std::string script =
      "cd " + ShellQuote({check.cwd}) + " 2>/dev/null || cd; PATH=" + ShellQuote({check.path}) +
      "; for p in " + ShellQuote(check.Programs()) +
      "; do case $p in */*) if [ -d \"$p\" ]; then echo \"isdir $p\"; "
      "elif [ ! -e \"$p\" ]; then echo \"missing $p\"; "
      "elif [ ! -x \"$p\" ]; then echo \"notexec $p\"; fi ;; "
      "*) f=; IFS=:; for d in $PATH; do [ -n \"$d\" ] || d=.; "
      "if [ -f \"$d/$p\" ] && [ -x \"$d/$p\" ]; then f=1; break; fi; done; unset IFS; "
      "[ -n \"$f\" ] || echo \"notfound $p\" ;; esac; done; echo " +
      kKolorunCheckDone;
  return "sh -c " + ShellQuote({script});
}

bool ParseRemoteCheck(const std::string& output,
                      std::vector<std::pair<ProgramState, std::string>>* out) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line == kKolorunCheckDone) return true;
    const size_t space = line.find(' ');
    const std::string state = line.substr(0, space);
    if (space != std::string::npos &&
        (state == "missing" || state == "isdir" || state == "notexec" || state == "notfound")) {
      out->push_back({state, line.substr(space + 1)});
    }
    // Anything else is the remote shell's own chatter (a login banner).
  }
  return false;
}

std::string ProgramProblemMessage(const std::string& host, const ProgramCheck& check,
                                  const ProgramState& state, const std::string& program) {
  const bool ours = program == check.rank_exec && !check.rank_exec.empty();
  std::string what = ours ? "kolorun's helper '" + program + "'" : "'" + program + "'";
  std::string message = "host '" + host + "': " + what;
  if (state == "notfound") {
    return message + " is not found on the ranks' PATH (" + check.path +
           "); give its full path, or set the ranks' PATH with -x PATH=...";
  }
  if (state == "missing") message += " does not exist";
  if (state == "isdir") message += " is a directory, not a program";
  if (state == "notexec") message += " is not executable";
  if (ours) return message + "; install kolo at the same path on every host";
  if (state == "notexec") return message + " (chmod +x, or run it through its interpreter)";
  if (program[0] == '/') return message;
  return message + " (ranks start in " + check.cwd + " there, else in the home directory)";
}

std::vector<std::string> RemoteShellArgv(const std::vector<std::string>& agent,
                                         const std::string& host, int ssh_port,
                                         const std::string& identity_file,
                                         const std::string& command, double timeout_seconds) {
  std::vector<std::string> argv = agent;
  if (argv.empty()) {
    // BatchMode: a password prompt would wait forever; mpirun cannot answer one either.
    argv = {"ssh", "-o", "BatchMode=yes", "-o",
            "ConnectTimeout=" + std::to_string(std::max(1, static_cast<int>(timeout_seconds)))};
  }
  if (ssh_port > 0) argv.insert(argv.end(), {"-p", std::to_string(ssh_port)});
  if (!identity_file.empty()) argv.insert(argv.end(), {"-i", identity_file});
  argv.insert(argv.end(), {host, command});
  return argv;
}

std::vector<std::string> RemoteAgent(const std::vector<std::string>& mpi_args,
                                     const std::string& environment_value) {
  std::string agent = environment_value;
  for (size_t i = 0; i + 1 < mpi_args.size(); ++i) {
    const std::string& a = mpi_args[i];
    // Hydra's option, and Intel MPI's other name for it.
    if (a == "-launcher-exec" || a == "-bootstrap-exec") agent = mpi_args[i + 1];
    if (i + 2 >= mpi_args.size()) continue;
    const std::string& name = mpi_args[i + 1];
    // ORTE's name, and PRRTE's (Open MPI 5 maps the first to the second).
    const bool agent_param = name == "plm_rsh_agent" || name == "plm_ssh_agent";
    if ((a == "--mca" || a == "-mca" || a == "--prtemca") && agent_param) {
      agent = mpi_args[i + 2];
    }
  }
  // Open MPI's default, "ssh : rsh" (the first of them found), is ssh.
  if (agent.empty() || agent.find(':') != std::string::npos) return {};
  Result<std::vector<std::string>> words = SplitArgs(agent);
  return words.ok() ? words.value() : std::vector<std::string>{agent};
}

}  // namespace kolo::launcher
