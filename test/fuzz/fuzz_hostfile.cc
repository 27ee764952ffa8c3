// Hostfiles and the scheduler files of the same shape (PBS, SGE, LSF).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hosts.h"

namespace {
void CheckHosts(const kolo::Result<std::vector<kolo::launcher::HostSlots>>& r) {
  if (!r.ok()) return;
  for (const auto& h : r.value()) {
    if (h.host.empty() || h.slots < 1) std::abort();
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  CheckHosts(kolo::launcher::ParseHostfile(text));
  CheckHosts(kolo::launcher::ParsePbsNodefile(text));
  CheckHosts(kolo::launcher::ParseSgeHostfile(text));
  CheckHosts(kolo::launcher::ParseLsfMcpuHosts(text));
  return 0;
}
