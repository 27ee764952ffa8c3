#include "hydra_command.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "output.h"

namespace kolo::launcher {
namespace {

std::string JoinComma(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : ",") + w;
  return out;
}

bool Given(const std::vector<std::string>& args, const char* name) {
  return std::find(args.begin(), args.end(), name) != args.end();
}

bool SameSlots(const std::vector<HostSlots>& hosts) {
  return std::all_of(hosts.begin(), hosts.end(),
                     [&](const HostSlots& h) { return h.slots == hosts.front().slots; });
}

// The program every rank runs: kolo-rank, then the user's command.
std::vector<std::string> RankCommand(const LaunchPlan& plan) {
  std::vector<std::string> out;
  if (!plan.rank_exec.empty()) out.push_back(plan.rank_exec);
  out.insert(out.end(), plan.command.begin(), plan.command.end());
  return out;
}

// Where the ranks go. MPICH takes "host:N" in -hosts. Intel MPI ignores
// ":N" there (and in -f) and places -ppn ranks per host: equal hosts get
// -ppn, unequal ones a section each (-n N -host H ... : ...), which it
// numbers in order. Returns the sections' argv to put last, or nothing.
std::vector<std::string> Hosts(const LaunchPlan& plan, std::vector<std::string>* argv) {
  if (plan.family != MpiFamily::kIntelMpi) {
    argv->insert(argv->end(),
                 {"-n", std::to_string(plan.np), "-hosts", FormatHostSpec(plan.hosts)});
    return {};
  }
  if (SameSlots(plan.hosts)) {
    std::vector<std::string> names;
    for (const HostSlots& h : plan.hosts) names.push_back(h.host);
    argv->insert(argv->end(), {"-n", std::to_string(plan.np), "-hosts", JoinComma(names), "-ppn",
                               std::to_string(plan.hosts.front().slots)});
    return {};
  }
  std::vector<std::string> sections;
  const std::vector<std::string> command = RankCommand(plan);
  for (const HostSlots& h : plan.hosts) {
    if (!sections.empty()) sections.push_back(":");
    sections.insert(sections.end(), {"-n", std::to_string(h.slots), "-host", h.host});
    sections.insert(sections.end(), command.begin(), command.end());
  }
  return sections;
}

// Intel MPI's pinning for --binding (it pins by default); MPICH's is -bind-to.
Variables IntelPinning(const std::string& binding) {
  if (binding == "none") return {{"I_MPI_PIN", "0"}};
  // One logical processor per domain is a hardware thread.
  return {{"I_MPI_PIN", "1"}, {"I_MPI_PIN_DOMAIN", binding == "hwthread" ? "1" : binding}};
}

// How Intel's mpirun script starts the proxies inside a scheduler's job,
// which mpiexec.hydra, run directly, does not do itself (it takes ssh).
std::string IntelBootstrap(const Variables& environment) {
  if (environment.count("SLURM_JOBID") || environment.count("SLURM_JOB_ID")) return "slurm";
  if (environment.count("PE_HOSTFILE")) return "sge";
  if (environment.count("PBS_NODEFILE")) return "pbs";
  if (environment.count("LSB_JOBID")) return "lsf";
  return "";
}

void SetUnlessGiven(const Variables& environment, const std::string& name, const std::string& value,
                    Variables* out) {
  if (!value.empty() && !environment.count(name)) (*out)[name] = value;
}

}  // namespace

std::vector<std::string> BuildHydraCommand(const LaunchPlan& plan) {
  std::vector<std::string> argv = {plan.mpirun, "-prepend-pattern", kHydraTagPattern};
  const std::vector<std::string> sections = Hosts(plan, &argv);
  if (plan.family != MpiFamily::kIntelMpi) argv.insert(argv.end(), {"-bind-to", plan.binding});
  // Where the proxies reach mpiexec (and MPICH's ranks, each other's PMI).
  if (!plan.single_host && !plan.interface_name.empty() && !Given(plan.extra_mpi_args, "-iface")) {
    argv.insert(argv.end(), {"-iface", plan.interface_name});
  }
  std::vector<std::string> names;
  for (const auto& [name, value] : plan.env) names.push_back(name);
  // By name: the values stay in mpiexec's environment, off the command line.
  if (!names.empty()) argv.insert(argv.end(), {"-genvlist", JoinComma(names)});
  argv.insert(argv.end(), plan.extra_mpi_args.begin(), plan.extra_mpi_args.end());
  if (!sections.empty()) {
    argv.insert(argv.end(), sections.begin(), sections.end());
    return argv;
  }
  const std::vector<std::string> command = RankCommand(plan);
  argv.insert(argv.end(), command.begin(), command.end());
  return argv;
}

Variables HydraLauncherVariables(const LaunchPlan& plan, const Variables& environment) {
  Variables out;
  std::string ssh_args;
  if (plan.ssh_port > 0) ssh_args += "-p " + std::to_string(plan.ssh_port);
  if (!plan.ssh_identity_file.empty()) {
    ssh_args += (ssh_args.empty() ? "" : " ") + std::string("-i ") + plan.ssh_identity_file;
  }
  const bool intel = plan.family == MpiFamily::kIntelMpi;
  SetUnlessGiven(environment,
                 intel ? "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS" : "HYDRA_LAUNCHER_EXTRA_ARGS",
                 ssh_args, &out);
  const bool own_launcher = Given(plan.extra_mpi_args, "-launcher") ||
                            Given(plan.extra_mpi_args, "-bootstrap") ||
                            environment.count("I_MPI_HYDRA_BOOTSTRAP_EXEC");
  if (intel && ssh_args.empty() && !own_launcher) {
    SetUnlessGiven(environment, "I_MPI_HYDRA_BOOTSTRAP", IntelBootstrap(environment), &out);
  }
  return out;
}

Variables HydraRankVariables(const LaunchPlan& plan, const std::string& mpi_library_dir,
                             const Variables& environment) {
  Variables out;
  if (plan.family == MpiFamily::kIntelMpi) {
    const bool own = std::any_of(environment.begin(), environment.end(),
                                 [](const auto& e) { return e.first.rfind("I_MPI_PIN", 0) == 0; });
    if (!own) out = IntelPinning(plan.binding);
  }
  if (!mpi_library_dir.empty()) {
    auto path = environment.find("LD_LIBRARY_PATH");
    out["LD_LIBRARY_PATH"] =
        mpi_library_dir +
        (path == environment.end() || path->second.empty() ? "" : ":" + path->second);
  }
  out[kMpiInterfaces] = plan.single_host ? "lo" : JoinComma(plan.network_interfaces);
  if (out[kMpiInterfaces].empty()) out.erase(kMpiInterfaces);
  return out;
}

Variables TransportInterfaces(const std::string& spec,
                              const std::vector<std::pair<std::string, std::string>>& interfaces) {
  std::vector<std::string> names;
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const std::string entry = spec.substr(start, comma - start);
    start = comma + 1;
    unsigned a = 0, b = 0, c = 0, d = 0, bits = 0;
    const bool network =
        std::sscanf(entry.c_str(), "%u.%u.%u.%u/%u", &a, &b, &c, &d, &bits) == 5 && bits <= 32;
    const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
    const uint32_t net = (a << 24) | (b << 16) | (c << 8) | d;
    for (const auto& [name, address] : interfaces) {
      unsigned w = 0, x = 0, y = 0, z = 0;
      const bool v4 = std::sscanf(address.c_str(), "%u.%u.%u.%u", &w, &x, &y, &z) == 4;
      const uint32_t ip = (w << 24) | (x << 16) | (y << 8) | z;
      const bool match = network ? v4 && (ip & mask) == (net & mask) : name == entry;
      if (match && std::find(names.begin(), names.end(), name) == names.end()) {
        names.push_back(name);
      }
    }
  }
  if (names.empty()) return {};
  // libfabric's TCP provider takes one interface.
  return {{"UCX_NET_DEVICES", JoinComma(names)}, {"FI_TCP_IFACE", names.front()}};
}

}  // namespace kolo::launcher
