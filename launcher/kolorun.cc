// kolorun: turns -np / -H / --hostfile / a scheduler allocation into one
// mpirun command line, checks the hosts first, starts every rank through
// kolo-rank, prints each rank's output as whole tagged lines, and ends with
// which rank failed, where and how.
#include <mpi.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "command.h"
#include "hosts.h"
#include "kolo/env_names.h"
#include "output.h"
#include "preflight.h"
#include "rendezvous.h"

extern char** environ;

namespace kolo::launcher {
namespace {

namespace fs = std::filesystem;

struct Options {
  int np = 0;
  std::string hosts, hostfile;
  int ssh_port = 0;
  std::string ssh_identity_file;
  double start_timeout = 30;
  bool start_timeout_given = false;  // else HOROVOD_START_TIMEOUT, as horovodrun reads it
  std::vector<std::string> network_interfaces, env_vars;
  std::string mpi_args, binding = "none";
  double fusion_threshold_mb = -1, cycle_time_ms = -1, stall_warning = -1, stall_shutdown = -1;
  int cache_capacity = -1;
  bool hierarchical = false, timeline_mark_cycles = false, no_stall_check = false;
  std::string timeline, log_level, output_dir;
  bool verbose = false, dry_run = false, check_build = false, pin_gpus = false;
  std::vector<std::string> command;
};

int Fail(const std::string& message, int code = 2) {
  std::cerr << "kolorun: " << message << "\n";
  return code;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    return Status::InvalidArgument("cannot read '" + path + "': " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::map<std::string, std::string> Environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  return env;
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The KOLO_* settings that kolorun's flags ask for.
std::map<std::string, std::string> RuntimeSettings(const Options& o) {
  std::map<std::string, std::string> s;
  if (o.fusion_threshold_mb >= 0) {
    s[env::kFusionThreshold] =
        std::to_string(static_cast<int64_t>(o.fusion_threshold_mb * 1048576));
  }
  if (o.cycle_time_ms >= 0) s[env::kCycleTime] = Num(o.cycle_time_ms);
  if (o.cache_capacity >= 0) s[env::kCacheCapacity] = std::to_string(o.cache_capacity);
  if (o.hierarchical) s[env::kHierarchicalAllreduce] = "1";
  if (!o.timeline.empty()) s[env::kTimeline] = o.timeline;
  if (o.timeline_mark_cycles) s[env::kTimelineMarkCycles] = "1";
  if (o.no_stall_check) s[env::kStallCheckDisable] = "1";
  if (o.stall_warning >= 0) s[env::kStallCheckTime] = Num(o.stall_warning);
  if (o.stall_shutdown >= 0) s[env::kStallShutdownTime] = Num(o.stall_shutdown);
  // horovodrun's FATAL: nothing below kolo's highest level.
  if (!o.log_level.empty()) s[env::kLogLevel] = o.log_level == "fatal" ? "error" : o.log_level;
  if (o.pin_gpus) s[env::kPinGpus] = "1";
  return s;
}

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof a;
  int port = 29500;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    port = ntohs(a.sin_port);
  }
  if (fd >= 0) close(fd);
  return port;
}

// The directory holding this executable (kolo-rank lives beside kolorun).
std::string SelfDir() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

std::string Capture(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return out;
  char buf[256];
  while (fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

int CheckBuild() {
  char mpi[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  MPI_Get_library_version(mpi, &len);
  std::string mpi_line(mpi, static_cast<size_t>(len));
  mpi_line = mpi_line.substr(0, mpi_line.find_first_of(",\n"));
  const char* python = std::getenv("KOLO_PYTHON") ? std::getenv("KOLO_PYTHON") : "/usr/bin/python3";
  std::string torch =
      Capture(std::string(python) + " -c 'import torch; print(torch.__version__)' 2>/dev/null");
  std::string binding =
      Capture(std::string(python) + " -c 'import kolo; print(\"yes\")' 2>/dev/null");
  std::printf("kolo %s build:\n", KOLO_VERSION);
  std::printf("  %-16s %s\n", "MPI", mpi_line.c_str());
  std::printf("  %-16s %s\n", "CUDA / NCCL",
              KOLO_CUDA_FOUND ? "yes (NCCL collectives on CUDA tensors)" : "no (built without)");
  std::printf("  %-16s %s\n", "Python binding", binding == "yes" ? "yes" : "no");
  std::printf("  %-16s %s\n", "PyTorch", torch.empty() ? "not found" : torch.c_str());
  return 0;
}

volatile sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }

// Runs mpirun, prints whole lines per rank, returns kolorun's exit code.
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

// Where the job's output goes: whole lines tagged with their rank on the
// console, and per-rank files with --output-filename. kolo-rank's exit
// markers are kept for the final report instead of printed.
class OutputSink {
 public:
  explicit OutputSink(std::string dir) : dir_(std::move(dir)) {}

  void Write(const std::vector<OutputLine>& lines) {
    for (const OutputLine& l : lines) {
      RankExit e;
      if (ParseRankExit(l.text, &e)) {
        exits_.push_back(e);
        continue;
      }
      std::string text = l.rank < 0 ? l.text
                                    : "[" + std::to_string(l.rank) + "]<" +
                                          (l.is_stderr ? "stderr" : "stdout") + ">:" + l.text;
      text += "\n";
      FILE* stream = l.is_stderr ? stderr : stdout;
      std::fwrite(text.data(), 1, text.size(), stream);
      std::fflush(stream);
      if (!dir_.empty() && l.rank >= 0) WriteFile(l);
    }
  }
  const std::vector<RankExit>& exits() const { return exits_; }

 private:
  void WriteFile(const OutputLine& l) {
    auto& f = files_[{l.rank, l.is_stderr}];
    if (!f) {
      fs::path dir = fs::path(dir_) / ("rank." + std::to_string(l.rank));
      fs::create_directories(dir);
      f = std::make_unique<std::ofstream>(dir / (l.is_stderr ? "stderr" : "stdout"));
    }
    *f << l.text << "\n" << std::flush;
  }

  std::string dir_;
  std::map<std::pair<int, bool>, std::unique_ptr<std::ofstream>> files_;
  std::vector<RankExit> exits_;
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

// kolorun's exit code and last line: why kolorun ended the job, else the
// first rank that failed, else mpirun's own status.
int Report(const std::string& ended, const std::vector<RankExit>& exits, int mpirun_status) {
  if (!ended.empty()) return Fail(ended);
  // Ranks killed by kolorun's own teardown are not the cause.
  if (g_signal != 0) return Fail(std::string("stopped by ") + strsignal(g_signal), 128 + g_signal);
  if (!exits.empty()) {
    const RankExit& e = exits.front();
    if (e.signal != 0) {
      const char* name = sigabbrev_np(e.signal);
      std::fprintf(stderr, "kolorun: rank %d on host %s was killed by signal %d (SIG%s)\n", e.rank,
                   e.host.c_str(), e.signal, name ? name : "?");
      return 128 + e.signal;
    }
    std::fprintf(stderr, "kolorun: rank %d on host %s exited with code %d\n", e.rank,
                 e.host.c_str(), e.code);
    return e.code;
  }
  if (WIFSIGNALED(mpirun_status)) {
    return Fail("mpirun was killed by signal " + std::to_string(WTERMSIG(mpirun_status)), 1);
  }
  int code = WIFEXITED(mpirun_status) ? WEXITSTATUS(mpirun_status) : 1;
  if (code != 0) return Fail("mpirun exited with code " + std::to_string(code), code);
  return 0;
}

// Runs mpirun, prints its output as whole lines per rank, watches the
// rendezvous, and tears the job down (boundedly) when it must end.
int Supervise(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env,
              const Options& o, RendezvousServer& server,
              const std::vector<std::string>& rank_hosts) {
  Result<Mpirun> started = StartMpirun(argv, env);
  if (!started.ok()) return Fail(started.status().message());
  const Mpirun m = started.value();
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);

  using Clock = std::chrono::steady_clock;
  OutputSink sink(o.output_dir);
  OutputAssembler assembler;
  pollfd fds[2] = {{m.out, POLLIN, 0}, {m.err, POLLIN, 0}};
  int open_pipes = 2, status = 0;
  std::string ended;  // why kolorun ended the job itself
  const auto start = Clock::now();
  Clock::time_point term_sent, mpirun_gone;
  bool forwarded = false, killed = false, reaped = false;
  while (open_pipes > 0) {
    // Teardown is bounded: whatever still runs 5 s after SIGTERM, or holds the
    // output open 2 s after mpirun exited, is killed with the whole group.
    if (!reaped && waitpid(m.pid, &status, WNOHANG) == m.pid) {
      reaped = true;
      mpirun_gone = Clock::now();
    }
    if (!killed && ((forwarded && Clock::now() - term_sent > std::chrono::seconds(5)) ||
                    (reaped && Clock::now() - mpirun_gone > std::chrono::seconds(2)))) {
      kill(-m.pid, SIGKILL);
      killed = true;
    }
    if (killed && reaped && Clock::now() - mpirun_gone > std::chrono::seconds(3)) break;
    if (ended.empty()) {
      double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      ended = CheckRendezvous(server, rank_hosts, elapsed, o.start_timeout);
    }
    if ((g_signal != 0 || !ended.empty()) && !forwarded) {
      kill(m.pid, SIGTERM);  // mpirun tears the ranks down
      forwarded = true;
      term_sent = Clock::now();
    }
    if (poll(fds, 2, 200) < 0 && errno != EINTR) break;
    for (int k = 0; k < 2; ++k) {
      if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP))) continue;
      char buf[65536];
      ssize_t n = read(fds[k].fd, buf, sizeof buf);
      if (n <= 0) {
        close(fds[k].fd);
        fds[k].fd = -1;
        --open_pipes;
        continue;
      }
      sink.Write(assembler.Feed(std::string(buf, static_cast<size_t>(n)), k == 1));
    }
  }
  sink.Write(assembler.Flush());
  while (!reaped && waitpid(m.pid, &status, 0) < 0 && errno == EINTR) {
  }
  return Report(ended, sink.exits(), status);
}

// The hosts that get ranks, with the ranks they get; sets o.np when it was 0.
Result<std::vector<HostSlots>> ChooseHosts(Options& o,
                                           const std::map<std::string, std::string>& environment,
                                           int cores) {
  Result<Allocation> alloc = ResolveHosts(o.hosts, o.hostfile, environment, o.np, cores, ReadFile);
  if (!alloc.ok()) return alloc.status();
  const std::vector<HostSlots>& hosts = alloc.value().hosts;
  const std::string& source = alloc.value().source;
  const int slots = TotalSlots(hosts);
  if (slots > kMaxSlots) {
    return Status::InvalidArgument(source + " provides more than " + std::to_string(kMaxSlots) +
                                   " slots; check the slot counts");
  }
  if (o.np == 0) o.np = slots;
  if (o.np > slots) {
    return Status::InvalidArgument("-np " + std::to_string(o.np) +
                                   " asks for more ranks than the " + std::to_string(slots) +
                                   " slots that " + source + " provides; lower -np or add slots");
  }
  std::vector<HostSlots> used;
  for (int h : MapBySlot(hosts, o.np)) {
    if (used.empty() || used.back().host != hosts[h].host) used.push_back({hosts[h].host, 0});
    ++used.back().slots;
  }
  if (o.verbose)
    std::cerr << "kolorun: hosts from " << source << ": " << FormatHostSpec(used) << "\n";
  return used;
}

// Applies -x VAR / -x VAR=VALUE to `child_env`; returns the names to forward.
Result<std::vector<std::string>> UserVariables(
    const std::vector<std::string>& specs, const std::map<std::string, std::string>& environment,
    std::map<std::string, std::string>* child_env) {
  std::vector<std::string> names;
  for (const std::string& x : specs) {
    size_t eq = x.find('=');
    std::string name = x.substr(0, eq);
    if (name.empty()) return Status::InvalidArgument("-x '" + x + "': expected VAR or VAR=VALUE");
    if (eq != std::string::npos) {
      (*child_env)[name] = x.substr(eq + 1);
    } else if (!environment.count(name)) {
      return Status::InvalidArgument("-x " + name + ": " + name +
                                     " is not set in kolorun's environment");
    }
    names.push_back(name);
  }
  return names;
}

int Run(Options& o) {
  if (o.check_build) return CheckBuild();
  if (o.command.empty()) {
    return Fail("no command to run; usage: kolorun -np N [options] command ...");
  }
  const std::map<std::string, std::string> environment = Environment();
  if (!o.start_timeout_given && environment.count("HOROVOD_START_TIMEOUT")) {
    const std::string& text = environment.at("HOROVOD_START_TIMEOUT");
    char* end = nullptr;
    o.start_timeout = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0' || !(o.start_timeout > 0)) {
      return Fail("HOROVOD_START_TIMEOUT='" + text + "' is not a positive number of seconds");
    }
  }
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  Result<std::vector<HostSlots>> chosen = ChooseHosts(o, environment, cores);
  if (!chosen.ok()) return Fail(chosen.status().message());
  const std::vector<HostSlots> used = chosen.value();
  // A custom remote agent (qrsh, a test stand-in) is not ssh: no ssh probe then.
  const bool custom_agent = o.mpi_args.find("plm_rsh_agent") != std::string::npos;
  if (!o.dry_run && !custom_agent) {
    Status s = CheckHosts(used, o.ssh_port, o.start_timeout);
    if (!s.ok()) return Fail(s.message());
  }
  LaunchPlan plan;
  plan.np = o.np;
  plan.hosts = used;
  plan.as_root = geteuid() == 0;
  for (const HostSlots& h : used) plan.oversubscribe |= IsLocalHost(h.host) && h.slots > cores;
  plan.binding = o.binding;
  plan.ssh_port = o.ssh_port;
  plan.ssh_identity_file = o.ssh_identity_file;
  plan.network_interfaces = o.network_interfaces;
  Result<std::vector<std::string>> extra = SplitArgs(o.mpi_args);
  if (!extra.ok()) return Fail(extra.status().message());
  plan.extra_mpi_args = extra.value();
  plan.rank_exec = (fs::path(SelfDir()) / "kolo-rank").string();
  plan.command = o.command;

  // The variables each rank gets: settings, rendezvous data, the user's -x.
  std::map<std::string, std::string> child_env = RuntimeSettings(o);
  const std::string& master = used.front().host;
  child_env["MASTER_ADDR"] = master == "localhost" ? "127.0.0.1" : master;
  child_env["MASTER_PORT"] = std::to_string(FreePort());
  child_env[env::kLaunchHosts] = FormatHostSpec(used);
  if (!o.network_interfaces.empty()) child_env["NCCL_SOCKET_IFNAME"] = o.network_interfaces.front();
  // The rendezvous listens on loopback when every host is this machine or a
  // loopback address, otherwise on all interfaces under this host's name.
  bool all_loopback = true;
  for (const HostSlots& h : used) {
    all_loopback &= IsLocalHost(h.host) || h.host.rfind("127.", 0) == 0;
  }
  const std::string token = NewToken();
  RendezvousServer server(token, o.np);
  if (!o.dry_run) {
    Result<int> port = server.Start(all_loopback ? "127.0.0.1" : "0.0.0.0");
    if (!port.ok()) return Fail(port.status().message());
    char name[256] = {0};
    gethostname(name, sizeof name - 1);
    child_env[env::kRendezvous] = (all_loopback ? std::string("127.0.0.1") : std::string(name)) +
                                  ":" + std::to_string(port.value());
  }
  Result<std::vector<std::string>> user_names = UserVariables(o.env_vars, environment, &child_env);
  if (!user_names.ok()) return Fail(user_names.status().message());
  std::map<std::string, std::string> merged = environment;
  for (const auto& [k, v] : child_env) merged[k] = v;
  for (const std::string& name : ForwardedNames(merged, user_names.value())) {
    plan.env[name] = merged[name];
  }
  for (const auto& [k, v] : child_env) plan.env[k] = v;
  // The token goes to the ranks but is never printed.
  std::map<std::string, std::string> launch_env = child_env;
  if (!o.dry_run) launch_env[env::kToken] = plan.env[env::kToken] = token;
  std::vector<std::string> argv = BuildMpirunCommand(plan);
  if (o.dry_run || o.verbose) {
    std::string vars;
    for (const auto& [k, v] : child_env) vars += k + "=" + ShellQuote({v}) + " ";
    std::cout << vars << ShellQuote(argv) << std::endl;
    if (o.dry_run) return 0;
  }
  std::vector<std::string> rank_hosts;
  for (int h : MapBySlot(used, o.np)) rank_hosts.push_back(used[h].host);
  return Supervise(argv, launch_env, o, server, rank_hosts);
}

}  // namespace
}  // namespace kolo::launcher

int main(int argc, char** argv) {
  using kolo::launcher::Options;
  Options o;
  CLI::App app{
      "kolorun: launch a kolo job on N ranks across hosts.\n"
      "usage: kolorun [options] [--] command args...",
      "kolorun"};
  app.footer(
      "Examples:\n"
      "  kolorun -np 4 python train.py                    4 ranks on this machine\n"
      "  kolorun -np 8 -H node1:4,node2:4 python train.py  two hosts\n"
      "  kolorun --hostfile hosts.txt python train.py      every slot of the hostfile\n"
      "  kolorun python train.py                           inside a Slurm/PBS/SGE/LSF allocation\n"
      "  kolorun -np 2 --dry-run python train.py           print the mpirun command only");
  app.set_version_flag("--version", std::string("kolorun ") + KOLO_VERSION);
  app.add_option("--np", o.np, "Number of ranks (default: all slots)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-H,--hosts", o.hosts, "Hosts and slots: host1:2,host2:2");
  app.add_option("--hostfile", o.hostfile, "File of 'host slots=N' lines");
  app.add_option("-p,--ssh-port", o.ssh_port, "ssh port of the remote hosts")
      ->check(CLI::Range(1, 65535));
  app.add_option("-i,--ssh-identity-file", o.ssh_identity_file, "ssh identity file");
  app.add_option("--start-timeout", o.start_timeout,
                 "Seconds to wait for hosts and ranks (default 30, or HOROVOD_START_TIMEOUT)")
      ->check(CLI::PositiveNumber);
  app.add_option("--network-interface", o.network_interfaces, "NIC for MPI and NCCL (repeatable)")
      ->allow_extra_args(false);
  app.add_option("-x", o.env_vars, "Pass VAR (or set VAR=VALUE) for every rank (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--mpi-args", o.mpi_args, "Extra arguments for mpirun");
  app.add_option("--binding", o.binding, "mpirun --bind-to value (default none)")
      ->check(CLI::IsMember({"none", "core", "socket", "numa", "hwthread"}));
  app.add_option("--fusion-threshold-mb", o.fusion_threshold_mb, "KOLO_FUSION_THRESHOLD in MiB")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cycle-time-ms", o.cycle_time_ms, "KOLO_CYCLE_TIME")->check(CLI::PositiveNumber);
  app.add_option("--cache-capacity", o.cache_capacity, "KOLO_CACHE_CAPACITY")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--hierarchical-allreduce", o.hierarchical, "KOLO_HIERARCHICAL_ALLREDUCE=1");
  app.add_flag("--pin-gpus", o.pin_gpus,
               "One GPU per local rank: each rank's CUDA_VISIBLE_DEVICES keeps its LOCAL_RANK-th "
               "GPU (of the list it had, else device LOCAL_RANK), seen as cuda:0");
  app.add_option("--timeline-filename", o.timeline, "KOLO_TIMELINE");
  app.add_flag("--timeline-mark-cycles", o.timeline_mark_cycles, "KOLO_TIMELINE_MARK_CYCLES=1");
  app.add_flag("--no-stall-check", o.no_stall_check, "KOLO_STALL_CHECK_DISABLE=1");
  app.add_option("--stall-check-warning-time-seconds", o.stall_warning,
                 "KOLO_STALL_CHECK_TIME_SECONDS")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stall-check-shutdown-time-seconds", o.stall_shutdown,
                 "KOLO_STALL_SHUTDOWN_TIME_SECONDS")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-level", o.log_level, "KOLO_LOG_LEVEL (any case; FATAL = error)")
      ->transform(
          CLI::IsMember({"trace", "debug", "info", "warning", "error", "fatal"}, CLI::ignore_case));
  app.add_option("--output-filename", o.output_dir, "Also write each rank's output to DIR/rank.N/");
  app.add_flag("--verbose", o.verbose, "Say where hosts came from and the command run");
  app.add_flag("--dry-run", o.dry_run, "Print the mpirun command and run nothing");
  app.add_flag("--check-build", o.check_build, "Show what this build has, then exit");
  // The first positional argument starts the program's command line.
  app.prefix_command();
  // horovodrun's flags: renamed to kolorun's, ignored with a note, or refused
  // before anything starts (launcher/command.cc, HorovodrunFlags()).
  std::set<std::string> value_options;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_items_expected_min() == 0) continue;  // a flag
    for (const std::string& n : opt->get_lnames()) value_options.insert("--" + n);
    for (const std::string& n : opt->get_snames()) value_options.insert("-" + n);
  }
  kolo::Result<kolo::launcher::TranslatedArgs> translated = kolo::launcher::TranslateHorovodrunArgs(
      std::vector<std::string>(argv + 1, argv + argc), value_options);
  if (!translated.ok()) return kolo::launcher::Fail(translated.status().message());
  for (const std::string& note : translated.value().notes) std::cerr << "kolorun: " << note << "\n";
  std::vector<std::string> args = translated.value().args;
  std::reverse(args.begin(), args.end());
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.start_timeout_given = app.count("--start-timeout") > 0;
  // prefix_command(): everything after the program's name belongs to it.
  for (const std::string& a : app.remaining()) o.command.push_back(a);
  if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  return kolo::launcher::Run(o);
}
