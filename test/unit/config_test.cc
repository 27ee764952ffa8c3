#include "config.h"

#include <gtest/gtest.h>

namespace kolo {
namespace {

using Env = std::vector<std::pair<std::string, std::string>>;

TEST(Config, DefaultsWithEmptyEnvironment) {
  Result<Config> c = ParseConfig({}, {}, nullptr);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().fusion_threshold_bytes, 64LL << 20);
  EXPECT_EQ(c.value().cache_capacity, 1024);
  EXPECT_EQ(c.value().stall_check_seconds, 60.0);
  EXPECT_EQ(c.value().stall_shutdown_seconds, 600.0);
  EXPECT_EQ(c.value().log_level, LogLevel::kWarning);
}

TEST(Config, GoodValues) {
  Env env = {{"KOLO_FUSION_THRESHOLD", "32M"},       {"KOLO_CYCLE_TIME", "2.5"},
             {"KOLO_CACHE_CAPACITY", "0"},           {"KOLO_TIMELINE", "/tmp/t.json"},
             {"KOLO_STALL_CHECK_TIME_SECONDS", "5"}, {"KOLO_LOG_LEVEL", "DEBUG"},
             {"KOLO_TIMELINE_MARK_CYCLES", "yes"}};
  Result<Config> c = ParseConfig(env, {}, nullptr);
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
  Result<Config> c =
      ParseConfig({{"KOLO_CACHE_CAPACITY", "10"}}, {{"KOLO_CACHE_CAPACITY", "20"}}, nullptr);
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
  Result<Config> c = ParseConfig({{b.name, b.value}}, {}, nullptr);
  ASSERT_FALSE(c.ok()) << b.name << "=" << b.value << " was accepted";
  const std::string& m = c.status().message();
  EXPECT_NE(m.find(b.name), std::string::npos) << m;
  EXPECT_NE(m.find(std::string("'") + b.value + "'"), std::string::npos) << m;
  EXPECT_NE(m.find(b.fragment), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(
    All, ConfigBadValue,
    ::testing::Values(BadValue{"KOLO_FUSION_THRESHOLD", "lots", "not a size"},
                      BadValue{"KOLO_FUSION_THRESHOLD", "64X", "unknown unit"},
                      BadValue{"KOLO_CYCLE_TIME", "0", "greater than 0"},
                      BadValue{"KOLO_CYCLE_TIME", "1ms", "not a number"},
                      BadValue{"KOLO_CACHE_CAPACITY", "-1", "negative"},
                      BadValue{"KOLO_CACHE_CAPACITY", "1.5", "whole number"},
                      BadValue{"KOLO_STALL_CHECK_TIME_SECONDS", "soon", "not a number"},
                      BadValue{"KOLO_STALL_SHUTDOWN_TIME_SECONDS", "-3", "negative"},
                      BadValue{"KOLO_LOG_LEVEL", "loud", "not a log level"},
                      BadValue{"KOLO_TIMELINE_MARK_CYCLES", "maybe", "not a boolean"},
                      BadValue{"KOLO_IDLE_TICK_MS", "", "empty"}));

TEST(Config, UnknownKoloNamesAreReportedWithSuggestion) {
  std::vector<std::string> unknown;
  Result<Config> c = ParseConfig({{"KOLO_FUSION_TRESHOLD", "1"}}, {}, &unknown);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0], "KOLO_FUSION_TRESHOLD");
  EXPECT_EQ(ClosestSettingName("KOLO_FUSION_TRESHOLD"), "KOLO_FUSION_THRESHOLD");
  EXPECT_EQ(ClosestSettingName("KOLO_SOMETHING_ELSE_ENTIRELY"), "");
}

TEST(Config, StallCheckNeverLaterThanShutdown) {
  Result<Config> c = ParseConfig({{"KOLO_STALL_SHUTDOWN_TIME_SECONDS", "10"}}, {}, nullptr);
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
         "build/runtime/kolo_config_doc";
}

}  // namespace
}  // namespace kolo
