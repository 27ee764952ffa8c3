// The runtime's configuration: one table of settings (name, default, meaning,
// parser), read once at init from the environment and then from init()'s
// overrides. docs/configuration.md is generated from the same table.
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
  double stall_shutdown_seconds = 600.0;  // see config.cc: PyTorch's NCCL default
  bool stall_check_disabled = false;
  LogLevel log_level = LogLevel::kWarning;
  double idle_tick_ms = 100.0;
  int64_t piece_bytes = 2LL << 20;
  int64_t in_place_threshold_bytes = 256LL << 10;
  bool shm_allreduce = true;
  bool hierarchical_allreduce = false;
};

struct Setting {
  const char* name;
  const char* default_text;
  const char* meaning;
  // Parses `text` into the config, or returns a message saying what is wrong
  // with it (without the variable name, which the caller adds).
  std::function<Status(const std::string& text, Config* config)> parse;
};

// Every setting kolo reads, in documentation order.
const std::vector<Setting>& Settings();

// Reads `environment` (name -> value pairs, typically from environ) and then
// `overrides`. Unknown KOLO_* names are returned in `unknown` (the caller
// warns: a typo must not pass silently).
Result<Config> ParseConfig(const std::vector<std::pair<std::string, std::string>>& environment,
                           const std::vector<std::pair<std::string, std::string>>& overrides,
                           std::vector<std::string>* unknown);

// The KOLO_* variables of this process's environment.
std::vector<std::pair<std::string, std::string>> KoloEnvironment();

// Parse helpers, exposed for tests and the launcher's validation.
Result<int64_t> ParseByteSize(const std::string& text);  // "1048576", "64M", "1.5GiB"
Result<double> ParseNonNegativeDouble(const std::string& text);
Result<bool> ParseBool(const std::string& text);  // 1/0, true/false, yes/no, on/off
Result<LogLevel> ParseLogLevel(const std::string& text);

// The setting whose name is closest to `name` (for "did you mean"), or "".
std::string ClosestSettingName(const std::string& name);

}  // namespace kolo

namespace kolo {
// The Markdown table of every setting, for docs/configuration.md.
std::string SettingsMarkdownTable();
}  // namespace kolo
