// The NCCL loader (ops/cuda/nccl_api.h) when the libnccl.so.2 already in the
// process is too old for kolo: it takes the NCCL kolo was built against, by
// its path, instead of failing. Its own executable, because the loader runs
// once per process and nccl_api_test.cc's process must not see the old one.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

#include "ops/cuda/nccl_api.h"

namespace kolo {
namespace {

std::string FileOf(const void* symbol) {
  Dl_info info{};
  return dladdr(symbol, &info) != 0 && info.dli_fname != nullptr ? info.dli_fname : "";
}

TEST(NcclApiFallback, PassesByATooOldNcclAlreadyLoaded) {
  // What a framework with an old NCCL leaves in the process.
  void* old = dlopen(KOLO_FAKE_OLD_NCCL, RTLD_NOW | RTLD_GLOBAL);
  ASSERT_NE(old, nullptr) << dlerror();
  ASSERT_EQ(dlsym(old, "ncclCommFinalize"), nullptr);
  ASSERT_EQ(dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD), old)
      << "the soname should name the old library now";

  Result<const NcclApi*> api = LoadNccl();
  ASSERT_TRUE(api.ok()) << api.status().message();
  EXPECT_NE(api.value()->path, KOLO_FAKE_OLD_NCCL);
  EXPECT_GE(api.value()->version, 21400);
  const std::string file = FileOf(reinterpret_cast<const void*>(api.value()->CommFinalize));
  EXPECT_NE(file.find("libnccl"), std::string::npos) << file;
  EXPECT_NE(file, KOLO_FAKE_OLD_NCCL);
  dlclose(old);
}

}  // namespace
}  // namespace kolo
