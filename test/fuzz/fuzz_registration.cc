// The rendezvous message a rank (or anything on the network) sends kolorun.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "rendezvous.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string line(reinterpret_cast<const char*>(data), size);
  auto r = kolo::launcher::ParseRegistration(line, "0123456789abcdef0123456789abcdef", 64);
  if (r.ok() && (r.value().rank < 0 || r.value().rank >= 64)) std::abort();
  return 0;
}
