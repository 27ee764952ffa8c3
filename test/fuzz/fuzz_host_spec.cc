// -H host:slots lists: every accepted list has hosts with at least one slot.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hosts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto hosts = kolo::launcher::ParseHostSpec(text);
  if (hosts.ok()) {
    if (hosts.value().empty()) std::abort();
    for (const auto& h : hosts.value()) {
      if (h.host.empty() || h.slots < 1) std::abort();
    }
    for (const auto& h : hosts.value()) {
      if (h.slots > kolo::launcher::kMaxSlots) std::abort();
    }
    int total = kolo::launcher::TotalSlots(hosts.value());
    if (total <= kolo::launcher::kMaxSlots) {
      auto map = kolo::launcher::MapBySlot(hosts.value(), total);
      if (static_cast<int>(map.size()) != total) std::abort();
    }
  }
  return 0;
}
