// NCCL loaded at run time (ops/cuda/nccl_api.h), in a GPU build: it loads
// without a GPU, every function kolo calls is there, and the library's
// version is one kolo can use. Which libnccl.so.2 a process with PyTorch
// gets is checked from Python (test/torch2/import_order_check.py).
#include "ops/cuda/nccl_api.h"

#include <gtest/gtest.h>

#include <string>

namespace kolo {
namespace {

TEST(NcclApi, LoadsWithoutADeviceAndHasEveryFunction) {
  Result<const NcclApi*> api = LoadNccl();
  ASSERT_TRUE(api.ok()) << api.status().message();
  const NcclApi& nccl = *api.value();
  EXPECT_NE(nccl.path.find("libnccl"), std::string::npos) << nccl.path;
  EXPECT_GE(nccl.version, 21400) << "kolo calls ncclCommFinalize (NCCL 2.14)";
#define KOLO_NCCL_PRESENT(member, symbol) EXPECT_NE(nccl.member, nullptr) << #symbol;
  KOLO_NCCL_FUNCTIONS(KOLO_NCCL_PRESENT)
#undef KOLO_NCCL_PRESENT
  EXPECT_EQ(&Nccl(), &nccl);
  EXPECT_STRNE(Nccl().GetErrorString(ncclInvalidArgument), "");
}

TEST(NcclApi, LoadsOnce) {
  Result<const NcclApi*> a = LoadNccl(), b = LoadNccl();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a.value(), b.value());
}

}  // namespace
}  // namespace kolo
