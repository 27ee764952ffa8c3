#include "config.h"

#include "kolo/env_names.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace kolo {
namespace {

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// Parses a whole string as a finite double; no trailing garbage.
Result<double> ParseDouble(const std::string& raw) {
  std::string text = Trim(raw);
  if (text.empty()) return Status::InvalidArgument("is empty; expected a number");
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || errno == ERANGE || !std::isfinite(v)) {
    return Status::InvalidArgument("is not a number");
  }
  return v;
}

Result<int64_t> ParseNonNegativeInt(const std::string& raw) {
  std::string text = Trim(raw);
  if (text.empty()) return Status::InvalidArgument("is empty; expected a whole number");
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (end != text.c_str() + text.size() || errno == ERANGE) {
    return Status::InvalidArgument("is not a whole number");
  }
  if (v < 0) return Status::InvalidArgument("is negative");
  return static_cast<int64_t>(v);
}

Status ParsePositiveMs(const std::string& text, double* out) {
  Result<double> v = ParseDouble(text);
  if (!v.ok()) return v.status();
  if (v.value() <= 0) return Status::InvalidArgument("must be greater than 0 (milliseconds)");
  if (v.value() > 60000) return Status::InvalidArgument("is more than 60000 ms");
  *out = v.value();
  return Status::OK();
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

Result<int64_t> ParseByteSize(const std::string& raw) {
  std::string text = Trim(raw);
  size_t num_end = 0;
  while (num_end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[num_end])) || text[num_end] == '.')) {
    ++num_end;
  }
  if (num_end == 0) return Status::InvalidArgument("is not a size (expected e.g. 67108864 or 64M)");
  Result<double> number = ParseDouble(text.substr(0, num_end));
  if (!number.ok()) return Status::InvalidArgument("is not a size (expected e.g. 67108864 or 64M)");
  std::string unit = Lower(Trim(text.substr(num_end)));
  double scale = 1;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k" || unit == "kb" || unit == "kib") {
    scale = 1024.0;
  } else if (unit == "m" || unit == "mb" || unit == "mib") {
    scale = 1024.0 * 1024;
  } else if (unit == "g" || unit == "gb" || unit == "gib") {
    scale = 1024.0 * 1024 * 1024;
  } else {
    return Status::InvalidArgument("has an unknown unit '" + unit + "' (use K, M or G)");
  }
  double bytes = number.value() * scale;
  if (bytes > 1e15) return Status::InvalidArgument("is too large");
  return static_cast<int64_t>(bytes);
}

Result<double> ParseNonNegativeDouble(const std::string& text) {
  Result<double> v = ParseDouble(text);
  if (!v.ok()) return v.status();
  if (v.value() < 0) return Status::InvalidArgument("is negative");
  return v.value();
}

Result<bool> ParseBool(const std::string& raw) {
  std::string t = Lower(Trim(raw));
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off" || t.empty()) return false;
  return Status::InvalidArgument("is not a boolean (use 1/0, true/false, yes/no, on/off)");
}

Result<LogLevel> ParseLogLevel(const std::string& raw) {
  std::string t = Lower(Trim(raw));
  if (t == "trace") return LogLevel::kTrace;
  if (t == "debug") return LogLevel::kDebug;
  if (t == "info") return LogLevel::kInfo;
  if (t == "warning" || t == "warn") return LogLevel::kWarning;
  if (t == "error") return LogLevel::kError;
  return Status::InvalidArgument("is not a log level (use trace, debug, info, warning, error)");
}

namespace {

// Parsers that store into one field of Config.
using Parser = std::function<Status(const std::string&, Config*)>;

template <typename T, typename Parse>
Parser Into(T Config::*field, Parse parse) {
  return [field, parse](const std::string& text, Config* c) -> Status {
    auto v = parse(text);
    if (!v.ok()) return v.status();
    c->*field = v.value();
    return Status::OK();
  };
}

Parser Milliseconds(double Config::*field) {
  return
      [field](const std::string& text, Config* c) { return ParsePositiveMs(text, &(c->*field)); };
}

Result<int64_t> ParseCacheCapacity(const std::string& text) {
  Result<int64_t> v = ParseNonNegativeInt(text);
  if (v.ok() && v.value() > (1 << 20)) return Status::InvalidArgument("is more than 1048576");
  return v;
}

Result<std::string> ParsePath(const std::string& text) { return Trim(text); }

}  // namespace

const std::vector<Setting>& Settings() {
  static const std::vector<Setting> kSettings = {
      {env::kFusionThreshold, "67108864 (64 MiB)",
       "Bytes per fused allreduce buffer; 0 turns fusion off. Accepts K/M/G suffixes.",
       Into(&Config::fusion_threshold_bytes, ParseByteSize)},
      {env::kCycleTime, "0.5",
       "Milliseconds between negotiation rounds while tensors are pending on some rank. A new "
       "tensor wakes the background thread at once; this only paces the rounds that wait for "
       "other ranks.",
       Milliseconds(&Config::cycle_time_ms)},
      {env::kCacheCapacity, "1024",
       "Entries of the response cache (tensors negotiated with one bit-vector allreduce once "
       "seen); 0 turns the cache off.",
       Into(&Config::cache_capacity, ParseCacheCapacity)},
      {env::kTimeline, "(off)",
       "Path of a Chrome-trace JSON timeline written by rank 0 (open in Perfetto or "
       "chrome://tracing).",
       Into(&Config::timeline_path, ParsePath)},
      {env::kTimelineMarkCycles, "0", "Also mark every negotiation cycle in the timeline.",
       Into(&Config::timeline_mark_cycles, ParseBool)},
      {env::kStallCheckTime, "60",
       "Seconds a tensor may wait for other ranks before the coordinator logs which ranks are "
       "missing it.",
       Into(&Config::stall_check_seconds, ParseNonNegativeDouble)},
      // Finite by default, like PyTorch's process groups (10 minutes for NCCL): a
      // tensor that some rank never submits fails everywhere instead of hanging.
      {env::kStallShutdownTime, "600",
       "Seconds after which a stalled tensor fails on every rank with an error naming the "
       "missing ranks; 0 = never. The default, 10 minutes, is PyTorch's NCCL process-group "
       "timeout: long enough for a checkpoint or an evaluation on one rank, short enough "
       "that a hang ends with a message.",
       Into(&Config::stall_shutdown_seconds, ParseNonNegativeDouble)},
      {env::kStallCheckDisable, "0", "Turns the stall warnings and the stall shutdown off.",
       Into(&Config::stall_check_disabled, ParseBool)},
      {env::kLogLevel, "warning", "trace, debug, info, warning or error.",
       Into(&Config::log_level, ParseLogLevel)},
      {env::kHierarchicalAllreduce, "0",
       "Allreduce in three steps on process sets that span hosts: reduce-scatter within each "
       "host, allreduce across hosts, allgather within the host (MPI for host memory, NCCL for "
       "GPU memory). Needs the same number of the set's ranks on every host; otherwise flat.",
       Into(&Config::hierarchical_allreduce, ParseBool)},
      {env::kIdleTick, "100",
       "Milliseconds between negotiation rounds when this rank has nothing pending (keeps stall "
       "checks and shutdown moving).",
       Milliseconds(&Config::idle_tick_ms)},
      {env::kPieceSize, "2097152 (2 MiB)",
       "Large allreduce buffers are reduced in pieces of at most this many bytes, so that each "
       "piece stays in cache; 0 = one call per buffer. Accepts K/M/G suffixes.",
       Into(&Config::piece_bytes, ParseByteSize)},
      {env::kInPlaceThreshold, "262144 (256 KiB)",
       "Tensors at least this large are reduced in place, in pieces, instead of being copied "
       "into the fusion buffer. Accepts K/M/G suffixes.",
       Into(&Config::in_place_threshold_bytes, ParseByteSize)},
      {env::kShmAllreduce, "1",
       "When every rank of a process set runs on one host, allreduce through one shared-memory "
       "segment (/dev/shm, 2 x KOLO_PIECE_SIZE per rank) instead of MPI; 0 = always MPI. Off "
       "when KOLO_PIECE_SIZE is 0.",
       Into(&Config::shm_allreduce, ParseBool)},
  };
  return kSettings;
}

std::string ClosestSettingName(const std::string& name) {
  std::string best;
  size_t best_distance = 5;
  for (const Setting& s : Settings()) {
    size_t d = EditDistance(name, s.name);
    if (d < best_distance) {
      best_distance = d;
      best = s.name;
    }
  }
  return best;
}

Result<Config> ParseConfig(const std::vector<std::pair<std::string, std::string>>& environment,
                           const std::vector<std::pair<std::string, std::string>>& overrides,
                           std::vector<std::string>* unknown) {
  Config config;
  for (const auto* source : {&environment, &overrides}) {
    for (const auto& entry : *source) {
      const std::string& name = entry.first;
      const std::string& value = entry.second;
      auto it = std::find_if(Settings().begin(), Settings().end(),
                             [&name](const Setting& s) { return name == s.name; });
      if (it == Settings().end()) {
        if (unknown != nullptr) unknown->push_back(name);
        continue;
      }
      Status s = it->parse(value, &config);
      if (!s.ok()) {
        return Status::InvalidArgument(name + "='" + value + "' " + s.message());
      }
    }
  }
  if (config.stall_shutdown_seconds > 0 && !config.stall_check_disabled &&
      config.stall_shutdown_seconds < config.stall_check_seconds) {
    // A shutdown before the first warning would fail jobs without a diagnosis.
    config.stall_check_seconds = config.stall_shutdown_seconds;
  }
  return config;
}

std::vector<std::pair<std::string, std::string>> KoloEnvironment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "KOLO_", 5) != 0) continue;
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    out.emplace_back(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return out;
}

}  // namespace kolo

namespace kolo {

std::string SettingsMarkdownTable() {
  std::string out = "| variable | default | meaning |\n| --- | --- | --- |\n";
  for (const Setting& s : Settings()) {
    out += std::string("| `") + s.name + "` | " + s.default_text + " | " + s.meaning + " |\n";
  }
  return out;
}

}  // namespace kolo
