// The configuration parser: lines "NAME=VALUE"; every accepted value is in range.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  std::vector<std::pair<std::string, std::string>> env;
  for (std::string line; std::getline(in, line);) {
    size_t eq = line.find('=');
    if (eq != std::string::npos) env.emplace_back(line.substr(0, eq), line.substr(eq + 1));
  }
  std::vector<std::string> unknown;
  auto c = kolo::ParseConfig(env, {}, &unknown);
  if (c.ok()) {
    const kolo::Config& v = c.value();
    if (v.fusion_threshold_bytes < 0 || v.cycle_time_ms <= 0 || v.cache_capacity < 0 ||
        v.stall_check_seconds < 0 || v.stall_shutdown_seconds < 0 || v.idle_tick_ms <= 0) {
      std::abort();
    }
  }
  for (const std::string& name : unknown) kolo::ClosestSettingName(name);
  return 0;
}
