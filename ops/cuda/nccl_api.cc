#include "nccl_api.h"

#include <dlfcn.h>
#include <link.h>

#include <string>
#include <vector>

namespace kolo {
namespace {

// The file behind a dlopen handle, for messages.
std::string PathOf(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
      *map->l_name != '\0') {
    return map->l_name;
  }
  return fallback;
}

// Resolves every function of KOLO_NCCL_FUNCTIONS from `handle`.
Status Resolve(void* handle, NcclApi* api) {
  std::string missing;
#define KOLO_NCCL_RESOLVE(member, symbol)                                        \
  api->member = reinterpret_cast<decltype(api->member)>(dlsym(handle, #symbol)); \
  if (api->member == nullptr) missing += std::string(missing.empty() ? "" : ", ") + #symbol;
  KOLO_NCCL_FUNCTIONS(KOLO_NCCL_RESOLVE)
#undef KOLO_NCCL_RESOLVE
  if (missing.empty()) return Status::OK();
  return Status::PreconditionFailed("it lacks " + missing + ", which kolo (built against NCCL " +
                                    std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) +
                                    "." + std::to_string(NCCL_PATCH) + ") calls: too old");
}

// NCCL once loaded (or why not). Process-wide like the library it holds:
// the handle stays open for the life of the process.
struct Loaded {
  NcclApi api;
  Status status = Status::OK();
};

Loaded Load() {
  // The soname first: the NCCL already in the process (the framework's) or
  // the dynamic linker's; then the library kolo was built against, also when
  // the first lacks a function kolo calls (loaded by its path, it is a
  // library of its own beside an older one of the same soname).
  std::vector<std::string> candidates = {"libnccl.so.2"};
#ifdef KOLO_NCCL_BUILD_PATH
  candidates.push_back(KOLO_NCCL_BUILD_PATH);
#endif
  std::string tried;
  for (const std::string& name : candidates) {
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      tried += "\n  " + name + ": " + (why != nullptr ? why : "not found");
      continue;
    }
    Loaded out;
    out.api.path = PathOf(handle, name);
    out.status = Resolve(handle, &out.api);
    if (!out.status.ok()) {
      tried += "\n  " + out.api.path + ": " + out.status.message();
      dlclose(handle);
      continue;
    }
    if (out.api.GetVersion(&out.api.version) != ncclSuccess) out.api.version = 0;
    return out;
  }
  Loaded out;
  out.status = Status::PreconditionFailed(
      "kolo found no NCCL library it can use for a collective on the GPU; it tried:" + tried +
      "\nInstall NCCL 2.14 or newer (it comes with PyTorch's CUDA wheels and with the CUDA "
      "toolkit's NCCL package), or put the directory of such a libnccl.so.2 first on "
      "LD_LIBRARY_PATH");
  return out;
}

const Loaded& Once() {
  static const Loaded loaded = Load();  // thread-safe initialization
  return loaded;
}

}  // namespace

Result<const NcclApi*> LoadNccl() {
  const Loaded& l = Once();
  if (!l.status.ok()) return l.status;
  return &l.api;
}

const NcclApi& Nccl() { return Once().api; }

}  // namespace kolo
