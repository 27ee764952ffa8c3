// Hostfiles (Open MPI's and Hydra's forms, the MPI Operator's), the scheduler
// files of the same shape (PBS, SGE, LSF), and SageMaker's JSON.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cloud_hosts.h"
#include "hosts.h"
#include "json_value.h"

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
  (void)kolo::launcher::ParseJson(text);
  auto list = kolo::launcher::ParseSageMakerHostList(text);
  if (list.ok() && list.value().empty()) std::abort();
  auto config = kolo::launcher::ParseSageMakerResourceConfig(text);
  if (config.ok() && config.value().hosts.empty()) std::abort();
  return 0;
}
