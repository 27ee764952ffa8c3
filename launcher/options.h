// kolorun's command line: the options, how they are read (horovodrun's flags
// translated first), and the KOLO_* settings they ask for.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kolo/status.h"

namespace kolo::launcher {

// The longest --ssh-wait (a day): a bound for the timers it sets.
constexpr double kMaxSshWaitSeconds = 86400;

struct Options {
  int np = 0;  // 0: every slot
  std::string hosts, hostfile;
  int ssh_port = 0;
  std::string ssh_identity_file;
  double start_timeout = 30;
  bool start_timeout_given = false;  // else HOROVOD_START_TIMEOUT, as horovodrun reads it
  // --ssh-wait, else KOLO_SSH_WAIT: how long the remote hosts' ssh may take to
  // come up; -1 until set, then the host source's default (ChooseHosts).
  double ssh_wait = -1;
  std::vector<std::string> network_interfaces, env_vars;
  std::string mpi_args, binding = "none";
  std::string mpi;  // --mpi-home: an mpirun or an Open MPI prefix (else KOLO_MPI_HOME)
  double fusion_threshold_mb = -1, cycle_time_ms = -1, stall_warning = -1, stall_shutdown = -1;
  int cache_capacity = -1;
  bool hierarchical = false, timeline_mark_cycles = false, no_stall_check = false;
  std::string timeline, log_level, output_dir;
  bool autotune = false;
  std::string autotune_log, autotune_file;
  int autotune_warmup_samples = -1, autotune_steps_per_sample = -1;
  bool verbose = false, dry_run = false, check_build = false, pin_gpus = false;
  // The monitor (docs/monitoring.md): --monitor[=PORT] serves it (-1: off, 0: any
  // free port); --no-progress turns the terminal's status line off.
  int monitor_port = -1;
  std::string monitor_address = "127.0.0.1";
  bool no_progress = false;
  // Elastic mode (elastic.h): on when --min-np, --max-np or --host-discovery-script is given.
  bool np_given = false;
  int min_np = 0, max_np = 0;  // 0: not given
  std::string discovery_script;
  int slots_per_host = 1;             // for the discovery script's lines without ":slots"
  bool slots_per_host_given = false;  // else the allocation's slots, with its own script
  int reset_limit = -1;               // -1: no limit
  std::vector<int> cooldown_range;    // --blacklist-cooldown-range MIN MAX, or empty
  double elastic_timeout = 600;
  bool elastic_timeout_given = false;  // else KOLO_ELASTIC_TIMEOUT / HOROVOD_ELASTIC_TIMEOUT
  bool Elastic() const { return min_np > 0 || max_np > 0 || !discovery_script.empty(); }
  std::vector<std::string> command;  // the program and its arguments
};

// How kolorun stops: "kolorun: <message>" on stderr; returns `code`.
int Fail(const std::string& message, int code = 2);

// Reads argv into `o`. Returns kolorun's exit code when it must stop here
// (--help, --version, a bad or refused flag, each already reported), or
// nothing when the job should go on.
std::optional<int> ParseCommandLine(int argc, char** argv, Options* o);

// Applies HOROVOD_START_TIMEOUT from `environment` unless --start-timeout was
// given; an error names the variable and the value.
Status ApplyStartTimeoutVariable(const std::map<std::string, std::string>& environment, Options* o);

// Applies KOLO_SSH_WAIT from `environment` unless --ssh-wait was given; an
// error names the variable and the value.
Status ApplySshWaitVariable(const std::map<std::string, std::string>& environment, Options* o);

// The KOLO_* settings (and KOLORUN_PIN_GPUS) that the options ask for.
std::map<std::string, std::string> RuntimeSettings(const Options& o);

}  // namespace kolo::launcher
