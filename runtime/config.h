// The runtime's configuration: one table of settings (name, field, meaning,
// Horovod alias), read once at init from the environment and then from
// init()'s overrides. Each default is written once, as Config's member
// initializer; the table and docs/configuration.md show it from Config{}.
// runtime/config_table.cc holds the table, runtime/config_horovod.cc the
// readings of Horovod's variables, runtime/config.cc reads them all.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kolo/status.h"

namespace kolo {

enum class LogLevel : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarning = 3, kError = 4 };

struct Config {
  int64_t fusion_threshold_bytes = 64LL << 20;
  double cycle_time_ms = 0.5;
  int64_t cache_capacity = 1024;
  std::string timeline_path;
  bool timeline_mark_cycles = false;
  double stall_check_seconds = 60.0;
  double stall_shutdown_seconds = 600.0;  // see config_table.cc: PyTorch's NCCL default
  bool stall_check_disabled = false;
  LogLevel log_level = LogLevel::kWarning;
  double idle_tick_ms = 100.0;
  bool caller_runs = true;  // a caller waiting for a host operation may run its cycle
  int64_t piece_bytes = 2LL << 20;
  int64_t in_place_threshold_bytes = 256LL << 10;
  bool shm_allreduce = true;
  bool shm_negotiation = true;  // the negotiation round through shared memory within a host
  bool shm_single_copy = true;
  bool hierarchical_allreduce = false;
  bool async_completion = false;  // GPU: stream-ordered completion (ops/gpu.h GpuOptions)
  int64_t nccl_group_min_bytes = 0;
  bool autotune = false;
  std::string autotune_log;  // CSV of every sample (rank 0)
  int64_t autotune_warmup_samples = 3;
  int64_t autotune_steps_per_sample = 10;
  std::string autotune_file;  // the tuned settings: written when tuning ends, read at init
  std::string python = "/usr/bin/python3";  // read by kolorun --check-build, not by the runtime
  // KOLO_MPI_HOME: the MPI kolorun runs and kolo's package loads; kolorun
  // (launcher/mpi_choice.h) and kolo/_mpi_library.py read it, not the runtime.
  std::string mpi_home;
  // KOLO_MPI_ABI: which library of such an installation kolo's package loads ("" = its
  // own ABI's); kolo/_mpi_library.py reads it, not the runtime.
  std::string mpi_abi;
  double start_timeout_seconds = 30.0;  // kolorun's --start-timeout default, not the runtime's
  double ssh_wait_seconds = 0.0;        // kolorun's --ssh-wait (its default depends on the hosts)
  double elastic_timeout_seconds = 600.0;  // kolorun's --elastic-timeout default (Horovod's)
  // Set by kolorun in elastic mode for the Python side (not read by the runtime).
  bool elastic = false;
  bool elastic_in_place = false;      // KOLO_ELASTIC_IN_PLACE (ops/ulfm.h reads the variable)
  bool elastic_replacement = false;   // KOLO_ELASTIC_REPLACEMENT (runtime/replacements.cc reads it)
  bool elastic_grow_in_place = true;  // KOLO_ELASTIC_GROW_IN_PLACE (read by kolo.common.elastic)
  bool tf_ops = true;                 // read by kolo.tensorflow, not by the runtime
  // Set by kolorun: where the counters go once a second ("token@address:port"), or "".
  std::string monitor_report;
  std::string elastic_job;
  int64_t elastic_generation = 0;
  std::string elastic_dir = "/dev/shm";
};

// How a HOROVOD_* value reads: the value Horovod reads, written in the kolo
// setting's syntax, and, when that reading differs from what the text seems
// to say, why (for one warning on rank 0), e.g. HOROVOD_FUSION_THRESHOLD=64M,
// which Horovod's strtol reads as 64 bytes.
struct HorovodReading {
  std::string value;
  std::string note;  // "" when the text says what Horovod reads
};

// A kolo setting's Horovod variable. Horovod's runtime reads its variables
// with strtol/strtof (utils/env_parser.cc, operations.cc,
// parameter_manager.cc), which skip leading spaces, stop at the first
// character that is no part of a number and read a text without one as 0;
// `translate` reads a value the same way. Only a value that Horovod itself
// refuses (horovodrun's int() of its timeouts) is an error, as a message
// without the variable name.
struct HorovodAlias {
  const char* name = "";    // "" when Horovod has no such variable
  const char* syntax = "";  // how Horovod reads the value, for the docs
  std::function<Result<HorovodReading>(const std::string& text)> translate;
};

// How a setting reads and shows its field of Config. The table builds one
// from the field's member pointer (config_table.cc: Bytes, Milliseconds, ...),
// so that parsing and showing cannot reach different fields.
struct SettingField {
  // Parses `text` into the field of `config`, or returns a message saying
  // what is wrong with it (without the variable name, which the caller adds).
  std::function<Status(const std::string& text, Config* config)> parse;
  // The field's value in `config`, as `parse` reads it back ("67108864").
  std::function<std::string(const Config& config)> format;
  // The same value for a reader of the docs ("67108864 (64 MiB)", "(off)").
  std::function<std::string(const Config& config)> describe;
};

struct Setting {
  const char* name;
  SettingField field;
  const char* meaning;
  // The KOLO_ name wins when both are set.
  HorovodAlias horovod;
};

// Every setting kolo reads, in documentation order.
const std::vector<Setting>& Settings();
// The setting named `name` (its KOLO_ name), or null.
const Setting* FindSetting(const std::string& name);

// A Horovod runtime variable that kolo does not support, and what to use
// instead; rank 0 warns when one is set.
struct UnsupportedHorovodVariable {
  // A name; "NAME*" stands for NAME and the names that extend it
  // (HOROVOD_AUTOTUNE*: HOROVOD_AUTOTUNE_LOG, ...).
  const char* name;
  const char* instead;  // follows "HOROVOD_X is ignored: "
};
const std::vector<UnsupportedHorovodVariable>& UnsupportedHorovodVariables();

// What reading the configuration noticed, for rank 0 to log.
struct ConfigNotes {
  struct Alias {
    std::string horovod_name, horovod_value, kolo_name, kolo_value;
  };
  std::vector<std::string> unknown;              // KOLO_* names that are no setting (typos)
  std::vector<Alias> aliases_used;               // HOROVOD_* read as their KOLO_* setting
  std::vector<Alias> aliases_overridden;         // HOROVOD_* not read: the KOLO_ name is set
  std::vector<std::string> horovod_unsupported;  // HOROVOD_* that kolo ignores, with a warning
  std::vector<std::string> horovod_unknown;      // HOROVOD_* that Horovod does not read either
  // One line per HOROVOD_* value that reads as Horovod reads it, but not as
  // its text seems to say ("HOROVOD_FUSION_THRESHOLD='64M' is read ...").
  std::vector<std::string> horovod_misread;
  // The KOLO_ settings given in the environment or the overrides, directly or
  // through their HOROVOD_* alias (autotune holds them, and they win over
  // KOLO_AUTOTUNE_FILE).
  std::vector<std::string> given;

  bool Given(const std::string& kolo_name) const;

  // The one info line that names the HOROVOD_* variables read, and those not
  // read because their KOLO_ name is set; "" when there are none.
  std::string AliasLine() const;
  // One warning line per unknown or unsupported name, and per HOROVOD_*
  // value that Horovod reads otherwise than it seems to say.
  std::vector<std::string> Warnings() const;
};

// Reads `environment` (name -> value pairs, typically KoloEnvironment()) and
// then `overrides` (init()'s settings), which win. A HOROVOD_* alias is read
// only when its KOLO_ name is set in neither: the KOLO_ name always wins. A
// bad KOLO_ value fails naming the variable and the value; a HOROVOD_ value
// reads as Horovod reads it (HorovodAlias).
Result<Config> ParseConfig(const std::vector<std::pair<std::string, std::string>>& environment,
                           const std::vector<std::pair<std::string, std::string>>& overrides,
                           ConfigNotes* notes = nullptr);

// As above, returning only the unknown KOLO_* and HOROVOD_* names.
Result<Config> ParseConfig(const std::vector<std::pair<std::string, std::string>>& environment,
                           const std::vector<std::pair<std::string, std::string>>& overrides,
                           std::vector<std::string>* unknown);

// The KOLO_* and HOROVOD_* variables of this process's environment.
std::vector<std::pair<std::string, std::string>> KoloEnvironment();

// Parse helpers, exposed for tests.
Result<int64_t> ParseByteSize(const std::string& text);  // "1048576", "64M", "1.5GiB"
Result<double> ParseNonNegativeDouble(const std::string& text);
Result<bool> ParseBool(const std::string& text);  // 1/0, true/false, yes/no, on/off
Result<LogLevel> ParseLogLevel(const std::string& text);

// The KOLO_ setting, or the HOROVOD_ variable kolo knows, whose name is
// closest to `name` (for "did you mean"), or "".
std::string ClosestSettingName(const std::string& name);

// The Markdown table of every setting, for docs/configuration.md; each
// default is the setting's field described from Config{}.
std::string SettingsMarkdownTable();
// The Markdown table of the Horovod variables kolo ignores, for the same page.
std::string UnsupportedHorovodMarkdownTable();

}  // namespace kolo
