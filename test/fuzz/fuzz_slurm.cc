// Slurm's compressed host lists and task counts: bounded expansion, valid names.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "hosts.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  auto hosts = kolo::launcher::ExpandSlurmNodelist(text);
  if (hosts.ok()) {
    if (hosts.value().size() > 100000) std::abort();
    for (const auto& h : hosts.value()) {
      if (h.empty()) std::abort();
    }
  }
  auto tasks = kolo::launcher::ParseSlurmTasksPerNode(text);
  if (tasks.ok()) {
    for (int t : tasks.value()) {
      if (t < 1) std::abort();
    }
  }
  return 0;
}
