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

// Horovod's syntax for each kind of value (horovod/common/operations.cc,
// utils/env_parser.cc, logging.cc). Horovod parses with strtol/strtof and
// ignores what follows the number, so a value it would read differently from
// what it says is an error here rather than a silent difference.

bool IsWholeNumber(const std::string& t) {
  size_t digits = (!t.empty() && t[0] == '-') ? 1 : 0;
  return t.size() > digits && std::all_of(t.begin() + static_cast<std::ptrdiff_t>(digits), t.end(),
                                          [](unsigned char c) { return std::isdigit(c); });
}

// For the settings that Horovod does not have.
HorovodAlias NoHorovodName() { return {}; }

HorovodAlias Same(const char* name, const char* syntax) {
  return {name, syntax, [](const std::string& text) -> Result<std::string> { return text; }};
}

// HOROVOD_FUSION_THRESHOLD: strtol, bytes.
HorovodAlias WholeBytes(const char* name) {
  return {name, "whole bytes, no suffix", [](const std::string& text) -> Result<std::string> {
            if (!IsWholeNumber(Trim(text))) {
              return Status::InvalidArgument(
                  "is not a whole number of bytes (Horovod reads this variable as bytes and "
                  "ignores what follows the digits, so '64M' would be 64 bytes); write "
                  "67108864, or use the KOLO_ name, which accepts K/M/G suffixes");
            }
            return Trim(text);
          }};
}

// HOROVOD_STALL_*_SECONDS: strtol, seconds.
HorovodAlias WholeSeconds(const char* name) {
  return {name, "whole seconds", [](const std::string& text) -> Result<std::string> {
            if (!IsWholeNumber(Trim(text))) {
              return Status::InvalidArgument(
                  "is not a whole number of seconds (Horovod would read '1.5' as 1); use the "
                  "KOLO_ name for fractions of a second");
            }
            return Trim(text);
          }};
}

// HOROVOD_CYCLE_TIME: strtof, milliseconds; 0 means no pause between cycles.
HorovodAlias CycleMs(const char* name) {
  return {name, "milliseconds, > 0", [](const std::string& text) -> Result<std::string> {
            Result<double> v = ParseDouble(text);
            if (v.ok() && v.value() == 0) {
              return Status::InvalidArgument(
                  "asks for no pause between cycles, which kolo does not need: a submitted "
                  "tensor starts a round at once, and the cycle time only paces rounds that "
                  "wait for other ranks; unset it, or use a positive value such as 0.1");
            }
            return text;
          }};
}

// Horovod's switches (HOROVOD_HIERARCHICAL_ALLREDUCE, ...): strtol(v) > 0.
HorovodAlias Switch(const char* name) {
  return {name, "integer, > 0 = on", [](const std::string& text) -> Result<std::string> {
            std::string t = Trim(text);
            if (t.empty()) return std::string("0");
            if (!IsWholeNumber(t)) {
              return Status::InvalidArgument(
                  "is not a number; Horovod reads this switch as an integer (> 0 = on) and would "
                  "read this value as off: use 1 or 0");
            }
            return std::string(t[0] != '-' && t.find_first_not_of('0') != std::string::npos ? "1"
                                                                                            : "0");
          }};
}

// HOROVOD_LOG_LEVEL: case-insensitive TRACE..FATAL. kolo's highest level,
// error, is what FATAL asks for: nothing below it.
HorovodAlias HorovodLogLevel(const char* name) {
  return {name, "`TRACE` to `FATAL`; `FATAL` = error",
          [](const std::string& text) -> Result<std::string> {
            std::string t = Lower(Trim(text));
            if (t == "fatal") return std::string("error");
            if (t == "trace" || t == "debug" || t == "info" || t == "warning" || t == "error") {
              return t;
            }
            return Status::InvalidArgument(
                "is not a Horovod log level (TRACE, DEBUG, INFO, WARNING, ERROR, FATAL)");
          }};
}

// HOROVOD_TIMELINE: a path; DYNAMIC = recorded only between start_timeline()
// and stop_timeline(), which kolo's start_timeline() does without a setting.
HorovodAlias TimelinePath(const char* name) {
  return {name, "path; `DYNAMIC` = off until `start_timeline()`",
          [](const std::string& text) -> Result<std::string> {
            return Trim(text) == "DYNAMIC" ? std::string() : Trim(text);
          }};
}

}  // namespace

const std::vector<Setting>& Settings() {
  static const std::vector<Setting> kSettings = {
      {env::kFusionThreshold, "67108864 (64 MiB)",
       "Bytes per fused allreduce buffer; 0 turns fusion off. Accepts K/M/G suffixes.",
       Into(&Config::fusion_threshold_bytes, ParseByteSize),
       WholeBytes("HOROVOD_FUSION_THRESHOLD")},
      {env::kCycleTime, "0.5",
       "Milliseconds between negotiation rounds while tensors are pending on some rank. A new "
       "tensor wakes the background thread at once; this only paces the rounds that wait for "
       "other ranks.",
       Milliseconds(&Config::cycle_time_ms), CycleMs("HOROVOD_CYCLE_TIME")},
      {env::kCacheCapacity, "1024",
       "Entries of the response cache (tensors negotiated with one bit-vector allreduce once "
       "seen); 0 turns the cache off.",
       Into(&Config::cache_capacity, ParseCacheCapacity),
       Same("HOROVOD_CACHE_CAPACITY", "whole number")},
      {env::kTimeline, "(off)",
       "Path of a Chrome-trace JSON timeline written by rank 0 (open in Perfetto or "
       "chrome://tracing).",
       Into(&Config::timeline_path, ParsePath), TimelinePath("HOROVOD_TIMELINE")},
      {env::kTimelineMarkCycles, "0", "Also mark every negotiation cycle in the timeline.",
       Into(&Config::timeline_mark_cycles, ParseBool), Switch("HOROVOD_TIMELINE_MARK_CYCLES")},
      {env::kStallCheckTime, "60",
       "Seconds a tensor may wait for other ranks before the coordinator logs which ranks are "
       "missing it.",
       Into(&Config::stall_check_seconds, ParseNonNegativeDouble),
       WholeSeconds("HOROVOD_STALL_CHECK_TIME_SECONDS")},
      // Finite by default, like PyTorch's process groups (10 minutes for NCCL): a
      // tensor that some rank never submits fails everywhere instead of hanging.
      {env::kStallShutdownTime, "600",
       "Seconds after which a stalled tensor fails on every rank with an error naming the "
       "missing ranks; 0 = never. The default, 10 minutes, is PyTorch's NCCL process-group "
       "timeout: long enough for a checkpoint or an evaluation on one rank, short enough "
       "that a hang ends with a message.",
       Into(&Config::stall_shutdown_seconds, ParseNonNegativeDouble),
       WholeSeconds("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")},
      {env::kStallCheckDisable, "0", "Turns the stall warnings and the stall shutdown off.",
       Into(&Config::stall_check_disabled, ParseBool), Switch("HOROVOD_STALL_CHECK_DISABLE")},
      {env::kLogLevel, "warning", "trace, debug, info, warning or error.",
       Into(&Config::log_level, ParseLogLevel), HorovodLogLevel("HOROVOD_LOG_LEVEL")},
      {env::kHierarchicalAllreduce, "0",
       "Allreduce in three steps on process sets that span hosts: reduce-scatter within each "
       "host, allreduce across hosts, allgather within the host (MPI for host memory, NCCL for "
       "GPU memory). Needs the same number of the set's ranks on every host; otherwise flat.",
       Into(&Config::hierarchical_allreduce, ParseBool), Switch("HOROVOD_HIERARCHICAL_ALLREDUCE")},
      {env::kIdleTick, "100",
       "Milliseconds between negotiation rounds when this rank has nothing pending (keeps stall "
       "checks and shutdown moving).",
       Milliseconds(&Config::idle_tick_ms), NoHorovodName()},
      {env::kPieceSize, "2097152 (2 MiB)",
       "Large allreduce buffers are reduced in pieces of at most this many bytes, so that each "
       "piece stays in cache; 0 = one call per buffer. Accepts K/M/G suffixes.",
       Into(&Config::piece_bytes, ParseByteSize), NoHorovodName()},
      {env::kInPlaceThreshold, "262144 (256 KiB)",
       "Tensors at least this large are reduced in place, in pieces, instead of being copied "
       "into the fusion buffer. Accepts K/M/G suffixes.",
       Into(&Config::in_place_threshold_bytes, ParseByteSize), NoHorovodName()},
      {env::kShmAllreduce, "1",
       "When every rank of a process set runs on one host, allreduce through one shared-memory "
       "segment (/dev/shm, 2 x KOLO_PIECE_SIZE per rank) instead of MPI; 0 = always MPI. Off "
       "when KOLO_PIECE_SIZE is 0.",
       Into(&Config::shm_allreduce, ParseBool), NoHorovodName()},
  };
  return kSettings;
}

const std::vector<UnsupportedHorovodVariable>& UnsupportedHorovodVariables() {
  // Set per rank by horovodrun in Gloo mode: a job started that way does not
  // get its ranks from MPI, which kolo needs.
  static const char* const kFromMpi =
      "kolo takes the ranks from MPI; start the job with kolorun or mpirun";
  static const std::vector<UnsupportedHorovodVariable> kUnsupported = {
      {"HOROVOD_AUTOTUNE*",
       "autotuning is not supported; kolo's defaults are measured (docs/performance.md): set "
       "KOLO_FUSION_THRESHOLD and KOLO_CYCLE_TIME yourself"},
      {"HOROVOD_HIERARCHICAL_ALLGATHER",
       "kolo's allgather is flat (the results are the same); KOLO_HIERARCHICAL_ALLREDUCE covers "
       "allreduce"},
      {"HOROVOD_TORUS_ALLREDUCE", "use KOLO_HIERARCHICAL_ALLREDUCE"},
      {"HOROVOD_ADASUM_MPI_CHUNK_SIZE", "Adasum is not supported"},
      {"HOROVOD_NUM_NCCL_STREAMS", "kolo runs NCCL on one stream per device"},
      {"HOROVOD_CPU_OPERATIONS",
       "kolo reduces host tensors with MPI, or through shared memory when a process set is on "
       "one host (KOLO_SHM_ALLREDUCE)"},
      {"HOROVOD_CONTROLLER", "kolo negotiates over MPI"},
      {"HOROVOD_GLOO*",
       "kolo runs on MPI, not Gloo; choose the network interface with kolorun "
       "--network-interface"},
      {"HOROVOD_CCL*", "kolo has no oneCCL backend"},
      {"HOROVOD_MPI_THREADS_DISABLE",
       "kolo calls MPI from its background thread and initializes MPI with "
       "MPI_THREAD_MULTIPLE (or uses the level the application chose, at least SERIALIZED)"},
      {"HOROVOD_THREAD_AFFINITY", "bind the ranks with kolorun --binding core instead"},
      {"HOROVOD_BATCH_D2D_MEMCOPIES", "kolo's device copies are not configurable"},
      {"HOROVOD_DISABLE_GROUP_FUSION",
       "not configurable; KOLO_FUSION_THRESHOLD=0 turns all fusion off"},
      {"HOROVOD_ENABLE_ASYNC_COMPLETION", "not configurable"},
      {"HOROVOD_ENABLE_XLA_OPS", "kolo has no XLA (TensorFlow) ops"},
      {"HOROVOD_DISABLE_NVTX_RANGES", "kolo emits no NVTX ranges; KOLO_TIMELINE records the ops"},
      {"HOROVOD_DYNAMIC_PROCESS_SETS",
       "not needed, kolo's add_process_set() and remove_process_set() always work"},
      {"HOROVOD_LOG_HIDE_TIME", "kolo's log lines carry no time stamp"},
      {"HOROVOD_ELASTIC*", "elastic training is not supported"},
      {"HOROVOD_RANK", kFromMpi},
      {"HOROVOD_SIZE", kFromMpi},
      {"HOROVOD_LOCAL_RANK", kFromMpi},
      {"HOROVOD_LOCAL_SIZE", kFromMpi},
      {"HOROVOD_CROSS_RANK", kFromMpi},
      {"HOROVOD_CROSS_SIZE", kFromMpi},
      {"HOROVOD_HOSTNAME", kFromMpi},
  };
  return kUnsupported;
}

namespace {

bool StartsWith(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// `name` is `family` or extends it (HOROVOD_AUTOTUNE_LOG for HOROVOD_AUTOTUNE).
bool InFamily(const std::string& name, const std::string& family) {
  return name == family ||
         (name.size() > family.size() + 1 && name.compare(0, family.size(), family) == 0 &&
          name[family.size()] == '_');
}

// An entry of UnsupportedHorovodVariables(): "NAME", or "NAME*" for the family.
bool Matches(const std::string& name, const std::string& entry) {
  if (entry.empty() || entry.back() != '*') return name == entry;
  return InFamily(name, entry.substr(0, entry.size() - 1));
}

// Variables that only Horovod's build reads (pip install horovod): often left
// exported in a Dockerfile or a shell profile after building Horovod. They
// mean nothing at run time in Horovod either, so kolo ignores them silently;
// warning on every job would teach users to ignore kolo's warnings.
// HOROVOD_START_TIMEOUT is the launcher's (kolorun honours it).
bool IsHorovodBuildOrLauncherVariable(const std::string& name) {
  static const char* const kFamilies[] = {"HOROVOD_WITH",
                                          "HOROVOD_WITHOUT",
                                          "HOROVOD_GPU",
                                          "HOROVOD_CUDA",
                                          "HOROVOD_ROCM",
                                          "HOROVOD_NCCL",
                                          "HOROVOD_BUILD",
                                          "HOROVOD_MPICXX_SHOW",
                                          "HOROVOD_CMAKE",
                                          "HOROVOD_DEBUG",
                                          "HOROVOD_ALLOW_MIXED_GPU_IMPL",
                                          "HOROVOD_START_TIMEOUT"};
  for (const char* f : kFamilies) {
    if (InFamily(name, f)) return true;
  }
  return false;
}

const Setting* FindSetting(const std::string& name) {
  for (const Setting& s : Settings()) {
    if (name == s.name) return &s;
  }
  return nullptr;
}

const Setting* FindHorovodAlias(const std::string& name) {
  for (const Setting& s : Settings()) {
    if (*s.horovod.name != '\0' && name == s.horovod.name) return &s;
  }
  return nullptr;
}

const UnsupportedHorovodVariable* FindUnsupported(const std::string& name) {
  for (const UnsupportedHorovodVariable& u : UnsupportedHorovodVariables()) {
    if (Matches(name, u.name)) return &u;
  }
  return nullptr;
}

using Source = std::vector<std::pair<std::string, std::string>>;

// Sorts the names that are no setting into `notes`.
void NoteUnknownNames(const Source& source, ConfigNotes* notes) {
  for (const auto& [name, value] : source) {
    if (FindSetting(name) != nullptr || FindHorovodAlias(name) != nullptr) continue;
    if (!StartsWith(name, "HOROVOD_")) {
      notes->unknown.push_back(name);
    } else if (FindUnsupported(name) != nullptr) {
      notes->horovod_unsupported.push_back(name);
    } else if (!IsHorovodBuildOrLauncherVariable(name)) {
      notes->horovod_unknown.push_back(name);
    }
  }
}

Status Apply(const Setting& setting, const std::string& name, const std::string& value,
             Config* config) {
  Status s = setting.parse(value, config);
  if (!s.ok()) return Status::InvalidArgument(name + "='" + value + "' " + s.message());
  return Status::OK();
}

// Reads the HOROVOD_* aliases whose KOLO_ name is set in no source (the last
// source that sets one wins), before any KOLO_ name is read.
Status ApplyHorovodAliases(const std::vector<const Source*>& sources, Config* config,
                           ConfigNotes* notes) {
  for (const Setting& setting : Settings()) {
    if (*setting.horovod.name == '\0') continue;
    const std::pair<std::string, std::string>* alias = nullptr;
    bool kolo_set = false;
    for (const Source* source : sources) {
      for (const auto& entry : *source) {
        if (entry.first == setting.horovod.name) alias = &entry;
        kolo_set |= entry.first == setting.name;
      }
    }
    if (alias == nullptr) continue;
    const std::string& value = alias->second;
    if (kolo_set) {
      notes->aliases_overridden.push_back({alias->first, value, setting.name, ""});
      continue;
    }
    Result<std::string> translated = setting.horovod.translate(value);
    if (!translated.ok()) {
      return Status::InvalidArgument(alias->first + "='" + value + "' " +
                                     translated.status().message());
    }
    KOLO_RETURN_IF_ERROR(Apply(setting, alias->first, translated.value(), config));
    notes->aliases_used.push_back({alias->first, value, setting.name, translated.value()});
  }
  return Status::OK();
}

}  // namespace

std::string ClosestSettingName(const std::string& name) {
  std::vector<std::string> candidates;
  for (const Setting& s : Settings()) {
    candidates.push_back(s.name);
    if (*s.horovod.name != '\0') candidates.push_back(s.horovod.name);
  }
  for (const UnsupportedHorovodVariable& u : UnsupportedHorovodVariables()) {
    std::string entry = u.name;
    if (!entry.empty() && entry.back() == '*') entry.pop_back();
    candidates.push_back(entry);
  }
  std::string best;
  size_t best_distance = 5;
  for (const std::string& candidate : candidates) {
    size_t d = EditDistance(name, candidate);
    if (d < best_distance) {
      best_distance = d;
      best = candidate;
    }
  }
  return best;
}

Result<Config> ParseConfig(const Source& environment, const Source& overrides, ConfigNotes* notes) {
  ConfigNotes ignored;
  if (notes == nullptr) notes = &ignored;
  Config config;
  KOLO_RETURN_IF_ERROR(ApplyHorovodAliases({&environment, &overrides}, &config, notes));
  for (const Source* source : {&environment, &overrides}) {
    NoteUnknownNames(*source, notes);
    for (const auto& [name, value] : *source) {
      const Setting* setting = FindSetting(name);
      if (setting != nullptr) KOLO_RETURN_IF_ERROR(Apply(*setting, name, value, &config));
    }
  }
  if (config.stall_shutdown_seconds > 0 && !config.stall_check_disabled &&
      config.stall_shutdown_seconds < config.stall_check_seconds) {
    // A shutdown before the first warning would fail jobs without a diagnosis.
    config.stall_check_seconds = config.stall_shutdown_seconds;
  }
  return config;
}

Result<Config> ParseConfig(const Source& environment, const Source& overrides,
                           std::vector<std::string>* unknown) {
  ConfigNotes notes;
  Result<Config> config = ParseConfig(environment, overrides, &notes);
  if (unknown != nullptr) {
    *unknown = notes.unknown;
    unknown->insert(unknown->end(), notes.horovod_unknown.begin(), notes.horovod_unknown.end());
  }
  return config;
}

std::string ConfigNotes::AliasLine() const {
  std::string used, overridden;
  for (const Alias& a : aliases_used) {
    used += (used.empty() ? "using " : ", ") + a.horovod_name + "=" + a.horovod_value + " as " +
            a.kolo_name;
    if (a.kolo_value != a.horovod_value) {
      used += "=" + (a.kolo_value.empty() ? std::string("''") : a.kolo_value);
    }
  }
  for (const Alias& a : aliases_overridden) {
    overridden += (overridden.empty() ? "not using " : ", ") + a.horovod_name + " (" + a.kolo_name +
                  " is set and wins)";
  }
  if (used.empty() && overridden.empty()) return "";
  return "Horovod settings: " + used + (used.empty() || overridden.empty() ? "" : "; ") +
         overridden;
}

std::vector<std::string> ConfigNotes::Warnings() const {
  std::vector<std::string> out;
  auto did_you_mean = [](const std::string& name) {
    std::string close = ClosestSettingName(name);
    return close.empty() ? std::string() : "; did you mean " + close + "?";
  };
  for (const std::string& name : unknown) {
    out.push_back(name + " is not a kolo setting and is ignored" + did_you_mean(name));
  }
  for (const std::string& name : horovod_unsupported) {
    out.push_back(name + " is ignored: " + FindUnsupported(name)->instead);
  }
  for (const std::string& name : horovod_unknown) {
    out.push_back(name + " is not a Horovod setting that kolo knows and is ignored" +
                  did_you_mean(name));
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> KoloEnvironment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "KOLO_", 5) != 0 && std::strncmp(*e, "HOROVOD_", 8) != 0) continue;
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    out.emplace_back(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return out;
}

std::string SettingsMarkdownTable() {
  std::string out = "| variable | default | meaning | Horovod alias |\n| --- | --- | --- | --- |\n";
  for (const Setting& s : Settings()) {
    std::string alias = *s.horovod.name == '\0'
                            ? std::string("—")
                            : std::string("`") + s.horovod.name + "` (" + s.horovod.syntax + ")";
    out += std::string("| `") + s.name + "` | " + s.default_text + " | " + s.meaning + " | " +
           alias + " |\n";
  }
  return out;
}

std::string UnsupportedHorovodMarkdownTable() {
  std::string out =
      "| Horovod variable (`*`: and the names that extend it) | kolo |\n| --- | --- |\n";
  for (const UnsupportedHorovodVariable& u : UnsupportedHorovodVariables()) {
    out += std::string("| `") + u.name + "` | ignored: " + u.instead + " |\n";
  }
  return out;
}

}  // namespace kolo
