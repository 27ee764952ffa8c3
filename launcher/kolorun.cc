// kolorun: turns -np / -H / --hostfile / a scheduler allocation into one
// mpirun command line, checks the hosts first, starts every rank through
// kolo-rank, prints each rank's output as whole tagged lines, and ends with
// which rank failed, where and how.
//
// This file plans the launch; options.cc reads the command line,
// supervise.cc runs the job, elastic.cc runs an elastic job's incarnations
// (each planned here), check_build.cc answers --check-build.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include "bind_shim.h"
#include "check_build.h"
#include "cloud_hosts.h"
#include "command.h"
#include "discovery.h"
#include "elastic.h"
#include "hosts.h"
#include "hydra_command.h"
#include "job_mpi.h"
#include "kolo/env_names.h"
#include "kolo/launch_settings.h"
#include "monitor.h"
#include "mpi_choice.h"
#include "options.h"
#include "preflight.h"
#include "program_check.h"
#include "progress_line.h"
#include "prrte_shim.h"
#include "rendezvous.h"
#include "supervise.h"

extern char** environ;

namespace kolo::launcher {
namespace {

namespace fs = std::filesystem;

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) {
    return Status::InvalidArgument("cannot read '" + path + "': " + std::strerror(errno));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Variables Environment() {
  Variables env;
  for (char** e = environ; *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  return env;
}

std::string JoinComma(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ",") + w;
  return out;
}

// `count` distinct ports that are free on this machine now (29500 and up
// where the system gives none): every socket stays bound until all are chosen.
std::vector<int> FreePorts(int count) {
  std::vector<int> fds;
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof a;
    int port = 29500 + i;
    if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
      port = ntohs(a.sin_port);
    }
    if (fd >= 0) fds.push_back(fd);
    ports.push_back(port);
  }
  for (int fd : fds) close(fd);
  return ports;
}

// kolorun --check-build asks the interpreter that KOLO_PYTHON names, read
// through the runtime's settings table like every KOLO_* variable. Unset, it
// asks the python3 beside kolorun when there is one (kolorun installed into a
// virtual environment: .venv/bin/kolorun asks .venv/bin/python3), otherwise the
// default, the interpreter that the build tree's kolo package is built for.
int RunCheckBuild(const Options& o, const Variables& environment) {
  Result<LaunchSettings> settings = ReadLaunchSettings();
  if (!settings.ok()) return Fail(settings.status().message());
  Result<JobMpi> mpi = FindJobMpi(o.mpi, environment);
  const std::string mpi_line =
      mpi.ok() ? DescribeJobMpi(mpi.value()) : "none usable: " + mpi.status().message();
  if (!settings.value().python.empty() && settings.value().python_given) {
    return CheckBuild(settings.value().python, "from KOLO_PYTHON", mpi_line);
  }
  const std::string beside = SelfDir() + "/python3";
  if (access(beside.c_str(), X_OK) == 0) {
    return CheckBuild(beside, "beside kolorun (KOLO_PYTHON is unset)", mpi_line);
  }
  return CheckBuild(DefaultLaunchSettings().python, "the default (KOLO_PYTHON is unset)", mpi_line);
}

// The hosts that get ranks, with the ranks they get; sets o.np when it was 0.
Result<std::vector<HostSlots>> ChooseHosts(Options& o, const Variables& environment, int cores) {
  Result<Allocation> alloc = ResolveHosts(o.hosts, o.hostfile, environment, o.np, cores, ReadFile);
  if (!alloc.ok()) return alloc.status();
  Result<std::vector<HostSlots>> used = PlaceRanks(alloc.value(), o.np);
  if (!used.ok()) return used.status();
  o.np = TotalSlots(used.value());
  if (o.verbose) {
    std::cerr << "kolorun: hosts from " << alloc.value().source << ": "
              << FormatHostSpec(used.value()) << "\n";
  }
  return used;
}

// Applies -x VAR / -x VAR=VALUE to `child_env`; returns the names to forward.
Result<std::vector<std::string>> UserVariables(const std::vector<std::string>& specs,
                                               const Variables& environment, Variables* child_env) {
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

// A shim beside kolorun (build tree, or an installed bin/), or "".
std::string ShimBesideKolorun(const char* name) {
  const std::string path = SelfDir() + "/" + name;
  return access(path.c_str(), R_OK) == 0 ? path : "";
}

// Where the job's traffic goes when it spans hosts: --network-interface,
// else the interfaces that reach the other hosts; and the local address
// there, for the rendezvous. Nothing for a job on this machine alone.
Result<JobNetwork> ChooseNetwork(Options& o, const std::vector<HostSlots>& used) {
  JobNetwork net;
  if (std::all_of(used.begin(), used.end(), [](const HostSlots& h) { return IsLocalHost(h.host); }))
    return net;
  if (o.network_interfaces.empty()) {
    Result<JobNetwork> found = NetworkReaching(used);
    if (!found.ok() && o.dry_run) return net;  // --dry-run needs no network
    if (!found.ok()) return found.status();
    net = found.value();
    // By network, not by name: another host's interface may be called otherwise.
    o.network_interfaces =
        net.subnets.size() == net.interfaces.size() ? net.subnets : net.interfaces;
    if (o.verbose && !net.interfaces.empty()) {
      std::cerr << "kolorun: the other hosts are reached through " << net.interfaces.front() << " ("
                << net.address << ")\n";
    }
    return net;
  }
  net.interfaces = o.network_interfaces;
  Result<std::string> address = InterfaceAddress(o.network_interfaces.front());
  if (!address.ok() && !o.dry_run) return address.status();
  if (address.ok()) net.address = address.value();
  return net;
}

// The mpirun command's plan, without its variables.
Result<LaunchPlan> PlanLaunch(const Options& o, const std::vector<HostSlots>& used, int cores,
                              const JobMpi& mpi, const Variables& environment) {
  LaunchPlan plan;
  // From PATH: by name, as every kolorun before chose it (execvp finds the same one).
  const bool by_name = mpi.choice.on_path && mpi.identity.launcher == mpi.choice.mpirun;
  plan.mpirun = by_name ? "mpirun" : mpi.identity.launcher;
  plan.dialect = mpi.identity.version.dialect;
  plan.family = mpi.identity.version.family;
  auto agent = environment.find("OMPI_MCA_plm_rsh_agent");
  if (agent != environment.end()) plan.rsh_agent_variable = agent->second;
  plan.np = o.np;
  plan.hosts = used;
  plan.as_root = geteuid() == 0;
  for (const HostSlots& h : used) plan.oversubscribe |= IsLocalHost(h.host) && h.slots > cores;
  plan.binding = o.binding;
  plan.ssh_port = o.ssh_port;
  plan.ssh_identity_file = o.ssh_identity_file;
  plan.network_interfaces = o.network_interfaces;
  plan.single_host =
      std::all_of(used.begin(), used.end(), [](const HostSlots& h) { return IsLocalHost(h.host); });
  plan.bind_library = ShimBesideKolorun(kBindLibraryName);
  plan.prrte_library = ShimBesideKolorun(kPrrteLibraryName);
  Result<std::vector<std::string>> extra = SplitArgs(o.mpi_args);
  if (!extra.ok()) return extra.status();
  plan.extra_mpi_args = extra.value();
  plan.rank_exec = (fs::path(SelfDir()) / "kolo-rank").string();
  plan.command = o.command;
  return plan;
}

// The variables kolorun sets for each rank: the settings its flags ask
// for, where the rendezvous and the job's first host are, and where
// torch.distributed's store and JAX's coordinator listen (rank 0's host,
// two ports of their own, so that one job may use both).
Variables RankVariables(const Options& o, const std::vector<HostSlots>& used) {
  Variables child_env = RuntimeSettings(o);
  char name[256] = {0};
  gethostname(name, sizeof name - 1);
  const std::string master = FirstHostAddress(used, name);
  const std::vector<int> ports = FreePorts(2);
  child_env["MASTER_ADDR"] = master;
  child_env["MASTER_PORT"] = std::to_string(ports[0]);
  child_env["JAX_COORDINATOR_ADDRESS"] = JoinHostPort(master, ports[1]);
  child_env[env::kLaunchHosts] = FormatHostSpec(used);
  // NCCL takes interface names only; a network found by kolorun is left to NCCL's own choice.
  if (!o.network_interfaces.empty() &&
      o.network_interfaces.front().find('/') == std::string::npos) {
    child_env["NCCL_SOCKET_IFNAME"] = o.network_interfaces.front();
  }
  return child_env;
}

// Starts the rendezvous and returns the "address:port" that ranks reach it
// at: loopback when every host is this machine or a loopback address,
// otherwise the job's address (`network.address`): never every interface.
Result<std::string> StartRendezvous(RendezvousServer& server, const std::vector<HostSlots>& used,
                                    const JobNetwork& network) {
  bool all_loopback = true;
  for (const HostSlots& h : used) {
    all_loopback &= IsLocalHost(h.host) || h.host.rfind("127.", 0) == 0;
  }
  std::string address = all_loopback ? "127.0.0.1" : network.address;
  if (address.empty()) {
    return Status::InvalidArgument(
        "cannot tell which of this machine's interfaces reaches the other hosts; name it with "
        "--network-interface");
  }
  Result<int> port = server.Start(address);
  if (!port.ok()) return port.status();
  return address + ":" + std::to_string(port.value());
}

// The variables mpirun itself starts with: the PRRTE shim preloaded where kolo
// spawns, the bind shim with the interfaces it may listen on (loopback for a
// job on this machine alone) where the runtime lives on the job's network.
// Neither reaches the ranks (each takes itself out of their environment).
void MpirunPreloads(const LaunchPlan& plan, const Variables& environment, Variables* mpirun_env) {
  std::string preload = PreloadsPrrteShim(plan) ? plan.prrte_library : "";
  const std::string nics = plan.single_host ? "lo" : JoinComma(plan.network_interfaces);
  if (!plan.bind_library.empty() && RuntimeOnJobNetwork(plan) && !nics.empty()) {
    preload += (preload.empty() ? "" : ":") + plan.bind_library;
    (*mpirun_env)[kBindInterfaces] = nics;
  }
  if (preload.empty()) return;
  auto own = environment.find("LD_PRELOAD");
  if (own != environment.end() && !own->second.empty()) preload += ":" + own->second;
  (*mpirun_env)["LD_PRELOAD"] = preload;
}

// What kolo-rank will start on every host, found the way it will look.
ProgramCheck ProgramsToCheck(const LaunchPlan& plan) {
  ProgramCheck check;
  check.rank_exec = plan.rank_exec;
  check.program = plan.command.front();
  auto path = plan.env.find("PATH");
  check.path = path != plan.env.end() ? path->second : "/bin:/usr/bin";  // execvp's default
  std::error_code ec;
  check.cwd = fs::current_path(ec).string();
  return check;
}

// The remote agent named in the environment, in the variable this MPI reads.
std::string AgentVariable(const LaunchPlan& plan, const Variables& environment) {
  const char* name = plan.dialect != MpiDialect::kHydra    ? "OMPI_MCA_plm_rsh_agent"
                     : plan.family == MpiFamily::kIntelMpi ? "I_MPI_HYDRA_BOOTSTRAP_EXEC"
                                                           : "HYDRA_LAUNCHER_EXEC";
  auto agent = environment.find(name);
  return agent == environment.end() ? "" : agent->second;
}

RemoteShell Shell(const Options& o, const LaunchPlan& plan, const Variables& environment) {
  return {RemoteAgent(plan.extra_mpi_args, AgentVariable(plan, environment)), o.ssh_port,
          o.ssh_identity_file};
}

// What stays the same for every mpirun job of one kolorun run.
struct Launcher {
  Options& o;
  const Variables& environment;
  int cores;
  RendezvousServer& server;
  const std::string& token;
  const std::vector<std::string> given_interfaces;  // --network-interface, as given
  const JobMpi mpi;                                 // the mpirun and its dialect
  std::string rendezvous;                           // "address:port", once started
  std::set<std::string> checked;                    // hosts already checked
  Monitor* monitor = nullptr;        // --monitor or the status line: the ranks report to it
  ProgressLine* progress = nullptr;  // the terminal's status line
};

struct PlannedJob {
  Job job;
  std::string shown;  // what --dry-run and --verbose print: the variables and the command
};

// The hosts of `used` not checked before.
std::vector<HostSlots> Unchecked(const Launcher& l, const std::vector<HostSlots>& used) {
  std::vector<HostSlots> fresh;
  for (const HostSlots& h : used) {
    if (!l.checked.count(h.host)) fresh.push_back(h);
  }
  return fresh;
}

// Before planning: the new hosts' ssh ports. A custom remote agent (qrsh, a
// test stand-in) is not ssh: no ssh probe then.
Status CheckSsh(const Launcher& l, const std::vector<HostSlots>& fresh) {
  const bool custom_agent = l.o.mpi_args.find("plm_rsh_agent") != std::string::npos ||
                            l.o.mpi_args.find("plm_ssh_agent") != std::string::npos ||
                            l.o.mpi_args.find("-launcher-exec") != std::string::npos ||
                            l.o.mpi_args.find("-bootstrap-exec") != std::string::npos;
  if (fresh.empty() || l.o.dry_run || custom_agent) return Status::OK();
  return CheckHosts(fresh, l.o.ssh_port, l.o.start_timeout, std::max(l.o.ssh_wait, 0.0),
                    [](const std::string& line) { std::cerr << "kolorun: " << line << std::endl; });
}

// After planning: the programs that kolo-rank will start on the new hosts.
Status CheckProgramsOn(Launcher& l, const LaunchPlan& plan, const std::vector<HostSlots>& fresh) {
  if (fresh.empty() || l.o.dry_run) return Status::OK();
  std::vector<std::string> problems = CheckPrograms(
      fresh, ProgramsToCheck(plan), Shell(l.o, plan, l.environment), l.o.start_timeout);
  if (!problems.empty()) {
    std::string all;
    for (const std::string& p : problems) all += (all.empty() ? "" : "\nkolorun: ") + p;
    return Status::InvalidArgument(all);
  }
  for (const HostSlots& h : fresh) l.checked.insert(h.host);
  return Status::OK();
}

// The variables a rank gets for kolorun's flags (RankVariables) and for the
// MPI it runs on: an MPI named by --mpi-home or found beside kolorun is the
// one the ranks' kolo package loads too (kolo/_mpi_library.py), whatever the
// ranks' PATH says; Hydra's ranks get what hydra_command.h says.
Variables MpiVariables(const Launcher& l, const LaunchPlan& plan,
                       const std::vector<HostSlots>& used) {
  Variables out = RankVariables(l.o, used);
  if (!l.mpi.choice.on_path) out["KOLO_MPI_HOME"] = l.mpi.choice.mpirun;
  if (plan.dialect == MpiDialect::kHydra) {
    for (const auto& [k, v] : HydraRankVariables(plan, l.mpi.library_dir, l.environment)) {
      out[k] = v;
    }
  }
  return out;
}

// The job that runs `plan`, without its environment.
Job JobOf(const Launcher& l, const LaunchPlan& plan, const std::vector<HostSlots>& used) {
  Job job;
  job.mpirun_argv = BuildMpirunCommand(plan);
  for (int h : MapBySlot(used, l.o.np)) job.rank_hosts.push_back(used[h].host);
  job.output_dir = l.o.output_dir;
  job.start_timeout = l.o.start_timeout;
  job.verbose = l.o.verbose;
  job.tags = plan.dialect == MpiDialect::kHydra   ? OutputTags::kHydra
             : plan.dialect == MpiDialect::kPrrte ? OutputTags::kOpenMpiSpace
                                                  : OutputTags::kOpenMpi;
  job.mpi_name = FamilyName(plan.family);
  job.launcher_name = fs::path(plan.mpirun).filename().string();
  job.end_on_rank_failure = plan.dialect == MpiDialect::kHydra;
  job.monitor = l.monitor;
  job.progress = l.progress;
  return job;
}

// Plans one mpirun job of o.np ranks on `used` (checking new hosts first);
// every rank also gets `extra`. Starts the rendezvous with the first job.
Result<PlannedJob> PlanJob(Launcher& l, const std::vector<HostSlots>& used,
                           const Variables& extra) {
  Options& o = l.o;
  o.network_interfaces = l.given_interfaces;  // else found again for these hosts
  const std::vector<HostSlots> fresh = Unchecked(l, used);
  KOLO_RETURN_IF_ERROR(CheckSsh(l, fresh));
  Result<JobNetwork> network = ChooseNetwork(o, used);
  if (!network.ok()) return network.status();
  KOLO_ASSIGN_OR_RETURN(LaunchPlan plan, PlanLaunch(o, used, l.cores, l.mpi, l.environment));
  plan.elastic = extra.count(env::kElastic) > 0;
  plan.fault_tolerant = extra.count(env::kElasticInPlace) > 0;
  if (!network.value().interfaces.empty()) plan.interface_name = network.value().interfaces.front();
  const bool hydra = plan.dialect == MpiDialect::kHydra;
  if (plan.bind_library.empty() && !o.dry_run && l.checked.empty()) {
    std::cerr << "kolorun: warning: " << kBindLibraryName << " is not beside kolorun (" << SelfDir()
              << "); " << FamilyName(plan.family) << " will listen on every network interface\n";
  }
  Variables child_env = MpiVariables(l, plan, used);
  for (const auto& [k, v] : extra) child_env[k] = v;
  KOLO_ASSIGN_OR_RETURN(std::vector<std::string> user_names,
                        UserVariables(o.env_vars, l.environment, &child_env));
  // Each rank gets the forwarded part of kolorun's environment, then kolorun's own variables.
  Variables merged = l.environment;
  for (const auto& [k, v] : child_env) merged[k] = v;
  for (const std::string& name : ForwardedNames(merged, user_names)) plan.env[name] = merged[name];
  for (const auto& [k, v] : child_env) plan.env[k] = v;
  KOLO_RETURN_IF_ERROR(CheckProgramsOn(l, plan, fresh));
  if (!o.dry_run && l.rendezvous.empty()) {
    KOLO_ASSIGN_OR_RETURN(l.rendezvous, StartRendezvous(l.server, used, network.value()));
  }
  if (!o.dry_run) child_env[env::kRendezvous] = plan.env[env::kRendezvous] = l.rendezvous;
  if (!hydra && !plan.single_host && !plan.bind_library.empty() &&
      !plan.network_interfaces.empty()) {
    // Across hosts Open MPI's TCP transport listens in the ranks: kolo-rank preloads the shim.
    // (Hydra's ranks bind to the interfaces that kolo-rank names to their transports.)
    child_env[kBindLibrary] = plan.env[kBindLibrary] = plan.bind_library;
    child_env[kBindInterfaces] = plan.env[kBindInterfaces] = JoinComma(plan.network_interfaces);
  }
  // Hydra's launcher takes ssh's options in its environment (shown, not sent to the ranks).
  const Variables launcher_env = hydra ? HydraLauncherVariables(plan, l.environment) : Variables();
  // The token goes to the ranks but is never printed.
  Variables launch_env = child_env;
  MpirunPreloads(plan, l.environment, &launch_env);
  for (const auto& [k, v] : launcher_env) launch_env[k] = v;
  if (!o.dry_run) launch_env[env::kToken] = plan.env[env::kToken] = l.token;
  if (!o.dry_run && l.monitor != nullptr) {
    // The counters go where the ranks register, with the job's token.
    launch_env[env::kMonitorReport] = plan.env[env::kMonitorReport] = l.token + "@" + l.rendezvous;
  }
  PlannedJob planned;
  planned.job = JobOf(l, plan, used);
  planned.job.mpirun_env = launch_env;
  if (!o.dry_run && l.monitor != nullptr) l.monitor->NewJob(planned.job.rank_hosts);
  for (const auto& [k, v] : child_env) planned.shown += k + "=" + ShellQuote({v}) + " ";
  for (const auto& [k, v] : launcher_env) planned.shown += k + "=" + ShellQuote({v}) + " ";
  planned.shown += ShellQuote(planned.job.mpirun_argv);
  return planned;
}

// An allocation that comes with its own discovery script (an MPIJob's
// discover_hosts.sh, listing the workers running now) discovers an elastic
// job's hosts, each with the slots that the allocation gives its first host
// (an MPIJob's slotsPerWorker) unless --slots-per-host says otherwise.
void UseAllocationsDiscovery(const Allocation& alloc, const Options& o, ElasticRun* run) {
  if (alloc.discovery_script.empty() || access(alloc.discovery_script.c_str(), X_OK) != 0) return;
  run->discovery_script = alloc.discovery_script;
  if (!o.slots_per_host_given && !alloc.hosts.empty()) {
    run->slots_per_host = alloc.hosts.front().slots;
  }
  std::cerr << "kolorun: elastic: hosts from " << alloc.discovery_script << " (" << alloc.source
            << "), " << run->slots_per_host << " slot(s) each" << std::endl;
}

// Elastic mode's settings from the flags and KOLO_ELASTIC_TIMEOUT / HOROVOD_ELASTIC_TIMEOUT.
Result<ElasticRun> ElasticFlags(const Options& o, const Variables& environment, int cores) {
  double timeout = o.elastic_timeout;
  if (!o.elastic_timeout_given) {
    KOLO_ASSIGN_OR_RETURN(LaunchSettings settings, ReadLaunchSettings());
    timeout = settings.elastic_timeout_seconds;
  }
  ElasticRun run;
  KOLO_ASSIGN_OR_RETURN(
      run.settings, MakeElasticSettings(o.np_given ? o.np : 0, o.min_np, o.max_np, o.reset_limit,
                                        o.cooldown_range, timeout));
  run.discovery_script = o.discovery_script;
  run.slots_per_host = o.slots_per_host;
  if (o.discovery_script.empty()) {
    // The fixed pool: -H, --hostfile or the scheduler's allocation, else this machine.
    KOLO_ASSIGN_OR_RETURN(Allocation alloc, ResolveHosts(o.hosts, o.hostfile, environment,
                                                         run.settings.np, cores, ReadFile));
    run.fixed_pool = alloc.hosts;
    UseAllocationsDiscovery(alloc, o, &run);
  } else if (!o.hosts.empty() || !o.hostfile.empty()) {
    return Status::InvalidArgument(
        "--host-discovery-script lists the hosts; it cannot be used with -H or --hostfile");
  }
  run.job_id = NewToken();
  return run;
}

// Elastic mode: incarnations planned here, run by elastic.cc.
int RunElasticJob(Launcher& l) {
  Result<ElasticRun> run = ElasticFlags(l.o, l.environment, l.cores);
  if (!run.ok()) return Fail(run.status().message());
  ChooseRecovery(l.mpi, l.environment, &run.value());
  const PlanIncarnation plan = [&l](const std::vector<HostSlots>& hosts,
                                    const Variables& variables) -> Result<Job> {
    l.o.np = TotalSlots(hosts);
    KOLO_ASSIGN_OR_RETURN(PlannedJob planned, PlanJob(l, hosts, variables));
    if (l.o.verbose) std::cout << planned.shown << std::endl;
    return planned.job;
  };
  if (l.o.dry_run) {
    // The first incarnation's command, on the hosts there now.
    std::vector<HostSlots> pool = run.value().fixed_pool;
    if (!run.value().discovery_script.empty()) {
      DiscoveryScript script(run.value().discovery_script, run.value().slots_per_host);
      Result<std::vector<HostSlots>> found = script.RunNow();
      if (!found.ok()) return Fail(found.status().message());
      pool = found.value();
    }
    const std::vector<HostSlots> hosts = ChooseIncarnationHosts(pool, run.value().settings.max_np);
    if (hosts.empty()) return Fail("elastic: --dry-run: the discovery script lists no hosts");
    l.o.np = TotalSlots(hosts);
    Result<PlannedJob> planned =
        PlanJob(l, hosts, IncarnationVariables(run.value().job_id, 0, run.value().in_place));
    if (!planned.ok()) return Fail(planned.status().message());
    std::cout << planned.value().shown << std::endl;
    return 0;
  }
  return RunElastic(run.value(), plan, l.server);
}

// An elastic verb as the monitor's events show it.
std::string DescribeElastic(const ElasticEvent& e) {
  const ElasticRequest& r = e.request;
  const std::string commit =
      r.commit < 0 ? std::string("no commit yet") : "commit " + std::to_string(r.commit);
  if (r.verb == ElasticRequest::Verb::kRestart) {
    return "generation " + std::to_string(r.generation) + " asks to restart (" + commit + ")";
  }
  if (r.verb == ElasticRequest::Verb::kShrunk) {
    return "generation " + std::to_string(r.generation) +
           " lost rank(s): " + std::to_string(r.size) + " survivor(s) go on in place";
  }
  if (r.verb == ElasticRequest::Verb::kGrew) {
    return "generation " + std::to_string(r.generation) + " grew in place to " +
           std::to_string(r.size) + " rank(s) with new processes on " + r.slots;
  }
  if (r.verb == ElasticRequest::Verb::kNotJoined) {
    return "generation " + std::to_string(r.generation) + ": the new processes on " + r.slots +
           " did not join";
  }
  return "generation " + std::to_string(r.generation) + " resumed with " + std::to_string(r.size) +
         " rank(s) from " + commit;
}

// The monitor, when --monitor asks for it or the status line needs it (stderr
// is a terminal and --no-progress was not given); its address printed.
Status StartMonitor(const Options& o, const std::string& token, std::unique_ptr<Monitor>* monitor,
                    std::unique_ptr<ProgressLine>* progress) {
  const bool status_line = !o.no_progress && isatty(STDERR_FILENO);
  if (o.dry_run || (o.monitor_port < 0 && !status_line)) return Status::OK();
  // Off loopback, viewers need a token of their own: the job's token, which
  // lets a process report as a rank, is never printed.
  *monitor = std::make_unique<Monitor>(token, NewToken());
  if (o.monitor_port >= 0) {
    KOLO_ASSIGN_OR_RETURN(std::string url, (*monitor)->Start({o.monitor_address, o.monitor_port}));
    std::cerr << "kolorun: monitor at " << url << std::endl;
  }
  if (status_line) {
    Monitor* m = monitor->get();
    *progress = std::make_unique<ProgressLine>(STDERR_FILENO, [m] { return m->StatusLine(); });
  }
  return Status::OK();
}

// Plans the job, checks the hosts, and runs it (or prints it for --dry-run).
int Run(Options& o) {
  const Variables environment = Environment();
  if (o.check_build) return RunCheckBuild(o, environment);
  if (o.command.empty())
    return Fail("no command to run; usage: kolorun -np N [options] command ...");
  Result<JobMpi> mpi = FindJobMpi(o.mpi, environment);
  if (!mpi.ok()) return Fail(mpi.status().message());
  Status timeout = ApplyStartTimeoutVariable(environment, &o);
  if (!timeout.ok()) return Fail(timeout.message());
  Status ssh_wait = ApplySshWaitVariable(environment, &o);
  if (!ssh_wait.ok()) return Fail(ssh_wait.message());
  if (o.ssh_wait < 0) o.ssh_wait = HostsStartWithTheJob(environment) ? kCloudSshWaitSeconds : 0;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  const std::string token = NewToken();
  // Before the rendezvous, which feeds it: destroyed after the server stops.
  std::unique_ptr<Monitor> monitor;
  std::unique_ptr<ProgressLine> progress;
  Status watching = StartMonitor(o, token, &monitor, &progress);
  if (!watching.ok()) return Fail(watching.message());
  RendezvousServer server(token, o.np);
  if (monitor) {
    server.SetMonitorSink(
        [m = monitor.get()](const std::string& line) { return m->Receive(line); });
    server.SetElasticEventSink(
        [m = monitor.get()](const ElasticEvent& e) { m->AddEvent("elastic", DescribeElastic(e)); });
  }
  Launcher l{o, environment, cores, server, token, o.network_interfaces, mpi.value(), "", {}};
  l.monitor = monitor.get();
  l.progress = progress.get();
  if (o.Elastic()) return RunElasticJob(l);
  Result<std::vector<HostSlots>> chosen = ChooseHosts(o, environment, cores);
  if (!chosen.ok()) return Fail(chosen.status().message());
  Result<PlannedJob> planned = PlanJob(l, chosen.value(), {});
  if (!planned.ok()) return Fail(planned.status().message());
  if (o.dry_run || o.verbose) {
    std::cout << planned.value().shown << std::endl;
    if (o.dry_run) return 0;
  }
  server.NewIncarnation(-1, o.np);
  return Supervise(planned.value().job, server);
}

}  // namespace
}  // namespace kolo::launcher

int main(int argc, char** argv) {
  kolo::launcher::Options o;
  std::optional<int> stop = kolo::launcher::ParseCommandLine(argc, argv, &o);
  if (stop.has_value()) return *stop;
  return kolo::launcher::Run(o);
}
