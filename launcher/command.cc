#include "command.h"

#include <algorithm>

#include "bind_shim.h"
#include "hydra_command.h"

namespace kolo::launcher {

namespace {

bool Given(const std::vector<std::string>& args, const char* name) {
  return std::find(args.begin(), args.end(), name) != args.end();
}

// A parameter of Open MPI's runtime: ORTE's (--mca) or PRRTE's (--prtemca), by
// the name each gives it.
void RuntimeParam(const LaunchPlan& plan, const std::string& orte_name,
                  const std::string& prrte_name, const std::string& value,
                  std::vector<std::string>* argv) {
  if (plan.dialect == MpiDialect::kOrte) {
    argv->insert(argv->end(), {"--mca", orte_name, value});
  } else {
    argv->insert(argv->end(), {"--prtemca", prrte_name, value});
  }
}

// How ranks map to slots, and MPI's transports.
void MappingAndTransports(const LaunchPlan& plan, std::vector<std::string>* argv) {
  const bool prrte = plan.dialect == MpiDialect::kPrrte;
  // A fault-tolerant job grows in place by MPI_Comm_spawn onto its hosts, where
  // PRRTE still counts the dead ranks' slots as used: it may place more
  // processes than slots (the ranks' own placement is the same either way).
  const bool spawns_onto_hosts = prrte && plan.fault_tolerant;
  const std::string map_by =
      prrte && (plan.oversubscribe || spawns_onto_hosts) ? "slot:OVERSUBSCRIBE" : "slot";
  argv->insert(argv->end(), {"--bind-to", plan.binding, "--map-by", map_by});
  // Busy-polling ranks sharing cores must yield to each other.
  if (plan.oversubscribe && !prrte) argv->push_back("--oversubscribe");
  if (plan.oversubscribe) argv->insert(argv->end(), {"--mca", "mpi_yield_when_idle", "1"});
  argv->insert(argv->end(), {"--mca", "pml", "ob1"});
  // Open MPI 5 renamed the shared-memory transport (vader -> sm).
  const std::string shared_memory = prrte ? "sm" : "vader";
  // Named, not "^openib": other transports (libfabric's ofi) open sockets of their own.
  argv->insert(argv->end(),
               {"--mca", "btl", "self," + shared_memory + (plan.single_host ? "" : ",tcp")});
}

// The job's interfaces as Open MPI's settings list them: "eth0,eth1".
std::string JobInterfaces(const LaunchPlan& plan) {
  std::string nics;
  for (const std::string& n : plan.network_interfaces) nics += (nics.empty() ? "" : ",") + n;
  return nics;
}

// Where Open MPI's out-of-band channel and TCP transport live.
void Interfaces(const LaunchPlan& plan, std::vector<std::string>* argv) {
  const bool prrte = plan.dialect == MpiDialect::kPrrte;
  // On one host: ORTE's channel on loopback. PRRTE refuses a loopback-only
  // channel where another interface exists (mpirun exits 213); there its
  // listeners are held to loopback by the shim alone (in mpirun's environment).
  if (plan.single_host) {
    if (!prrte) argv->insert(argv->end(), {"--mca", "oob_tcp_if_include", "lo"});
    return;
  }
  if (plan.network_interfaces.empty()) return;
  const std::string nics = JobInterfaces(plan);
  argv->insert(argv->end(), {"--mca", "btl_tcp_if_include", nics});
  if (!RuntimeOnJobNetwork(plan)) return;
  RuntimeParam(plan, "oob_tcp_if_include", "prte_if_include", nics, argv);
}

// Each host's daemon preloads kolorun's shims through its launch agent (mpirun's
// own environment is kolorun's to set): the bind shim where the runtime lives on
// the job's network, the PRRTE shim where kolo spawns. A launch agent of the
// user's own wins.
void DaemonPreloads(const LaunchPlan& plan, std::vector<std::string>* argv) {
  const bool prrte = plan.dialect == MpiDialect::kPrrte;
  if (Given(plan.extra_mpi_args, prrte ? "prte_launch_agent" : "orte_launch_agent")) return;
  std::string preload;
  std::string variables;
  if (PreloadsPrrteShim(plan)) preload = plan.prrte_library;
  if (!plan.bind_library.empty() && !plan.single_host && !plan.network_interfaces.empty() &&
      RuntimeOnJobNetwork(plan)) {
    preload += (preload.empty() ? "" : ":") + plan.bind_library;
    variables = std::string(" ") + kBindInterfaces + "=" + JobInterfaces(plan);
  }
  if (preload.empty()) return;
  const std::string daemon = prrte ? "prted" : "orted";
  RuntimeParam(plan, "orte_launch_agent", "prte_launch_agent",
               "env LD_PRELOAD=" + preload + variables + " " + daemon, argv);
}

// How mpirun reaches the other hosts: ssh's port and key, the agent given in
// the environment (which PRRTE does not read), no tree spawn for many hosts.
void RemoteShell(const LaunchPlan& plan, std::vector<std::string>* argv) {
  std::string rsh_args;
  if (plan.ssh_port > 0) rsh_args += "-p " + std::to_string(plan.ssh_port);
  if (!plan.ssh_identity_file.empty()) {
    rsh_args += (rsh_args.empty() ? "" : " ") + std::string("-i ") + plan.ssh_identity_file;
  }
  if (!rsh_args.empty()) RuntimeParam(plan, "plm_rsh_args", "plm_ssh_args", rsh_args, argv);
  if (plan.hosts.size() >= 64) {
    RuntimeParam(plan, "plm_rsh_no_tree_spawn", "plm_ssh_no_tree_spawn", "true", argv);
  }
  if (plan.dialect == MpiDialect::kPrrte && !plan.rsh_agent_variable.empty() &&
      !Given(plan.extra_mpi_args, "plm_rsh_agent") &&
      !Given(plan.extra_mpi_args, "plm_ssh_agent")) {
    argv->insert(argv->end(), {"--prtemca", "plm_ssh_agent", plan.rsh_agent_variable});
  }
}

}  // namespace

bool PreloadsPrrteShim(const LaunchPlan& plan) {
  return plan.dialect == MpiDialect::kPrrte && plan.fault_tolerant && !plan.prrte_library.empty();
}

bool RuntimeOnJobNetwork(const LaunchPlan& plan) {
  if (plan.dialect != MpiDialect::kPrrte || plan.single_host) return true;
  return !std::all_of(plan.network_interfaces.begin(), plan.network_interfaces.end(),
                      [](const std::string& n) { return n == "lo" || n.rfind("127.", 0) == 0; });
}

std::vector<std::string> BuildMpirunCommand(const LaunchPlan& plan) {
  if (plan.dialect == MpiDialect::kHydra) return BuildHydraCommand(plan);
  std::vector<std::string> argv = {plan.mpirun};
  if (plan.as_root) argv.push_back("--allow-run-as-root");
  argv.insert(argv.end(), {"--tag-output", "-np", std::to_string(plan.np)});
  argv.insert(argv.end(), {"-H", FormatHostSpec(plan.hosts)});
  MappingAndTransports(plan, &argv);
  Interfaces(plan, &argv);
  DaemonPreloads(plan, &argv);
  RemoteShell(plan, &argv);
  for (const auto& [name, value] : plan.env) argv.insert(argv.end(), {"-x", name});
  // Ending a job, ORTE's daemons send SIGTERM and SIGKILL with a second's
  // wait around each (odls_base_sigkill_timeout 1): 3 s added to every restart
  // of an elastic job, whose state is committed already. A value of the user's
  // own wins (mpirun refuses a parameter given twice). PRRTE has no such
  // parameter (prte_info lists none), nor the wait: a 2-host job with a killed
  // rank ended in 0.5 s on Open MPI 5.0.11, 4.4 s on 4.1.4.
  if (plan.elastic && plan.dialect == MpiDialect::kOrte &&
      !Given(plan.extra_mpi_args, "odls_base_sigkill_timeout")) {
    argv.insert(argv.end(), {"--mca", "odls_base_sigkill_timeout", "0"});
  }
  if (plan.fault_tolerant && plan.dialect == MpiDialect::kPrrte) {
    // ULFM: a rank's death leaves the others running, told of it
    // (REFERENCE.md: it forces pml ob1). HAN, the hierarchical collectives,
    // returned success with a wrong sum from an allreduce interrupted by a
    // failure (measured, 5 of 5 runs): off, unless the user chose.
    argv.push_back("--with-ft");
    argv.push_back("ulfm");
    if (!Given(plan.extra_mpi_args, "coll")) argv.insert(argv.end(), {"--mca", "coll", "^han"});
  }
  argv.insert(argv.end(), plan.extra_mpi_args.begin(), plan.extra_mpi_args.end());
  if (!plan.rank_exec.empty()) argv.push_back(plan.rank_exec);
  argv.insert(argv.end(), plan.command.begin(), plan.command.end());
  return argv;
}

std::vector<std::string> ForwardedNames(const std::map<std::string, std::string>& environment,
                                        const std::vector<std::string>& user_names) {
  std::vector<std::string> out;
  for (const auto& [name, value] : environment) {
    bool wanted = name.rfind("KOLO_", 0) == 0 || name.rfind("HOROVOD_", 0) == 0 ||
                  name.rfind("NCCL_", 0) == 0 || name == "PATH" || name == "LD_LIBRARY_PATH" ||
                  name == "PYTHONPATH" || name == "PYTHONUNBUFFERED";
    if (wanted) out.push_back(name);
  }
  for (const std::string& n : user_names) {
    if (std::find(out.begin(), out.end(), n) == out.end()) out.push_back(n);
  }
  return out;
}

Result<std::vector<std::string>> SplitArgs(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (char c : text) {
    if (quote != 0) {
      if (c == quote) {
        quote = 0;
      } else {
        cur += c;
      }
    } else if (c == '\'' || c == '"') {
      quote = c;
      in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) out.push_back(cur);
      cur.clear();
      in_word = false;
    } else {
      cur += c;
      in_word = true;
    }
  }
  if (quote != 0)
    return Status::InvalidArgument("--mpi-args: unterminated quote in '" + text + "'");
  if (in_word) out.push_back(cur);
  return out;
}

std::string ShellQuote(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](unsigned char c) {
      return std::isalnum(c) ||
             std::string("-_./:=,^@%+").find(static_cast<char>(c)) != std::string::npos;
    });
    if (!out.empty()) out += ' ';
    if (plain) {
      out += a;
    } else {
      out += '\'';
      for (char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
      out += '\'';
    }
  }
  return out;
}

Result<std::string> PinnedGpu(const std::string& visible, int local_rank) {
  if (visible.empty()) return std::to_string(local_rank);
  std::vector<std::string> devices;
  size_t start = 0;
  while (start <= visible.size()) {
    size_t comma = visible.find(',', start);
    if (comma == std::string::npos) comma = visible.size();
    devices.push_back(visible.substr(start, comma - start));
    start = comma + 1;
  }
  if (local_rank >= static_cast<int>(devices.size())) {
    return Status::InvalidArgument("--pin-gpus: local rank " + std::to_string(local_rank) +
                                   " has no GPU of its own: " + "CUDA_VISIBLE_DEVICES=" + visible +
                                   " lists " + std::to_string(devices.size()) +
                                   "; start at most that many ranks per host");
  }
  return devices[local_rank];
}

// Longer than a function should be because it is the table itself: one
// place lists every horovodrun flag and what kolorun does with it.
const std::vector<HorovodrunFlag>& HorovodrunFlags() {
  using K = HorovodrunFlag::Kind;
  static const char* const kBayes =
      "kolo's autotune is a coordinate search over a few values per setting, not Bayesian "
      "optimization (docs/configuration.md, \"Autotune\")";
  static const char* const kNoTimestamp = "kolo's log lines carry no time stamp";
  static const std::vector<HorovodrunFlag> kFlags = {
      // Single-dash long names, which kolorun's parser reads as letters.
      {"-np", 1, K::kRenamed, "--np"},
      {"--num-proc", 1, K::kRenamed, "--np"},
      {"-cb", 0, K::kRenamed, "--check-build"},
      {"-hostfile", 1, K::kRenamed, "--hostfile"},
      {"-v", 0, K::kRenamed, "--version"},
      {"--network-interfaces", 1, K::kRenamedEach, "--network-interface"},
      // Elastic mode: horovodrun's second spellings.
      {"--min-num-proc", 1, K::kRenamed, "--min-np"},
      {"--max-num-proc", 1, K::kRenamed, "--max-np"},
      // kolorun's own, listed because it takes two values: the translation
      // must not take the second for the program's name.
      {"--blacklist-cooldown-range", 2, K::kRenamed, "--blacklist-cooldown-range"},
      // The explicit "off" forms of kolorun's switches.
      {"--no-hierarchical-allreduce", 0, K::kSetsVariable, "KOLO_HIERARCHICAL_ALLREDUCE=0"},
      {"--no-timeline-mark-cycles", 0, K::kSetsVariable, "KOLO_TIMELINE_MARK_CYCLES=0"},
      {"--stall-check", 0, K::kSetsVariable, "KOLO_STALL_CHECK_DISABLE=0"},
      {"--no-autotune", 0, K::kSetsVariable, "KOLO_AUTOTUNE=0"},
      // horovodrun's --tcp sets NCCL_IB_DISABLE=1; kolorun's MPI already uses TCP.
      {"--tcp", 0, K::kSetsVariable, "NCCL_IB_DISABLE=1"},
      // Harmless to ignore: none changes what the job computes.
      {"--disable-cache", 0, K::kIgnored,
       "it turns off horovodrun's cache of its host checks; kolorun caches nothing and "
       "checks the hosts on every launch"},
      {"--mpi", 0, K::kIgnored, "kolo always runs on MPI"},
      // --autotune and its other flags are kolorun's own.
      {"--autotune-bayes-opt-max-samples", 1, K::kIgnored, kBayes},
      {"--autotune-gaussian-process-noise", 1, K::kIgnored, kBayes},
      {"--hierarchical-allgather", 0, K::kIgnored,
       "kolo's allgather is flat (the results are the same); --hierarchical-allreduce is "
       "supported"},
      {"--no-hierarchical-allgather", 0, K::kIgnored, "kolo's allgather is always flat"},
      {"--mpi-threads-disable", 0, K::kIgnored,
       "kolo calls MPI from its background thread and needs MPI's thread support"},
      {"--no-mpi-threads-disable", 0, K::kIgnored, "kolo always uses MPI's thread support"},
      {"--num-nccl-streams", 1, K::kIgnored, "kolo runs NCCL on one stream per device"},
      {"--thread-affinity", 1, K::kIgnored,
       "kolo does not pin its background thread; bind the ranks with --binding core"},
      {"--gloo-timeout-seconds", 1, K::kIgnored,
       "kolo runs on MPI, not Gloo; --stall-check-shutdown-time-seconds bounds a wait for "
       "other ranks"},
      {"--log-with-timestamp", 0, K::kIgnored, kNoTimestamp},
      {"--log-without-timestamp", 0, K::kIgnored, kNoTimestamp},
      {"--log-hide-timestamp", 0, K::kIgnored, kNoTimestamp},
      {"--no-log-hide-timestamp", 0, K::kIgnored, kNoTimestamp},
      {"-prefix-timestamp", 0, K::kIgnored,
       "kolorun prefixes each output line with its rank, not a time"},
      {"--prefix-output-with-timestamp", 0, K::kIgnored,
       "kolorun prefixes each output line with its rank, not a time"},
      // Refused: ignoring them would run a different job from the one asked for.
      {"--gloo", 0, K::kRefused, "kolo runs on MPI; drop --gloo"},
      {"--jsrun", 0, K::kRefused,
       "kolorun starts the ranks with mpirun (inside an LSF job it reads LSB_MCPU_HOSTS); drop "
       "--jsrun"},
      {"--config-file", 1, K::kRefused,
       "kolorun does not read horovodrun's YAML file; give its settings as kolorun flags "
       "(docs/launcher.md) or KOLO_* variables (docs/configuration.md)"},
      {"--binding-args", 1, K::kRefused,
       "kolorun maps ranks to hosts by slot itself; use --binding none|core|socket|numa|hwthread "
       "for mpirun's --bind-to, and --mpi-args for other mpirun options"},
  };
  return kFlags;
}

namespace {

const HorovodrunFlag* FindHorovodrunFlag(const std::string& name) {
  for (const HorovodrunFlag& f : HorovodrunFlags()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// Appends what `flag`, given `values`, becomes.
void Translate(const HorovodrunFlag& flag, const std::vector<std::string>& values,
               TranslatedArgs* out) {
  using K = HorovodrunFlag::Kind;
  switch (flag.kind) {
    case K::kRenamed:
      out->args.push_back(flag.text);
      out->args.insert(out->args.end(), values.begin(), values.end());
      break;
    case K::kRenamedEach:
      for (const std::string& v : values) {
        size_t start = 0;
        while (start <= v.size()) {
          size_t comma = std::min(v.find(',', start), v.size());
          if (comma > start)
            out->args.insert(out->args.end(), {flag.text, v.substr(start, comma - start)});
          start = comma + 1;
        }
      }
      break;
    case K::kSetsVariable:
      out->args.insert(out->args.end(), {"-x", flag.text});
      break;
    case K::kIgnored:
      out->notes.push_back(std::string(flag.name) + " is accepted and ignored: " + flag.text);
      break;
    case K::kRefused:
      break;
  }
}

}  // namespace

Result<TranslatedArgs> TranslateHorovodrunArgs(const std::vector<std::string>& args,
                                               const std::set<std::string>& value_options) {
  TranslatedArgs out;
  size_t i = 0;
  while (i < args.size()) {
    const std::string& arg = args[i];
    if (arg == "--" || arg.size() < 2 || arg[0] != '-') break;  // the program's command line
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const HorovodrunFlag* flag = FindHorovodrunFlag(name);
    ++i;
    if (flag == nullptr) {
      out.args.push_back(arg);
      if (eq == std::string::npos && value_options.count(name) && i < args.size()) {
        out.args.push_back(args[i++]);
      }
      continue;
    }
    if (flag->kind == HorovodrunFlag::Kind::kRefused) {
      return Status::InvalidArgument(name + " is not supported: " + flag->text);
    }
    std::vector<std::string> values;
    if (eq != std::string::npos) values.push_back(arg.substr(eq + 1));
    while (static_cast<int>(values.size()) < flag->values && i < args.size()) {
      values.push_back(args[i++]);
    }
    if (static_cast<int>(values.size()) != flag->values) {
      return Status::InvalidArgument(name + " expects " + std::to_string(flag->values) +
                                     " value(s)");
    }
    Translate(*flag, values, &out);
  }
  out.args.insert(out.args.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  return out;
}

}  // namespace kolo::launcher
