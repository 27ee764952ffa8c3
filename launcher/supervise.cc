#include "supervise.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>

#include "options.h"
#include "output.h"

namespace kolo::launcher {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// SIGINT or SIGTERM to kolorun: the job is torn down, and kolorun says so.
volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

// Ends the job when the rendezvous says it cannot go on; returns the message.
std::string CheckRendezvous(RendezvousServer& server, const std::vector<std::string>& rank_hosts,
                            double seconds_since_start, double start_timeout) {
  RendezvousServer::Snapshot s = server.Take();
  for (const std::string& note : s.notes) std::fprintf(stderr, "kolorun: %s\n", note.c_str());
  if (!s.fatal.empty()) return s.fatal;
  const int np = static_cast<int>(rank_hosts.size());
  if (static_cast<int>(s.registered.size()) < np && seconds_since_start > start_timeout) {
    std::string missing;
    int count = 0;
    for (int r = 0; r < np; ++r) {
      if (s.registered.count(r)) continue;
      if (++count <= 16) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r) + " (" + rank_hosts[r] + ")";
      }
    }
    if (count > 16) missing += " and " + std::to_string(count - 16) + " more";
    return "rank(s) " + missing + " did not start within " +
           std::to_string(static_cast<int>(start_timeout)) +
           " s (--start-timeout); is the host slow to start processes, or unreachable?";
  }
  return "";
}

// Says that mpirun did not stop the job after a rank failed, and which hosts
// had ranks that never reported back: the ones it is likely waiting for.
std::string Unreported(const std::vector<std::string>& rank_hosts,
                       const std::vector<RankExit>& exits, const std::string& mpi_name) {
  std::vector<std::string> hosts;
  std::string ranks;
  for (int r = 0; r < static_cast<int>(rank_hosts.size()); ++r) {
    if (std::any_of(exits.begin(), exits.end(), [&](const RankExit& e) { return e.rank == r; }))
      continue;
    ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (std::find(hosts.begin(), hosts.end(), rank_hosts[r]) == hosts.end())
      hosts.push_back(rank_hosts[r]);
  }
  std::string where;
  for (const std::string& h : hosts) where += (where.empty() ? "" : ", ") + h;
  return "mpirun did not stop the job within 10 s of rank " + std::to_string(exits.front().rank) +
         "'s failure; ending it. " +
         (ranks.empty() ? std::string("Every rank reported")
                        : "Rank(s) " + ranks + " on " + where +
                              " never reported back: is that host cut off from the network, "
                              "or its " +
                              mpi_name + " daemon hung?");
}

// The MPI's own messages (mpirun's untagged lines: its help banners, a
// remote daemon's errors) are not the job's output: they go to a log file,
// created when the first one comes, that kolorun's last line names.
class MpiLog {
 public:
  MpiLog(std::string dir, bool append, std::string mpi_name)
      : dir_(std::move(dir)), mpi_name_(std::move(mpi_name)), append_(append) {}
  ~MpiLog() {
    if (file_ != nullptr) std::fclose(file_);
  }
  MpiLog(const MpiLog&) = delete;
  MpiLog& operator=(const MpiLog&) = delete;

  void Write(const std::string& line) {
    if (file_ == nullptr && !Open()) return;
    std::fprintf(file_, "%s\n", line.c_str());
    std::fflush(file_);
    // The report quotes the MPI's first words, but not a warning: mpirun's
    // "plm:rsh: Warning: setpgid(...) failed" comes first or not by timing.
    // Hydra's own words, when it says any, come after what a failed ssh printed.
    const bool words = line.find_first_not_of("-= ") != std::string::npos;
    const bool warning = line.find(": Warning: ") != std::string::npos;
    if (words && (first_.empty() || (first_is_warning_ && !warning))) {
      first_ = line;
      first_is_warning_ = warning;
    }
    if (hydra_said_.empty()) hydra_said_ = HydraMessage(line);
    ++lines_;
  }
  const std::string& path() const { return path_; }
  // Its first words, for the report: Hydra's own first line when it wrote one.
  const std::string& first_line() const { return hydra_said_.empty() ? first_ : hydra_said_; }
  int lines() const { return lines_; }

 private:
  // DIR/mpirun.log with --output-filename, else a new file in the temporary directory.
  bool Open() {
    if (!dir_.empty()) {
      std::error_code ec;
      fs::create_directories(dir_, ec);
      path_ = (fs::path(dir_) / "mpirun.log").string();
      file_ = std::fopen(path_.c_str(), append_ ? "a" : "w");
    } else {
      std::error_code ec;
      fs::path tmp = fs::temp_directory_path(ec);
      std::string name = ((ec ? fs::path("/tmp") : tmp) / "kolorun-XXXXXX.log").string();
      int fd = mkstemps(name.data(), 4);
      if (fd >= 0) file_ = fdopen(fd, "w");
      path_ = name;
    }
    if (file_ == nullptr && !warned_) {
      std::fprintf(stderr, "kolorun: cannot write %s's messages to %s: %s\n", mpi_name_.c_str(),
                   path_.c_str(), std::strerror(errno));
      warned_ = true;
    }
    return file_ != nullptr;
  }

  std::string dir_, mpi_name_, path_, first_, hydra_said_;
  bool first_is_warning_ = false;
  bool append_;
  FILE* file_ = nullptr;
  int lines_ = 0;
  bool warned_ = false;
};

// Where the job's output goes: whole lines tagged with their rank on the
// console, and per-rank files with --output-filename; the MPI's own lines to
// its log (and the console too with --verbose). kolo-rank's exit markers are
// kept for the final report instead of printed.
class OutputSink {
 public:
  explicit OutputSink(const Job& job)
      : dir_(job.output_dir),
        verbose_(job.verbose),
        append_(job.append_output),
        mpi_log_(job.output_dir, job.append_output, job.mpi_name),
        monitor_(job.monitor),
        progress_(job.progress) {}

  void Write(const std::vector<OutputLine>& lines) {
    if (lines.empty()) return;
    // The status line comes off while whole lines are written, then back.
    if (progress_) progress_->Clear();
    WriteLines(lines);
    if (progress_) progress_->Restore();
  }
  const std::vector<RankExit>& exits() const { return exits_; }
  const MpiLog& mpi_log() const { return mpi_log_; }

 private:
  void WriteLines(const std::vector<OutputLine>& lines) {
    for (const OutputLine& l : lines) {
      RankExit e;
      if (ParseRankExit(l.text, &e)) {
        exits_.push_back(e);
        if (monitor_) monitor_->AddEvent("exit", DescribeRankExit(e, e.host));
        continue;
      }
      if (l.rank < 0) {
        mpi_log_.Write(l.text);
        if (verbose_) std::fprintf(stderr, "[mpirun] %s\n", l.text.c_str());
        continue;
      }
      std::string text = "[" + std::to_string(l.rank) + "]<" + (l.is_stderr ? "stderr" : "stdout") +
                         ">:" + l.text + "\n";
      FILE* stream = l.is_stderr ? stderr : stdout;
      std::fwrite(text.data(), 1, text.size(), stream);
      std::fflush(stream);
      if (!dir_.empty()) WriteFile(l);
    }
  }

  void WriteFile(const OutputLine& l) {
    auto& f = files_[{l.rank, l.is_stderr}];
    if (!f) {
      fs::path dir = fs::path(dir_) / ("rank." + std::to_string(l.rank));
      fs::create_directories(dir);
      f = std::make_unique<std::ofstream>(dir / (l.is_stderr ? "stderr" : "stdout"),
                                          append_ ? std::ios::app : std::ios::out);
    }
    *f << l.text << "\n" << std::flush;
  }

  std::string dir_;
  bool verbose_, append_;
  MpiLog mpi_log_;
  std::map<std::pair<int, bool>, std::unique_ptr<std::ofstream>> files_;
  std::vector<RankExit> exits_;
  Monitor* monitor_;
  ProgressLine* progress_;
};

// mpirun as a child in its own process group, with its stdout and stderr on pipes.
struct Mpirun {
  pid_t pid = -1;
  int out = -1;
  int err = -1;
};

Result<Mpirun> StartMpirun(const std::vector<std::string>& argv,
                           const std::map<std::string, std::string>& env) {
  int out_pipe[2], err_pipe[2];
  if (pipe(out_pipe) != 0 || pipe(err_pipe) != 0) {
    return Status::Internal(std::string("pipe failed: ") + std::strerror(errno));
  }
  pid_t child = fork();
  if (child < 0) return Status::Internal(std::string("fork failed: ") + std::strerror(errno));
  if (child == 0) {
    setpgid(0, 0);  // mpirun and everything it starts here form one group kolorun can kill
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    close(out_pipe[0]);
    close(err_pipe[0]);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> cargv;
    for (const std::string& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
    cargv.push_back(nullptr);
    execvp(cargv[0], cargv.data());
    std::fprintf(stderr, "kolorun: cannot run '%s': %s\n", cargv[0], std::strerror(errno));
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  return Mpirun{child, out_pipe[0], err_pipe[0]};
}

// The bounded teardown: SIGTERM to mpirun once the job must end (mpirun
// then stops the ranks); SIGKILL to mpirun's whole process group when
// something still runs 5 s after that, or holds the output open 2 s after
// mpirun exited; and no more waiting for the output once the group is
// killed and mpirun exited more than 3 s ago.
class Teardown {
 public:
  explicit Teardown(pid_t mpirun) : mpirun_(mpirun) {}

  // Returns false when kolorun should stop reading the output.
  bool Step(bool must_end) {
    if (!reaped_ && waitpid(mpirun_, &status_, WNOHANG) == mpirun_) {
      reaped_ = true;
      mpirun_gone_ = Clock::now();
    }
    if (!killed_ && ((term_sent_ && Clock::now() - term_time_ > std::chrono::seconds(5)) ||
                     (reaped_ && Clock::now() - mpirun_gone_ > std::chrono::seconds(2)))) {
      kill(-mpirun_, SIGKILL);
      killed_ = true;
    }
    if (killed_ && reaped_ && Clock::now() - mpirun_gone_ > std::chrono::seconds(3)) return false;
    if (must_end && !term_sent_) {
      kill(mpirun_, SIGTERM);
      term_sent_ = true;
      term_time_ = Clock::now();
    }
    return true;
  }

  // Whether the teardown had to kill mpirun's process group.
  bool killed() const { return killed_; }

  // mpirun's wait status, once it has exited.
  int Wait() {
    while (!reaped_ && waitpid(mpirun_, &status_, 0) < 0 && errno == EINTR) {
    }
    reaped_ = true;
    return status_;
  }

 private:
  const pid_t mpirun_;
  int status_ = 0;
  bool reaped_ = false, killed_ = false, term_sent_ = false;
  Clock::time_point mpirun_gone_, term_time_;
};

// Reads what is ready on mpirun's pipes into `sink`, closing a pipe at its end.
void ForwardOutput(pollfd (&fds)[2], OutputAssembler& assembler, OutputSink& sink) {
  for (int k = 0; k < 2; ++k) {
    if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP))) continue;
    char buf[65536];
    ssize_t n = read(fds[k].fd, buf, sizeof buf);
    if (n <= 0) {
      close(fds[k].fd);
      fds[k].fd = -1;
      continue;
    }
    sink.Write(assembler.Feed(std::string(buf, static_cast<size_t>(n)), k == 1));
  }
}

// What a rank's failure means and what to do, for the report's one line.
std::string RankFailure(const RankExit& e) {
  const std::string who = "rank " + std::to_string(e.rank) + " on host " + e.host;
  const std::string tag = "[" + std::to_string(e.rank) + "]<stderr>";
  if (e.signal != 0) {
    const char* name = sigabbrev_np(e.signal);
    std::string advice = e.signal == SIGKILL ? "out of memory (see dmesg on " + e.host +
                                                   ") or killed by hand; the job was stopped"
                                             : "see its " + tag + " lines above";
    return who + " was killed by signal " + std::to_string(e.signal) + " (SIG" +
           (name ? name : "?") + "): " + advice;
  }
  if (e.code == 127 || e.code == 126) {
    return who + " exited with code " + std::to_string(e.code) +
           ": the program could not be started there (" + tag + " says why)";
  }
  return who + " exited with code " + std::to_string(e.code) + ": see its " + tag +
         " lines above; the other ranks were stopped";
}

// kolorun's exit code and last line: why kolorun ended the job, else the
// first rank that failed, else mpirun's own status. The line names Open
// MPI's log when Open MPI said anything.
int ReportOutcome(const JobOutcome& o) {
  const std::string logged =
      o.mpi_lines > 0 ? " (" + o.mpi_name + "'s messages: " + o.mpi_log + ")" : std::string();
  if (!o.ended.empty()) return Fail(o.ended + logged);
  // Ranks killed by kolorun's own teardown are not the cause.
  if (o.stop_signal != 0) {
    return Fail(std::string("stopped by ") + strsignal(o.stop_signal) + logged,
                128 + o.stop_signal);
  }
  if (!o.exits.empty()) {
    const RankExit& e = o.exits.front();
    return Fail(RankFailure(e) + logged, RankExitCode(e));
  }
  if (WIFSIGNALED(o.mpirun_status)) {
    return Fail(o.launcher_name + " was killed by signal " +
                    std::to_string(WTERMSIG(o.mpirun_status)) + logged,
                1);
  }
  const int code = WIFEXITED(o.mpirun_status) ? WEXITSTATUS(o.mpirun_status) : 1;
  if (code != 0) {
    std::string says =
        o.mpi_first_line.empty() ? "" : ": " + o.mpi_name + " says \"" + o.mpi_first_line + "\"";
    return Fail(o.launcher_name + " exited with code " + std::to_string(code) +
                    " before any rank reported" + says + logged,
                code);
  }
  if (o.mpi_lines > 0) {
    std::fprintf(stderr, "kolorun: %s wrote %d line(s) to %s\n", o.mpi_name.c_str(), o.mpi_lines,
                 o.mpi_log.c_str());
  }
  return 0;
}

// The hosts none of whose ranks reported an exit.
std::vector<std::string> SilentHosts(const std::vector<std::string>& rank_hosts,
                                     const std::vector<RankExit>& exits) {
  std::vector<std::string> silent;
  for (const std::string& h : rank_hosts) {
    if (std::find(silent.begin(), silent.end(), h) == silent.end()) silent.push_back(h);
  }
  for (const RankExit& e : exits) {
    if (e.rank < 0 || e.rank >= static_cast<int>(rank_hosts.size())) continue;
    silent.erase(std::remove(silent.begin(), silent.end(), rank_hosts[e.rank]), silent.end());
  }
  return silent;
}

}  // namespace

void CatchStopSignals() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

int StopSignal() { return g_signal; }

std::string DescribeRankExit(const RankExit& e, const std::string& host) {
  const std::string who = "rank " + std::to_string(e.rank) + " on host " + host;
  if (e.signal != 0) {
    const char* name = sigabbrev_np(e.signal);
    return who + " was killed by signal " + std::to_string(e.signal) + " (SIG" +
           (name ? name : "?") + ")";
  }
  return who + " exited with code " + std::to_string(e.code);
}

int RankExitCode(const RankExit& e) { return e.signal != 0 ? 128 + e.signal : e.code; }

int Report(const JobOutcome& outcome) { return ReportOutcome(outcome); }

JobOutcome RunJob(const Job& job, RendezvousServer& server, const EachTurn& each_turn) {
  JobOutcome outcome;
  Result<Mpirun> started = StartMpirun(job.mpirun_argv, job.mpirun_env);
  if (!started.ok()) {
    outcome.ended = started.status().message();
    outcome.failure_time = Clock::now();
    return outcome;
  }
  const Mpirun m = started.value();
  CatchStopSignals();

  OutputSink sink(job);
  OutputAssembler assembler(job.tags);
  pollfd fds[2] = {{m.out, POLLIN, 0}, {m.err, POLLIN, 0}};
  Teardown teardown(m.pid);
  std::string ended;  // why kolorun ended the job itself
  const auto start = Clock::now();
  // A rank failed: mpirun aborts the job itself, but cannot when a host is
  // cut off (it waits for that host's daemon). Past kRankFailureGrace the
  // bounded teardown takes over, so kolorun still ends and reports.
  constexpr auto kRankFailureGrace = std::chrono::seconds(10);
  std::optional<Clock::time_point> first_failure;
  bool said_overdue = false;
  bool end_now = false;  // each_turn asked for the end
  while (fds[0].fd >= 0 || fds[1].fd >= 0) {
    if (ended.empty()) {
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      ended = CheckRendezvous(server, job.rank_hosts, elapsed, job.start_timeout);
    }
    end_now = end_now || (each_turn && each_turn(sink.exits()));
    if (job.monitor) job.monitor->Tick();
    if (job.progress) job.progress->Update();
    if (!first_failure && !sink.exits().empty()) first_failure = Clock::now();
    const bool failed = !job.ranks_may_fail && first_failure.has_value();
    const bool overdue =
        failed && !job.end_on_rank_failure && Clock::now() - *first_failure > kRankFailureGrace;
    if (overdue && !said_overdue) {
      said_overdue = true;
      std::fprintf(stderr, "kolorun: %s\n",
                   Unreported(job.rank_hosts, sink.exits(), job.mpi_name).c_str());
      outcome.silent_hosts = SilentHosts(job.rank_hosts, sink.exits());
    }
    const bool end = overdue || (failed && job.end_on_rank_failure);
    if (!teardown.Step(g_signal != 0 || !ended.empty() || end || end_now)) break;
    if (poll(fds, 2, 200) < 0 && errno != EINTR) break;
    ForwardOutput(fds, assembler, sink);
  }
  sink.Write(assembler.Flush());
  if (job.progress) job.progress->Clear();  // kolorun's report is the last line
  if (job.end_on_rank_failure && first_failure && teardown.killed()) {
    // The launcher did not end within the teardown's bound after kolorun ended
    // the job for a rank's failure: the hosts whose ranks never reported back
    // are the ones it waited for (mpirun's own grace above does it otherwise).
    outcome.silent_hosts = SilentHosts(job.rank_hosts, sink.exits());
  }
  outcome.mpirun_status = teardown.Wait();
  outcome.ended = ended;
  outcome.stop_signal = g_signal;
  outcome.exits = sink.exits();
  outcome.failure_time = first_failure.value_or(Clock::now());
  outcome.mpi_log = sink.mpi_log().path();
  outcome.mpi_first_line = sink.mpi_log().first_line();
  outcome.mpi_lines = sink.mpi_log().lines();
  outcome.mpi_name = job.mpi_name;
  outcome.launcher_name = job.launcher_name;
  return outcome;
}

}  // namespace kolo::launcher
