// What kolorun's preloaded libraries (bind_shim.h, prrte_shim.h) share: they
// run inside MPI's own processes, so they use nothing beyond libc, and each
// takes itself out of LD_PRELOAD where it must not reach the processes that
// this one starts (the ranks).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace kolo::launcher::preloaded {

// The name of this process's executable; `exe` holds its path.
inline const char* ExecutableName(char (&exe)[4096]) {
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  exe[n > 0 ? n : 0] = '\0';
  const char* slash = std::strrchr(exe, '/');
  return slash ? slash + 1 : exe;
}

// Whether `name` is a process that starts the runtime's other processes and
// must pass the preload on: Open MPI 5's `mpirun` runs `prterun` (PyPI's wheel
// through `ompirun_wrapper`); Hydra's `mpiexec` forks this host's proxy,
// whose listener the bind shim narrows. Open MPI 4.1's mpirun is orterun itself.
inline bool LauncherWrapper(const char* name) {
  return std::strcmp(name, "mpirun") == 0 || std::strcmp(name, "mpiexec") == 0 ||
         std::strcmp(name, "mpiexec.hydra") == 0 || std::strcmp(name, "ompirun_wrapper") == 0;
}

// Removes `library` (a file name) from LD_PRELOAD, so that the processes this
// one starts do not inherit it.
inline void ForgetPreload(const char* library) {
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload == nullptr || std::strlen(preload) >= 4096) return;
  char kept[4096] = {0};
  char copy[4096];
  std::strcpy(copy, preload);
  char* save = nullptr;
  for (char* entry = strtok_r(copy, ": ", &save); entry; entry = strtok_r(nullptr, ": ", &save)) {
    const char* slash = std::strrchr(entry, '/');
    if (std::strcmp(slash ? slash + 1 : entry, library) == 0) continue;
    if (kept[0] != '\0') std::strcat(kept, ":");
    std::strcat(kept, entry);
  }
  if (kept[0] == '\0') {
    unsetenv("LD_PRELOAD");
  } else {
    setenv("LD_PRELOAD", kept, 1);
  }
}

}  // namespace kolo::launcher::preloaded
