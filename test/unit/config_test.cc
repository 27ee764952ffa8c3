#include "config.h"
#include "kolo/launch_settings.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <tuple>

namespace kolo {
namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

TEST(Config, DefaultsWithEmptyEnvironment) {
  Result<Config> c = ParseConfig({}, {});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().fusion_threshold_bytes, 64LL << 20);
  EXPECT_EQ(c.value().cache_capacity, 1024);
  EXPECT_EQ(c.value().stall_check_seconds, 60.0);
  EXPECT_EQ(c.value().stall_shutdown_seconds, 600.0);
  EXPECT_EQ(c.value().log_level, LogLevel::kWarning);
}

// Every field of Config, for comparing two configs whole.
auto Fields(const Config& c) {
  return std::tie(c.fusion_threshold_bytes, c.cycle_time_ms, c.cache_capacity, c.timeline_path,
                  c.timeline_mark_cycles, c.stall_check_seconds, c.stall_shutdown_seconds,
                  c.stall_check_disabled, c.log_level, c.idle_tick_ms, c.piece_bytes,
                  c.in_place_threshold_bytes, c.shm_allreduce, c.shm_single_copy, c.shm_negotiation,
                  c.hierarchical_allreduce, c.async_completion, c.nccl_group_min_bytes, c.python,
                  c.start_timeout_seconds);
}

// The defaults are written once, in Config's initializers; the table shows
// them through each setting's field. Reading back what the table shows must
// give Config{} again, or the docs would promise a default kolo does not use.
TEST(Config, TableDefaultsReadBackAsConfigDefaults) {
  const Config defaults;
  Env shown;
  for (const Setting& s : Settings()) shown.emplace_back(s.name, s.field.format(defaults));
  Result<Config> read = ParseConfig(shown, {});
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  for (const Setting& s : Settings()) {
    EXPECT_EQ(s.field.format(read.value()), s.field.format(defaults)) << s.name;
  }
  EXPECT_TRUE(Fields(read.value()) == Fields(defaults));
}

// Each setting's field reads and shows the same member: a value read in
// through `parse` comes back out of `format`.
TEST(Config, EverySettingShowsTheFieldItReads) {
  const std::vector<std::pair<std::string, std::string>> values = {
      {"KOLO_FUSION_THRESHOLD", "1048576"},
      {"KOLO_CYCLE_TIME", "2.5"},
      {"KOLO_CACHE_CAPACITY", "7"},
      {"KOLO_TIMELINE", "/tmp/t.json"},
      {"KOLO_TIMELINE_MARK_CYCLES", "1"},
      {"KOLO_STALL_CHECK_TIME_SECONDS", "0.25"},
      {"KOLO_STALL_SHUTDOWN_TIME_SECONDS", "0"},
      {"KOLO_STALL_CHECK_DISABLE", "1"},
      {"KOLO_LOG_LEVEL", "debug"},
      {"KOLO_HIERARCHICAL_ALLREDUCE", "1"},
      {"KOLO_ENABLE_ASYNC_COMPLETION", "1"},
      {"KOLO_NCCL_GROUP_MIN_BYTES", "2097152"},
      {"KOLO_IDLE_TICK_MS", "12.5"},
      {"KOLO_CALLER_RUNS", "0"},
      {"KOLO_PIECE_SIZE", "4096"},
      {"KOLO_IN_PLACE_THRESHOLD", "0"},
      {"KOLO_SHM_ALLREDUCE", "0"},
      {"KOLO_SHM_SINGLE_COPY", "0"},
      {"KOLO_SHM_NEGOTIATION", "0"},
      {"KOLO_AUTOTUNE", "1"},
      {"KOLO_AUTOTUNE_LOG", "/tmp/autotune.csv"},
      {"KOLO_AUTOTUNE_WARMUP_SAMPLES", "0"},
      {"KOLO_AUTOTUNE_STEPS_PER_SAMPLE", "25"},
      {"KOLO_AUTOTUNE_FILE", "/tmp/tuned.env"},
      {"KOLO_PYTHON", "/opt/my python/bin/python3"},
      {"KOLO_MPI_HOME", "/opt/openmpi-5"},
      {"KOLO_MPI_ABI", "mpiabi"},
      {"KOLO_START_TIMEOUT", "7.5"},
      {"KOLO_SSH_WAIT", "12"},
      {"KOLO_ELASTIC_TIMEOUT", "90"},
      {"KOLO_TF_OPS", "0"},
      {"KOLO_MONITOR_REPORT", "0123abcd@127.0.0.1:4321"},
      {"KOLO_ELASTIC", "1"},
      {"KOLO_ELASTIC_IN_PLACE", "1"},
      {"KOLO_ELASTIC_REPLACEMENT", "1"},
      {"KOLO_ELASTIC_GROW_IN_PLACE", "0"},
      {"KOLO_ELASTIC_JOB", "0123456789abcdef0123456789abcdef"},
      {"KOLO_ELASTIC_GENERATION", "3"},
      {"KOLO_ELASTIC_DIR", "/tmp/commits"}};
  ASSERT_EQ(values.size(), Settings().size()) << "give the new setting a value here";
  for (const Setting& s : Settings()) {
    auto it = std::find_if(values.begin(), values.end(),
                           [&](const auto& v) { return v.first == s.name; });
    ASSERT_NE(it, values.end()) << s.name << " has no test value";
    Config c;
    ASSERT_TRUE(s.field.parse(it->second, &c).ok()) << s.name;
    EXPECT_EQ(s.field.format(c), it->second) << s.name;
    EXPECT_NE(s.field.format(c), s.field.format(Config{}))
        << s.name << ": pick a value that is not the default";
  }
}

TEST(Config, DocsShowDefaultsForReaders) {
  const Config defaults;
  std::map<std::string, std::string> shown;
  for (const Setting& s : Settings()) shown[s.name] = s.field.describe(defaults);
  EXPECT_EQ(shown["KOLO_FUSION_THRESHOLD"], "67108864 (64 MiB)");
  EXPECT_EQ(shown["KOLO_IN_PLACE_THRESHOLD"], "262144 (256 KiB)");
  EXPECT_EQ(shown["KOLO_CYCLE_TIME"], "0.5");
  EXPECT_EQ(shown["KOLO_STALL_SHUTDOWN_TIME_SECONDS"], "600");
  EXPECT_EQ(shown["KOLO_TIMELINE"], "(off)");
  EXPECT_EQ(shown["KOLO_LOG_LEVEL"], "warning");
  EXPECT_EQ(shown["KOLO_SHM_ALLREDUCE"], "1");
  EXPECT_EQ(shown["KOLO_SHM_SINGLE_COPY"], "1");
  EXPECT_EQ(shown["KOLO_PYTHON"], "/usr/bin/python3");
}

TEST(Config, GoodValues) {
  Env env = {{"KOLO_FUSION_THRESHOLD", "32M"},       {"KOLO_CYCLE_TIME", "2.5"},
             {"KOLO_CACHE_CAPACITY", "0"},           {"KOLO_TIMELINE", "/tmp/t.json"},
             {"KOLO_STALL_CHECK_TIME_SECONDS", "5"}, {"KOLO_LOG_LEVEL", "DEBUG"},
             {"KOLO_TIMELINE_MARK_CYCLES", "yes"}};
  Result<Config> c = ParseConfig(env, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value().fusion_threshold_bytes, 32LL << 20);
  EXPECT_DOUBLE_EQ(c.value().cycle_time_ms, 2.5);
  EXPECT_EQ(c.value().cache_capacity, 0);
  EXPECT_EQ(c.value().timeline_path, "/tmp/t.json");
  EXPECT_TRUE(c.value().timeline_mark_cycles);
  EXPECT_EQ(c.value().stall_check_seconds, 5.0);
  EXPECT_EQ(c.value().log_level, LogLevel::kDebug);
}

TEST(Config, OverridesWinOverEnvironment) {
  Result<Config> c = ParseConfig({{"KOLO_CACHE_CAPACITY", "10"}}, {{"KOLO_CACHE_CAPACITY", "20"}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().cache_capacity, 20);
}

struct BadValue {
  const char* name;
  const char* value;
  const char* fragment;  // part of the expected message
};

class ConfigBadValue : public ::testing::TestWithParam<BadValue> {};

TEST_P(ConfigBadValue, FailsNamingVariableAndValue) {
  const BadValue& b = GetParam();
  Result<Config> c = ParseConfig({{b.name, b.value}}, {});
  ASSERT_FALSE(c.ok()) << b.name << "=" << b.value << " was accepted";
  const std::string& m = c.status().message();
  EXPECT_NE(m.find(b.name), std::string::npos) << m;
  EXPECT_NE(m.find(std::string("'") + b.value + "'"), std::string::npos) << m;
  EXPECT_NE(m.find(b.fragment), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(
    All, ConfigBadValue,
    ::testing::Values(BadValue{"KOLO_FUSION_THRESHOLD", "lots", "not a size"},
                      BadValue{"KOLO_MONITOR_REPORT", "127.0.0.1:4321", "token@address:port"},
                      BadValue{"KOLO_MONITOR_REPORT", "tok@127.0.0.1:http", "token@address:port"},
                      BadValue{"KOLO_FUSION_THRESHOLD", "64X", "unknown unit"},
                      BadValue{"KOLO_CYCLE_TIME", "-1", "negative"},
                      BadValue{"KOLO_CYCLE_TIME", "1ms", "not a number"},
                      BadValue{"KOLO_CACHE_CAPACITY", "-1", "negative"},
                      BadValue{"KOLO_CACHE_CAPACITY", "1.5", "whole number"},
                      BadValue{"KOLO_STALL_CHECK_TIME_SECONDS", "soon", "not a number"},
                      BadValue{"KOLO_STALL_SHUTDOWN_TIME_SECONDS", "-3", "negative"},
                      BadValue{"KOLO_LOG_LEVEL", "loud", "not a log level"},
                      BadValue{"KOLO_TIMELINE_MARK_CYCLES", "maybe", "not a boolean"},
                      BadValue{"KOLO_IDLE_TICK_MS", "", "empty"},
                      BadValue{"KOLO_IDLE_TICK_MS", "0", "greater than 0"},
                      BadValue{"KOLO_MPI_ABI", "lam", "expected ompi, mpich or mpiabi"},
                      // horovodrun itself refuses what its int() cannot read.
                      BadValue{"HOROVOD_ELASTIC_TIMEOUT", "1.5", "whole number of seconds"}));

// A HOROVOD_* value reads as Horovod reads it (strtol / strtof: leading spaces
// skipped, the number the text starts with, 0 when none), kept within the
// setting's range; when that is not what the text seems to say, rank 0 warns
// once for the variable.
struct HorovodValue {
  const char* name;
  const char* value;
  const char* kolo_name;
  const char* reads_as;  // the setting's value, as the table shows it
  const char* note;      // in the warning; "" = no warning
};

// Names each case by its variable and value in the test's name.
void PrintTo(const HorovodValue& h, std::ostream* os) { *os << h.name << "='" << h.value << "'"; }

class HorovodValueReading : public ::testing::TestWithParam<HorovodValue> {};

TEST_P(HorovodValueReading, ReadsAsHorovodWithOneWarningWhenItLooksUnintended) {
  const HorovodValue& h = GetParam();
  ConfigNotes notes;
  Result<Config> c = ParseConfig({{h.name, h.value}}, {}, &notes);
  ASSERT_TRUE(c.ok()) << h.name << "='" << h.value << "': " << c.status().ToString();
  EXPECT_EQ(FindSetting(h.kolo_name)->field.format(c.value()), h.reads_as)
      << h.name << "='" << h.value << "'";
  const std::vector<std::string> warnings = notes.Warnings();
  if (*h.note == '\0') {
    EXPECT_TRUE(warnings.empty()) << h.name << "='" << h.value << "': " << warnings[0];
    return;
  }
  ASSERT_EQ(warnings.size(), 1u) << h.name << "='" << h.value << "'";
  const std::string start = std::string(h.name) + "='" + h.value + "' is read as Horovod reads it";
  EXPECT_EQ(warnings[0].rfind(start, 0), 0u) << warnings[0];
  EXPECT_NE(warnings[0].find(h.note), std::string::npos) << warnings[0];
}

INSTANTIATE_TEST_SUITE_P(
    All, HorovodValueReading,
    ::testing::Values(
        HorovodValue{"HOROVOD_FUSION_THRESHOLD", "64M", "KOLO_FUSION_THRESHOLD", "64",
                     "64 bytes: Horovod reads the number it starts with and ignores 'M'; write "
                     "the threshold in bytes (67108864 for 64 MiB), or set KOLO_FUSION_THRESHOLD"},
        HorovodValue{"HOROVOD_FUSION_THRESHOLD", "1e6", "KOLO_FUSION_THRESHOLD", "1",
                     "ignores 'e6'"},
        HorovodValue{"HOROVOD_FUSION_THRESHOLD", "lots", "KOLO_FUSION_THRESHOLD", "0",
                     "starts with no number, which Horovod reads as 0"},
        HorovodValue{"HOROVOD_FUSION_THRESHOLD", "", "KOLO_FUSION_THRESHOLD", "0",
                     "the value is empty, which Horovod reads as 0"},
        HorovodValue{"HOROVOD_FUSION_THRESHOLD", "-1", "KOLO_FUSION_THRESHOLD", "0",
                     "fuse nothing, as 0 does"},
        HorovodValue{"HOROVOD_FUSION_THRESHOLD", " 1048576 ", "KOLO_FUSION_THRESHOLD", "1048576",
                     ""},
        HorovodValue{"HOROVOD_CYCLE_TIME", "0", "KOLO_CYCLE_TIME", "0", ""},
        HorovodValue{"HOROVOD_CYCLE_TIME", "2.5", "KOLO_CYCLE_TIME", "2.5", ""},
        HorovodValue{"HOROVOD_CYCLE_TIME", "5ms", "KOLO_CYCLE_TIME", "5", "5 ms: Horovod reads"},
        HorovodValue{"HOROVOD_CYCLE_TIME", "-2", "KOLO_CYCLE_TIME", "0", "does not pause"},
        HorovodValue{"HOROVOD_CYCLE_TIME", "1e9", "KOLO_CYCLE_TIME", "60000",
                     "kolo's longest cycle time"},
        HorovodValue{"HOROVOD_CACHE_CAPACITY", "-1", "KOLO_CACHE_CAPACITY", "1048576",
                     "32-bit unsigned int, where -1 is 4294967295; 1048576 is the most"},
        HorovodValue{"HOROVOD_CACHE_CAPACITY", "4294967296", "KOLO_CACHE_CAPACITY", "0",
                     "where 4294967296 is 0"},
        HorovodValue{"HOROVOD_CACHE_CAPACITY", "lots", "KOLO_CACHE_CAPACITY", "0",
                     "starts with no number"},
        HorovodValue{"HOROVOD_STALL_CHECK_TIME_SECONDS", "1.5", "KOLO_STALL_CHECK_TIME_SECONDS",
                     "1",
                     "1 s: Horovod reads the number it "
                     "starts with and ignores '.5'"},
        HorovodValue{"HOROVOD_STALL_CHECK_TIME_SECONDS", "0", "KOLO_STALL_CHECK_TIME_SECONDS", "0",
                     "kolo warns about none"},
        HorovodValue{"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "-5",
                     "KOLO_STALL_SHUTDOWN_TIME_SECONDS", "0", ""},
        HorovodValue{"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "90s",
                     "KOLO_STALL_SHUTDOWN_TIME_SECONDS", "90", "ignores 's'"},
        HorovodValue{"HOROVOD_HIERARCHICAL_ALLREDUCE", "true", "KOLO_HIERARCHICAL_ALLREDUCE", "0",
                     "off (0): it starts with no number"},
        HorovodValue{"HOROVOD_HIERARCHICAL_ALLREDUCE", "2", "KOLO_HIERARCHICAL_ALLREDUCE", "1", ""},
        HorovodValue{"HOROVOD_TIMELINE_MARK_CYCLES", "yes", "KOLO_TIMELINE_MARK_CYCLES", "0",
                     "off (0)"},
        HorovodValue{"HOROVOD_STALL_CHECK_DISABLE", "1 ", "KOLO_STALL_CHECK_DISABLE", "1", ""},
        HorovodValue{"HOROVOD_AUTOTUNE", "", "KOLO_AUTOTUNE", "0", ""},
        HorovodValue{"HOROVOD_LOG_LEVEL", "loud", "KOLO_LOG_LEVEL", "warning",
                     "Horovod logs at WARNING for what is not one of TRACE"},
        HorovodValue{"HOROVOD_LOG_LEVEL", " debug", "KOLO_LOG_LEVEL", "warning", "WARNING"},
        HorovodValue{"HOROVOD_LOG_LEVEL", "Info", "KOLO_LOG_LEVEL", "info", ""},
        HorovodValue{"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "-3", "KOLO_AUTOTUNE_WARMUP_SAMPLES", "0",
                     "the nearest value kolo takes (0 to 1000)"},
        HorovodValue{"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "0", "KOLO_AUTOTUNE_STEPS_PER_SAMPLE",
                     "1", "(1 to 100000)"},
        HorovodValue{"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "10x", "KOLO_AUTOTUNE_STEPS_PER_SAMPLE",
                     "10", "ignores 'x'"}));

TEST(Config, OneWarningPerHorovodVariableAfterTheOtherWarnings) {
  ConfigNotes notes;
  Result<Config> c = ParseConfig({{"HOROVOD_FUSION_THRESHOLD", "64M"},
                                  {"HOROVOD_CYCLE_TIME", "1ms"},
                                  {"HOROVOD_CACHE_CAPACITY", "100"},
                                  {"KOLO_CYCLE_TIMES", "1"}},
                                 {}, &notes);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value().fusion_threshold_bytes, 64);
  EXPECT_DOUBLE_EQ(c.value().cycle_time_ms, 1);
  const std::vector<std::string> warnings = notes.Warnings();
  ASSERT_EQ(warnings.size(), 3u);
  EXPECT_EQ(warnings[0].rfind("KOLO_CYCLE_TIMES is not a kolo setting", 0), 0u) << warnings[0];
  EXPECT_EQ(warnings[1],
            "HOROVOD_FUSION_THRESHOLD='64M' is read as Horovod reads it, as 64 bytes: Horovod "
            "reads the number it starts with and ignores 'M'; write the threshold in bytes "
            "(67108864 for 64 MiB), or set KOLO_FUSION_THRESHOLD, which takes K/M/G suffixes");
  EXPECT_EQ(warnings[2].rfind("HOROVOD_CYCLE_TIME='1ms' is read as Horovod reads it, as 1 ms", 0),
            0u)
      << warnings[2];
  // The info line names what was used, in kolo's syntax.
  EXPECT_NE(notes.AliasLine().find("HOROVOD_FUSION_THRESHOLD=64M as KOLO_FUSION_THRESHOLD=64"),
            std::string::npos)
      << notes.AliasLine();
}

TEST(Config, KoloCycleTimeZeroMeansNoPause) {
  Result<Config> c = ParseConfig({{"KOLO_CYCLE_TIME", "0"}}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value().cycle_time_ms, 0.0);
}

TEST(Config, UnknownKoloNamesAreReportedWithSuggestion) {
  std::vector<std::string> unknown;
  Result<Config> c = ParseConfig({{"KOLO_FUSION_TRESHOLD", "1"}}, {}, &unknown);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0], "KOLO_FUSION_TRESHOLD");
  EXPECT_EQ(ClosestSettingName("KOLO_FUSION_TRESHOLD"), "KOLO_FUSION_THRESHOLD");
  EXPECT_EQ(ClosestSettingName("KOLO_SOMETHING_ELSE_ENTIRELY"), "");
}

TEST(Config, HorovodAliasesApplyInHorovodsUnits) {
  Env env = {{"HOROVOD_FUSION_THRESHOLD", "33554432"},
             {"HOROVOD_CYCLE_TIME", "2.5"},
             {"HOROVOD_CACHE_CAPACITY", "0"},
             {"HOROVOD_TIMELINE", "/tmp/t.json"},
             {"HOROVOD_TIMELINE_MARK_CYCLES", "1"},
             {"HOROVOD_STALL_CHECK_TIME_SECONDS", "30"},
             {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "0"},
             {"HOROVOD_STALL_CHECK_DISABLE", "1"},
             {"HOROVOD_LOG_LEVEL", "DEBUG"},
             {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
             {"HOROVOD_ENABLE_ASYNC_COMPLETION", "1"}};
  ConfigNotes notes;
  Result<Config> c = ParseConfig(env, {}, &notes);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const Config& v = c.value();
  EXPECT_EQ(v.fusion_threshold_bytes, 32LL << 20);
  EXPECT_DOUBLE_EQ(v.cycle_time_ms, 2.5);
  EXPECT_EQ(v.cache_capacity, 0);
  EXPECT_EQ(v.timeline_path, "/tmp/t.json");
  EXPECT_TRUE(v.timeline_mark_cycles);
  EXPECT_EQ(v.stall_check_seconds, 30.0);
  EXPECT_EQ(v.stall_shutdown_seconds, 0.0);  // Horovod's 0 = never, as kolo's
  EXPECT_TRUE(v.stall_check_disabled);
  EXPECT_EQ(v.log_level, LogLevel::kDebug);
  EXPECT_TRUE(v.hierarchical_allreduce);
  EXPECT_TRUE(v.async_completion);
  EXPECT_EQ(notes.aliases_used.size(), env.size());
  EXPECT_TRUE(notes.aliases_overridden.empty());
  EXPECT_TRUE(notes.Warnings().empty());
}

TEST(Config, EveryHorovodAliasIsAHorovodName) {
  int aliases = 0;
  for (const Setting& s : Settings()) {
    std::string alias = s.horovod.name;
    if (alias.empty()) continue;
    ++aliases;
    EXPECT_EQ(alias.rfind("HOROVOD_", 0), 0u) << s.name;
    EXPECT_TRUE(s.horovod.translate) << s.name << " has an alias but no translation";
    EXPECT_NE(std::string(s.horovod.syntax), "") << s.name;
  }
  EXPECT_EQ(aliases, 17);
}

TEST(Config, HorovodSwitchesReadLikeHorovod) {
  // Horovod: strtol(value) > 0 is on; an empty value is off.
  for (auto [value, want] : std::vector<std::pair<std::string, bool>>{
           {"1", true}, {"2", true}, {"007", true}, {"0", false}, {"-1", false}, {"", false}}) {
    Result<Config> c = ParseConfig({{"HOROVOD_HIERARCHICAL_ALLREDUCE", value}}, {});
    ASSERT_TRUE(c.ok()) << "'" << value << "': " << c.status().ToString();
    EXPECT_EQ(c.value().hierarchical_allreduce, want) << "'" << value << "'";
  }
}

TEST(Config, HorovodLogLevelsAndDynamicTimeline) {
  EXPECT_EQ(ParseConfig({{"HOROVOD_LOG_LEVEL", "FATAL"}}, {}).value().log_level, LogLevel::kError);
  EXPECT_EQ(ParseConfig({{"HOROVOD_LOG_LEVEL", "Trace"}}, {}).value().log_level, LogLevel::kTrace);
  // DYNAMIC: no file until start_timeline(), which kolo offers without a setting.
  ConfigNotes notes;
  Result<Config> c = ParseConfig({{"HOROVOD_TIMELINE", "DYNAMIC"}}, {}, &notes);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value().timeline_path, "");
  EXPECT_EQ(notes.AliasLine(),
            "Horovod settings: using HOROVOD_TIMELINE=DYNAMIC as KOLO_TIMELINE=''");
}

TEST(Config, KoloNameWinsOverHorovodAlias) {
  for (const Env& env : {Env{{"HOROVOD_CYCLE_TIME", "9"}, {"KOLO_CYCLE_TIME", "3"}},
                         Env{{"KOLO_CYCLE_TIME", "3"}, {"HOROVOD_CYCLE_TIME", "9"}}}) {
    ConfigNotes notes;
    Result<Config> c = ParseConfig(env, {}, &notes);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_DOUBLE_EQ(c.value().cycle_time_ms, 3);
    EXPECT_TRUE(notes.aliases_used.empty());
    ASSERT_EQ(notes.aliases_overridden.size(), 1u);
    EXPECT_EQ(notes.aliases_overridden[0].horovod_name, "HOROVOD_CYCLE_TIME");
  }
  // Also when the KOLO_ name comes from init()'s settings; the alias that is
  // not read is not validated either.
  Result<Config> c =
      ParseConfig({{"HOROVOD_CACHE_CAPACITY", "lots"}}, {{"KOLO_CACHE_CAPACITY", "7"}});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value().cache_capacity, 7);
  // A KOLO_ variable in the environment wins over an alias given to init().
  c = ParseConfig({{"KOLO_CACHE_CAPACITY", "7"}}, {{"HOROVOD_CACHE_CAPACITY", "9"}});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().cache_capacity, 7);
}

TEST(Config, AliasLineNamesEveryMappingOnOneLine) {
  ConfigNotes notes;
  Env env = {{"HOROVOD_CYCLE_TIME", "2"},
             {"HOROVOD_STALL_CHECK_DISABLE", "3"},
             {"HOROVOD_FUSION_THRESHOLD", "1024"},
             {"KOLO_FUSION_THRESHOLD", "2K"}};
  ASSERT_TRUE(ParseConfig(env, {}, &notes).ok());
  EXPECT_EQ(notes.AliasLine(),
            "Horovod settings: using HOROVOD_CYCLE_TIME=2 as KOLO_CYCLE_TIME, "
            "HOROVOD_STALL_CHECK_DISABLE=3 as KOLO_STALL_CHECK_DISABLE=1; not using "
            "HOROVOD_FUSION_THRESHOLD (KOLO_FUSION_THRESHOLD is set and wins)");
  ConfigNotes none;
  ASSERT_TRUE(ParseConfig({{"KOLO_CYCLE_TIME", "2"}}, {}, &none).ok());
  EXPECT_EQ(none.AliasLine(), "");
}

TEST(Config, UnsupportedUnknownAndBuildTimeHorovodVariables) {
  ConfigNotes notes;
  Env env = {{"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "40"},
             {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.75"},
             {"HOROVOD_ELASTIC", "1"},
             {"HOROVOD_FUSION_TRESHOLD", "1"},
             {"HOROVOD_WITH_PYTORCH", "1"},
             {"HOROVOD_GPU_OPERATIONS", "NCCL"},
             {"HOROVOD_NCCL_HOME", "/usr/local"},
             {"KOLO_CYCLE_TIMES", "1"}};
  Result<Config> c = ParseConfig(env, {}, &notes);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(
      notes.horovod_unsupported,
      (std::vector<std::string>{"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES",
                                "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "HOROVOD_ELASTIC"}));
  EXPECT_EQ(notes.horovod_unknown, (std::vector<std::string>{"HOROVOD_FUSION_TRESHOLD"}));
  EXPECT_EQ(notes.unknown, (std::vector<std::string>{"KOLO_CYCLE_TIMES"}));
  EXPECT_EQ(notes.Warnings(),
            (std::vector<std::string>{
                "KOLO_CYCLE_TIMES is not a kolo setting and is ignored; did you mean "
                "KOLO_CYCLE_TIME?",
                "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES is ignored: kolo's autotune is a "
                "coordinate search over a few values per setting, not Bayesian optimization; its "
                "number of samples follows from those values (docs/configuration.md, "
                "\"Autotune\")",
                "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE is ignored: kolo's autotune is a "
                "coordinate search, not Bayesian optimization; it measures each value over "
                "several interleaved samples instead (docs/configuration.md, \"Autotune\")",
                "HOROVOD_ELASTIC is ignored: horovodrun sets it for its elastic workers; kolorun "
                "sets KOLO_ELASTIC=1 in elastic mode (--min-np, --max-np or "
                "--host-discovery-script)",
                "HOROVOD_FUSION_TRESHOLD is not a Horovod setting that kolo knows and is ignored; "
                "did you mean HOROVOD_FUSION_THRESHOLD?"}));
  // The older three-argument form reports both kinds of unknown names.
  std::vector<std::string> unknown;
  ASSERT_TRUE(ParseConfig(env, {}, &unknown).ok());
  EXPECT_EQ(unknown, (std::vector<std::string>{"KOLO_CYCLE_TIMES", "HOROVOD_FUSION_TRESHOLD"}));
}

TEST(Config, AutotuneSettingsAndTheirHorovodAliases) {
  ConfigNotes notes;
  Env env = {{"HOROVOD_AUTOTUNE", "1"},
             {"HOROVOD_AUTOTUNE_LOG", " /tmp/a.csv "},
             {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "5"},
             {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "20"},
             {"KOLO_AUTOTUNE_FILE", "/tmp/tuned.env"}};
  Result<Config> c = ParseConfig(env, {}, &notes);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c.value().autotune);
  EXPECT_EQ(c.value().autotune_log, "/tmp/a.csv");
  EXPECT_EQ(c.value().autotune_warmup_samples, 5);
  EXPECT_EQ(c.value().autotune_steps_per_sample, 20);
  EXPECT_EQ(c.value().autotune_file, "/tmp/tuned.env");
  EXPECT_TRUE(notes.horovod_unsupported.empty());
  // Given through an alias counts as given (autotune holds it).
  EXPECT_TRUE(notes.Given("KOLO_AUTOTUNE_STEPS_PER_SAMPLE"));
  EXPECT_TRUE(notes.Given("KOLO_AUTOTUNE_FILE"));
  EXPECT_FALSE(notes.Given("KOLO_FUSION_THRESHOLD"));

  const Config defaults;
  EXPECT_FALSE(defaults.autotune);
  EXPECT_EQ(defaults.autotune_warmup_samples, 3);  // Horovod's defaults
  EXPECT_EQ(defaults.autotune_steps_per_sample, 10);
  // The KOLO_ name wins; Horovod's strtol reading is not guessed at.
  EXPECT_EQ(ParseConfig({{"HOROVOD_AUTOTUNE", "1"}, {"KOLO_AUTOTUNE", "0"}}, {}).value().autotune,
            false);
  EXPECT_EQ(ParseConfig({{"HOROVOD_AUTOTUNE", "0"}}, {}).value().autotune, false);
  // HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE='10x' reads as Horovod's strtol reads it (10):
  // HorovodValueReading. The KOLO_ names keep their checks.
  Status bad = ParseConfig({{"KOLO_AUTOTUNE_STEPS_PER_SAMPLE", "0"}}, {}).status();
  EXPECT_NE(bad.message().find("KOLO_AUTOTUNE_STEPS_PER_SAMPLE='0' is not between 1 and 100000"),
            std::string::npos)
      << bad.message();
  bad = ParseConfig({{"KOLO_AUTOTUNE_WARMUP_SAMPLES", "-1"}}, {}).status();
  EXPECT_NE(bad.message().find("KOLO_AUTOTUNE_WARMUP_SAMPLES='-1' is negative"), std::string::npos)
      << bad.message();
}

TEST(Config, GivenListsExplicitSettingsOnce) {
  ConfigNotes notes;
  ASSERT_TRUE(ParseConfig({{"KOLO_CYCLE_TIME", "2"}, {"HOROVOD_FUSION_THRESHOLD", "1024"}},
                          {{"KOLO_CYCLE_TIME", "3"}}, &notes)
                  .ok());
  EXPECT_EQ(notes.given, (std::vector<std::string>{"KOLO_FUSION_THRESHOLD", "KOLO_CYCLE_TIME"}));
}

TEST(Config, EnvironmentIncludesHorovodVariables) {
  setenv("HOROVOD_CONFIG_TEST_VARIABLE", "1", 1);
  auto env = KoloEnvironment();
  unsetenv("HOROVOD_CONFIG_TEST_VARIABLE");
  EXPECT_NE(std::find(env.begin(), env.end(),
                      std::pair<std::string, std::string>{"HOROVOD_CONFIG_TEST_VARIABLE", "1"}),
            env.end());
}

TEST(Config, LauncherReadsItsSettingsThroughTheTable) {
  // kolorun and kolo-rank see the defaults, aliases and checks the ranks see.
  const LaunchSettings defaults = DefaultLaunchSettings();
  EXPECT_EQ(defaults.python, Config().python);
  EXPECT_FALSE(defaults.python_given);
  EXPECT_EQ(defaults.stall_shutdown_seconds, Config().stall_shutdown_seconds);
  setenv("KOLO_PYTHON", "/opt/py/bin/python3", 1);
  setenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "42", 1);
  Result<LaunchSettings> read = ReadLaunchSettings();
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read.value().python, "/opt/py/bin/python3");
  EXPECT_TRUE(read.value().python_given);
  EXPECT_EQ(read.value().stall_shutdown_seconds, 42.0) << "through the Horovod alias";
  setenv("KOLO_STALL_CHECK_DISABLE", "1", 1);
  read = ReadLaunchSettings();
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read.value().stall_shutdown_seconds, 0.0) << "stall checks off: no limit";
  setenv("KOLO_STALL_SHUTDOWN_TIME_SECONDS", "soon", 1);
  read = ReadLaunchSettings();
  unsetenv("KOLO_PYTHON");
  unsetenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS");
  unsetenv("KOLO_STALL_CHECK_DISABLE");
  unsetenv("KOLO_STALL_SHUTDOWN_TIME_SECONDS");
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("KOLO_STALL_SHUTDOWN_TIME_SECONDS='soon'"),
            std::string::npos)
      << read.status().message();
}

TEST(Config, StartTimeoutIsASettingWithItsHorovodAlias) {
  // kolorun's start timeout, in the table like every other setting: parsed,
  // checked and documented, not a silently ignored Horovod name.
  ConfigNotes notes;
  Result<Config> c = ParseConfig({{"HOROVOD_START_TIMEOUT", "45"}}, {}, &notes);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value().start_timeout_seconds, 45.0);
  EXPECT_TRUE(notes.horovod_unknown.empty());
  c = ParseConfig({{"KOLO_START_TIMEOUT", "2.5"}, {"HOROVOD_START_TIMEOUT", "45"}}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value().start_timeout_seconds, 2.5) << "the KOLO_ name wins";
  EXPECT_EQ(Config().start_timeout_seconds, 30.0);
  for (const char* bad : {"soon", "0", "-3"}) {
    c = ParseConfig({{"HOROVOD_START_TIMEOUT", bad}}, {});
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_NE(c.status().message().find("HOROVOD_START_TIMEOUT='" + std::string(bad) +
                                        "' is not a positive number of seconds"),
              std::string::npos)
        << c.status().message();
  }
}

TEST(Config, ElasticTimeoutIsASettingWithItsHorovodAlias) {
  // horovodrun reads HOROVOD_ELASTIC_TIMEOUT with int(): whole seconds.
  ConfigNotes notes;
  Result<Config> c = ParseConfig({{"HOROVOD_ELASTIC_TIMEOUT", "45"}}, {}, &notes);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value().elastic_timeout_seconds, 45.0);
  EXPECT_TRUE(notes.horovod_unknown.empty() && notes.horovod_unsupported.empty());
  c = ParseConfig({{"KOLO_ELASTIC_TIMEOUT", "2.5"}, {"HOROVOD_ELASTIC_TIMEOUT", "45"}}, {});
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value().elastic_timeout_seconds, 2.5) << "the KOLO_ name wins";
  EXPECT_EQ(Config().elastic_timeout_seconds, 600.0) << "Horovod's default";
  c = ParseConfig({{"HOROVOD_ELASTIC_TIMEOUT", "1.5"}}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("HOROVOD_ELASTIC_TIMEOUT='1.5' is not a whole number"),
            std::string::npos)
      << c.status().message();
  c = ParseConfig({{"KOLO_ELASTIC_TIMEOUT", "0"}}, {});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("KOLO_ELASTIC_TIMEOUT='0' is not a positive number"),
            std::string::npos)
      << c.status().message();
  // What kolorun sets for the ranks of an elastic job is known: no warning.
  ConfigNotes ranks;
  c = ParseConfig({{"KOLO_ELASTIC", "1"},
                   {"KOLO_ELASTIC_JOB", "0123456789abcdef0123456789abcdef"},
                   {"KOLO_ELASTIC_GENERATION", "2"},
                   {"KOLO_ELASTIC_DIR", "/dev/shm"}},
                  {}, &ranks);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(ranks.Warnings().empty()) << ranks.Warnings().front();
  EXPECT_TRUE(c.value().elastic);
  EXPECT_EQ(c.value().elastic_generation, 2);
  EXPECT_EQ(Config().elastic_dir, "/dev/shm");
}

TEST(Config, StallCheckNeverLaterThanShutdown) {
  Result<Config> c = ParseConfig({{"KOLO_STALL_SHUTDOWN_TIME_SECONDS", "10"}}, {});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().stall_check_seconds, 10.0);
}

TEST(Config, ByteSizes) {
  EXPECT_EQ(ParseByteSize("1024").value(), 1024);
  EXPECT_EQ(ParseByteSize("1k").value(), 1024);
  EXPECT_EQ(ParseByteSize("1.5 MiB").value(), 1536 * 1024);
  EXPECT_EQ(ParseByteSize("2G").value(), 2LL << 30);
  EXPECT_FALSE(ParseByteSize("-1").ok());
  EXPECT_FALSE(ParseByteSize("").ok());
}

}  // namespace
}  // namespace kolo

#include <fstream>
#include <sstream>

namespace kolo {
namespace {

TEST(Config, DocsCarryTheGeneratedTable) {
  std::ifstream f(KOLO_SOURCE_DIR "/docs/configuration.md");
  ASSERT_TRUE(f.good()) << "docs/configuration.md is missing";
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find(SettingsMarkdownTable()), std::string::npos)
      << "docs/configuration.md is out of date; regenerate the table with "
         "scripts/config_table.sh";
  EXPECT_NE(ss.str().find(UnsupportedHorovodMarkdownTable()), std::string::npos)
      << "docs/configuration.md is out of date; regenerate the tables with "
         "scripts/config_table.sh";
}

}  // namespace
}  // namespace kolo
