// libkolo_prrte.so (see prrte_shim.h). A preloaded library: nothing beyond
// libc, and PMIx's own PMIx_Info_create does the work.
#include <dlfcn.h>

#include <cstddef>

#include "preloaded.h"
#include "prrte_shim.h"

struct pmix_info;  // PMIx's pmix_info_t, only passed through here

namespace {

using Create = pmix_info* (*)(size_t);
Create g_create = nullptr;  // PMIx's own; set once, before any thread starts

// Not in the ranks: mpirun passes it on to prterun, which takes it out of the
// environment that its local ranks and its ssh agent get (a host's daemon
// preloads it through its launch agent, kolorun's command).
__attribute__((constructor)) void Init() {
  g_create = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "PMIx_Info_create"));
  char exe[4096];
  if (!kolo::launcher::preloaded::LauncherWrapper(kolo::launcher::preloaded::ExecutableName(exe))) {
    kolo::launcher::preloaded::ForgetPreload(kolo::launcher::kPrrteLibraryName);
  }
}

}  // namespace

extern "C" {

// One element more than asked for (PMIx constructs it empty); PMIx_Info_free(p, n)
// frees the whole array whatever n it is given.
__attribute__((visibility("default"))) pmix_info* PMIx_Info_create(size_t n) {
  if (g_create == nullptr) return nullptr;
  return g_create(n == 0 ? 0 : n + 1);
}

}  // extern "C"
