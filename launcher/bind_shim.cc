// libkolo_bind.so (see bind_shim.h). A preloaded library: no C++ runtime
// beyond what libc gives, no allocation in bind(), and it reads its two
// variables itself because it runs inside Open MPI's processes, not kolo's.
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bind_shim.h"
#include "preloaded.h"

namespace {

using kolo::launcher::preloaded::ExecutableName;
using kolo::launcher::preloaded::LauncherWrapper;

using BindFunction = int (*)(int, const sockaddr*, socklen_t);

char g_interfaces[1024];  // ",lo,eth0," (set once, before any thread starts)
// This process is one of Hydra's (MPICH, Intel MPI): its programs hold the
// process manager in the executable itself, with no code of the user's.
bool g_hydra_process = false;

// Hydra's programs: the launcher, and the proxies that start the ranks
// (hydra_bstrap_proxy is Intel MPI's, which starts hydra_pmi_proxy on other hosts).
bool HydraProgram(const char* name) {
  return std::strcmp(name, "mpiexec.hydra") == 0 || std::strcmp(name, "hydra_pmi_proxy") == 0 ||
         std::strcmp(name, "hydra_bstrap_proxy") == 0;
}

__attribute__((constructor)) void Init() {
  const char* names = std::getenv(kolo::launcher::kBindInterfaces);
  if (names != nullptr && std::strlen(names) + 3 < sizeof g_interfaces) {
    std::strcpy(g_interfaces, ",");
    std::strcat(g_interfaces, names);
    std::strcat(g_interfaces, ",");
  }
  char exe[4096];
  const char* name = ExecutableName(exe);
  const bool wrapper = LauncherWrapper(name);
  g_hydra_process = HydraProgram(name);
  if (!g_hydra_process && wrapper) {
    // MPICH's mpiexec (and its mpirun) is Hydra's under Open MPI's names: it
    // is told apart by the proxy beside it.
    char* slash = std::strrchr(exe, '/');
    const char kProxy[] = "hydra_pmi_proxy";
    if (slash != nullptr && static_cast<size_t>(slash + 1 - exe) + sizeof kProxy <= sizeof exe) {
      std::strcpy(slash + 1, kProxy);
      g_hydra_process = access(exe, X_OK) == 0;
    }
  }
  // kolo-rank adds it back to the program where it is needed.
  if (!wrapper) kolo::launcher::preloaded::ForgetPreload(kolo::launcher::kBindLibraryName);
}

// Whether interface `i` is one the job lives on: its name is listed, or (IPv4)
// its address lies in a listed network ("10.0.0.0/24").
bool Listed(const ifaddrs* i) {
  char key[IFNAMSIZ + 3] = ",";
  std::strncat(key, i->ifa_name, IFNAMSIZ);
  std::strcat(key, ",");
  if (std::strstr(g_interfaces, key) != nullptr) return true;
  if (i->ifa_addr->sa_family != AF_INET) return false;
  const uint32_t address =
      ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
  for (const char* entry = g_interfaces; (entry = std::strchr(entry, ',')) != nullptr;) {
    ++entry;
    unsigned a = 0, b = 0, c = 0, d = 0, bits = 0;
    if (std::sscanf(entry, "%u.%u.%u.%u/%u", &a, &b, &c, &d, &bits) != 5 || bits > 32) continue;
    const uint32_t network = (a << 24) | (b << 16) | (c << 8) | d;
    const uint32_t mask = bits == 0 ? 0 : ~uint32_t{0} << (32 - bits);
    if ((address & mask) == (network & mask)) return true;
  }
  return false;
}

// Open MPI's TCP components, built as plugins or into its libraries.
bool FromOpenMpi(void* caller) {
  Dl_info info;
  if (dladdr(caller, &info) == 0 || info.dli_fname == nullptr) return false;
  const char* slash = std::strrchr(info.dli_fname, '/');
  const char* name = slash ? slash + 1 : info.dli_fname;
  // Open MPI 4.1 (ORTE) and 5.0 (PRRTE: the runtime's channel in libprrte,
  // PMIx's listeners in libpmix; PyPI's wheel builds its components in).
  static const char* const kPrefixes[] = {"mca_oob_tcp", "mca_btl_tcp", "libopen-rte",
                                          "libopen-pal", "libmpi",      "libprrte",
                                          "libpmix",     "prte_mca_",   "pmix_mca_"};
  for (const char* prefix : kPrefixes) {
    if (std::strncmp(name, prefix, std::strlen(prefix)) == 0) return true;
  }
  return false;
}

bool IsWildcard(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr == htonl(INADDR_ANY);
  }
  if (a->sa_family == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  }
  return false;
}

// `a` with its address replaced by the first one of its family on a listed
// interface (link-local IPv6 skipped), else by loopback: never wider than asked.
void Narrow(const sockaddr* a, sockaddr_storage* out) {
  std::memcpy(out, a, a->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6));
  ifaddrs* list = nullptr;
  bool found = false;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr && !found; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != a->sa_family || !Listed(i)) continue;
      if (a->sa_family == AF_INET) {
        reinterpret_cast<sockaddr_in*>(out)->sin_addr =
            reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr;
        found = true;
      } else {
        const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr)->sin6_addr;
        if (IN6_IS_ADDR_LINKLOCAL(&v6)) continue;
        reinterpret_cast<sockaddr_in6*>(out)->sin6_addr = v6;
        found = true;
      }
    }
    freeifaddrs(list);
  }
  if (found) return;
  if (a->sa_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(out)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else {
    reinterpret_cast<sockaddr_in6*>(out)->sin6_addr = in6addr_loopback;
  }
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int bind(int fd, const sockaddr* address,
                                                           socklen_t length) {
  static BindFunction real = reinterpret_cast<BindFunction>(dlsym(RTLD_NEXT, "bind"));
  if (g_interfaces[0] != '\0' && address != nullptr && IsWildcard(address) &&
      (g_hydra_process || FromOpenMpi(__builtin_return_address(0)))) {
    sockaddr_storage narrowed;
    Narrow(address, &narrowed);
    return real(fd, reinterpret_cast<const sockaddr*>(&narrowed), length);
  }
  return real(fd, address, length);
}
