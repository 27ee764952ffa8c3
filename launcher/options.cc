#include "options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>

#include "command.h"
#include "kolo/env_names.h"
#include "usage.h"

namespace kolo::launcher {
namespace {

// kolorun's options and flags, in the order --help lists them.
// --monitor's value: "any" (no port given: the system picks one) or a port.
Result<int> MonitorPort(const std::string& value) {
  if (value == "any") return 0;
  if (value.empty() || value.size() > 5 ||
      value.find_first_not_of("0123456789") != std::string::npos || std::stoi(value) > 65535) {
    return Status::InvalidArgument("--monitor=" + value + ": not a port (0 to 65535)");
  }
  return std::stoi(value);
}

void AddOptions(CLI::App& app, Options* o, std::string* monitor) {
  app.footer(
      "Examples:\n"
      "  kolorun -np 4 python train.py                    4 ranks on this machine\n"
      "  kolorun -np 8 -H node1:4,node2:4 python train.py  two hosts\n"
      "  kolorun --hostfile hosts.txt python train.py      every slot of the hostfile\n"
      "  kolorun python train.py                           inside a Slurm/PBS/SGE/LSF allocation,\n"
      "                                                    an MPIJob's launcher pod, on SageMaker\n"
      "  kolorun -np 2 --dry-run python train.py           print the mpirun command only");
  app.set_version_flag("--version", std::string("kolorun ") + KOLO_VERSION);
  app.add_option("--np", o->np, "Number of ranks (default: all slots)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("-H,--hosts", o->hosts, "Hosts and slots: host1:2,host2:2");
  app.add_option("--hostfile", o->hostfile, "File of 'host slots=N' (or 'host:N') lines");
  app.add_option("-p,--ssh-port", o->ssh_port, "ssh port of the remote hosts")
      ->check(CLI::Range(1, 65535));
  app.add_option("-i,--ssh-identity-file", o->ssh_identity_file, "ssh identity file");
  app.add_option("--start-timeout", o->start_timeout,
                 "Seconds to wait for hosts and ranks (default 30, or KOLO_START_TIMEOUT / "
                 "HOROVOD_START_TIMEOUT)")
      ->check(CLI::PositiveNumber);
  app.add_option("--ssh-wait", o->ssh_wait,
                 "Seconds to wait for the remote hosts' ssh to answer, trying each again every "
                 "second (default 0: one try; 60 in an MPI Operator launcher pod and on SageMaker, "
                 "whose workers start sshd while kolorun runs; or KOLO_SSH_WAIT)")
      ->check(CLI::Range(0.0, kMaxSshWaitSeconds));
  app.add_option("--network-interface", o->network_interfaces, "NIC for MPI and NCCL (repeatable)")
      ->allow_extra_args(false);
  app.add_option("-x", o->env_vars, "Pass VAR (or set VAR=VALUE) for every rank (repeatable)")
      ->allow_extra_args(false);
  app.add_option("--mpi-args", o->mpi_args, "Extra arguments for mpirun");
  app.add_option("--mpi-home", o->mpi,
                 "The MPI to run on (Open MPI, MPICH, Intel MPI): its installation folder "
                 "(PREFIX/bin/mpirun) or its mpirun (default: KOLO_MPI_HOME, else the first "
                 "mpirun on PATH, else the one beside kolorun)");
  app.add_option("--binding", o->binding, "mpirun --bind-to value (default none)")
      ->check(CLI::IsMember({"none", "core", "socket", "numa", "hwthread"}));
  app.add_option("--fusion-threshold-mb", o->fusion_threshold_mb, "KOLO_FUSION_THRESHOLD in MiB")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--cycle-time-ms", o->cycle_time_ms, "KOLO_CYCLE_TIME")
      ->check(CLI::PositiveNumber);
  app.add_option("--cache-capacity", o->cache_capacity, "KOLO_CACHE_CAPACITY")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--hierarchical-allreduce", o->hierarchical, "KOLO_HIERARCHICAL_ALLREDUCE=1");
  app.add_flag("--pin-gpus", o->pin_gpus,
               "One GPU per local rank: each rank's CUDA_VISIBLE_DEVICES keeps its LOCAL_RANK-th "
               "GPU (of the list it had, else device LOCAL_RANK), seen as cuda:0");
  app.add_flag("--autotune", o->autotune,
               "KOLO_AUTOTUNE=1: tune fusion threshold, cycle time and piece size while the job "
               "runs");
  app.add_option("--autotune-log-file", o->autotune_log, "KOLO_AUTOTUNE_LOG (CSV of every sample)");
  app.add_option("--autotune-warmup-samples", o->autotune_warmup_samples,
                 "KOLO_AUTOTUNE_WARMUP_SAMPLES (default 3)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--autotune-steps-per-sample", o->autotune_steps_per_sample,
                 "KOLO_AUTOTUNE_STEPS_PER_SAMPLE (default 10)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--autotune-file", o->autotune_file,
                 "KOLO_AUTOTUNE_FILE: autotune writes its choice there; a job that finds the file "
                 "uses it and does not tune");
  app.add_option("--timeline-filename", o->timeline, "KOLO_TIMELINE");
  app.add_flag("--timeline-mark-cycles", o->timeline_mark_cycles, "KOLO_TIMELINE_MARK_CYCLES=1");
  app.add_flag("--no-stall-check", o->no_stall_check, "KOLO_STALL_CHECK_DISABLE=1");
  app.add_option("--stall-check-warning-time-seconds", o->stall_warning,
                 "KOLO_STALL_CHECK_TIME_SECONDS")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stall-check-shutdown-time-seconds", o->stall_shutdown,
                 "KOLO_STALL_SHUTDOWN_TIME_SECONDS")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-level", o->log_level, "KOLO_LOG_LEVEL (any case; FATAL = error)")
      ->transform(
          CLI::IsMember({"trace", "debug", "info", "warning", "error", "fatal"}, CLI::ignore_case));
  app.add_option(
         "--min-np", o->min_np,
         "Elastic mode: the fewest ranks to run with (default: -np); below it kolorun waits "
         "for hosts (--elastic-timeout)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--max-np", o->max_np,
                 "Elastic mode: the most ranks to run with (default: no bound)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--host-discovery-script", o->discovery_script,
                 "Elastic mode: an executable that prints the hosts there now, one 'host' or "
                 "'host:slots' per line; run every second");
  app.add_option("--slots-per-host", o->slots_per_host,
                 "Slots of the discovery script's hosts given without ':slots' (default 1)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--reset-limit", o->reset_limit,
                 "Elastic mode: the most restarts (after a failure or a change of hosts) before "
                 "the job ends (default: no limit)")
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--blacklist-cooldown-range", o->cooldown_range,
                 "Elastic mode: MIN MAX seconds a failed host stays out, growing with each failure "
                 "(default: for the rest of the job)")
      ->expected(2)
      ->allow_extra_args(false);
  app.add_option("--elastic-timeout", o->elastic_timeout,
                 "Elastic mode: seconds to wait for enough slots (default 600, or "
                 "KOLO_ELASTIC_TIMEOUT / HOROVOD_ELASTIC_TIMEOUT)")
      ->check(CLI::PositiveNumber);
  app.add_option("--output-filename", o->output_dir,
                 "Also write each rank's output to DIR/rank.N/");
  app.add_flag("--monitor{any}", *monitor,
               "Serve a live view of the job (page, /metrics, /api/v1/state) on 127.0.0.1; "
               "--monitor=PORT picks the port (default: a free one, printed at the start)");
  app.add_option("--monitor-address", o->monitor_address,
                 "Where --monitor listens (default 127.0.0.1); any other address needs the "
                 "token kolorun prints");
  app.add_flag("--no-progress", o->no_progress,
               "No status line on the terminal (it is off anyway when stderr is not one)");
  app.add_flag("--verbose", o->verbose, "Say where hosts came from and the command run");
  app.add_flag("--dry-run", o->dry_run, "Print the mpirun command and run nothing");
  app.add_flag("--check-build", o->check_build,
               "Show what this build has (KOLO_PYTHON: the interpreter asked), then exit");
  // The first positional argument starts the program's command line.
  app.prefix_command();
}

// The names of kolorun's options that take a value ("--np", "-H", ...).
std::set<std::string> ValueOptions(const CLI::App& app) {
  std::set<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    if (opt->get_items_expected_min() == 0) continue;  // a flag
    for (const std::string& n : opt->get_lnames()) names.insert("--" + n);
    for (const std::string& n : opt->get_snames()) names.insert("-" + n);
  }
  return names;
}

// --help's usage line is kolorun's own (the program and its arguments follow
// the options), printed once, in place of CLI11's "Usage: kolorun [OPTIONS]".
class UsageFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return std::string(kUsage) + "\n";
  }
};

// Every name kolorun accepts before the program: its own options and
// horovodrun's flags, for "did you mean".
std::vector<std::string> KnownOptionNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* opt : app.get_options()) {
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
    for (const std::string& n : opt->get_snames()) names.push_back("-" + n);
  }
  for (const HorovodrunFlag& f : HorovodrunFlags()) names.push_back(f.name);
  return names;
}

// One line for a command line that CLI11 refused (a bad value, a missing one).
int UsageError(const CLI::ParseError& e) {
  std::string what = e.what();
  std::replace(what.begin(), what.end(), '\n', ' ');
  while (!what.empty() && what.back() == ' ') what.pop_back();
  return Fail(what + "; see kolorun --help");
}

std::string Num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

}  // namespace

int Fail(const std::string& message, int code) {
  std::cerr << "kolorun: " << message << "\n";
  return code;
}

std::optional<int> ParseCommandLine(int argc, char** argv, Options* o) {
  CLI::App app{"kolorun: launch a kolo job on N ranks across hosts.", "kolorun"};
  app.formatter(std::make_shared<UsageFormatter>());
  std::string monitor;  // --monitor[=PORT]
  AddOptions(app, o, &monitor);
  // horovodrun's flags: renamed to kolorun's, ignored with a note, or refused
  // before anything starts (launcher/command.cc, HorovodrunFlags()).
  Result<TranslatedArgs> translated =
      TranslateHorovodrunArgs(std::vector<std::string>(argv + 1, argv + argc), ValueOptions(app));
  if (!translated.ok()) return Fail(translated.status().message());
  for (const std::string& note : translated.value().notes) std::cerr << "kolorun: " << note << "\n";
  std::vector<std::string> args = translated.value().args;
  std::reverse(args.begin(), args.end());  // CLI::App::parse takes them last first
  try {
    app.parse(args);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return UsageError(e);
  }
  o->start_timeout_given = app.count("--start-timeout") > 0;
  o->np_given = app.count("--np") > 0;
  o->elastic_timeout_given = app.count("--elastic-timeout") > 0;
  o->slots_per_host_given = app.count("--slots-per-host") > 0;
  if (!o->Elastic()) {
    for (const char* name :
         {"--reset-limit", "--blacklist-cooldown-range", "--elastic-timeout", "--slots-per-host"}) {
      if (app.count(name) > 0) {
        return Fail(std::string(name) +
                    " applies to elastic mode, which --min-np, --max-np or "
                    "--host-discovery-script turns on");
      }
    }
  }
  if (app.count("--monitor") > 0) {
    Result<int> port = MonitorPort(monitor);
    if (!port.ok()) return Fail(port.status().message());
    o->monitor_port = port.value();
  }
  if (app.count("--monitor-address") > 0 && o->monitor_port < 0) {
    return Fail("--monitor-address says where --monitor listens; add --monitor");
  }
  // prefix_command(): the first argument kolorun does not know, and all after it.
  o->command = app.remaining();
  if (!o->command.empty() && o->command.front() == "--") {
    o->command.erase(o->command.begin());
  } else if (!o->command.empty() && LooksLikeOption(o->command.front())) {
    // Not the program: a misspelt or unknown option (which would run as the program).
    return Fail(UnknownOptionMessage(o->command.front(), KnownOptionNames(app)));
  }
  return std::nullopt;
}

Status ApplyStartTimeoutVariable(const std::map<std::string, std::string>& environment,
                                 Options* o) {
  // KOLO_START_TIMEOUT, else Horovod's name (the settings table's rule: the KOLO_ name wins).
  auto it = environment.find("KOLO_START_TIMEOUT");
  if (it == environment.end()) it = environment.find("HOROVOD_START_TIMEOUT");
  if (o->start_timeout_given || it == environment.end()) return Status::OK();
  const std::string& text = it->second;
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(seconds > 0)) {
    return Status::InvalidArgument(it->first + "='" + text +
                                   "' is not a positive number of seconds");
  }
  o->start_timeout = seconds;
  return Status::OK();
}

Status ApplySshWaitVariable(const std::map<std::string, std::string>& environment, Options* o) {
  auto it = environment.find(env::kSshWait);
  if (o->ssh_wait >= 0 || it == environment.end()) return Status::OK();
  const std::string& text = it->second;
  char* end = nullptr;
  const double seconds = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !(seconds >= 0 && seconds <= kMaxSshWaitSeconds)) {
    return Status::InvalidArgument(it->first + "='" + text +
                                   "' is not a number of seconds from 0 to 86400");
  }
  o->ssh_wait = seconds;
  return Status::OK();
}

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
  if (o.autotune) s[env::kAutotune] = "1";
  if (!o.autotune_log.empty()) s[env::kAutotuneLog] = o.autotune_log;
  if (o.autotune_warmup_samples >= 0) {
    s[env::kAutotuneWarmupSamples] = std::to_string(o.autotune_warmup_samples);
  }
  if (o.autotune_steps_per_sample >= 0) {
    s[env::kAutotuneStepsPerSample] = std::to_string(o.autotune_steps_per_sample);
  }
  if (!o.autotune_file.empty()) s[env::kAutotuneFile] = o.autotune_file;
  if (o.pin_gpus) s[env::kPinGpus] = "1";
  return s;
}

}  // namespace kolo::launcher
