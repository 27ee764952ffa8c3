// The background thread never takes the process down: an exception inside it
// (here: out of memory) fails the operation in hand, every pending one and
// every later one with the reason, and the caller carries on.
#include <chrono>
#include <string>
#include <thread>

#include "test_util.h"

namespace kolo::test {
namespace {

class LoopFailure : public RuntimeTest {};

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_F(LoopFailure, AnExceptionFailsTheOperationAndEveryLaterOneInsteadOfTerminating) {
#ifdef KOLO_SANITIZED
  GTEST_SKIP() << "the sanitizers' allocators abort on an impossible allocation instead of "
                  "throwing std::bad_alloc";
#endif
  // Rank 0 claims 2^61 rows of int8: every rank's allgather result (2^61 +
  // size - 1 bytes) cannot be allocated, so every background thread throws
  // std::bad_alloc at the same point. The data pointer is never read.
  uint8_t byte = 1;
  TensorView t{&byte, DataType::kInt8, {rank_ == 0 ? (int64_t{1} << 61) : 1}};
  CollectiveOptions o;
  o.name = "too.big";
  Status s = Run(rt_->EnqueueAllgather(t, o));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kInternal) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "background thread stopped on an exception")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "allgather")) << s.message();

  // kolo has stopped: later operations fail at once with the reason.
  for (int i = 0; i < 100 && rt_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_FALSE(rt_->is_running());
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions a;
  a.name = "after";
  Status later = Run(rt_->EnqueueAllreduce(b.View(), b.View(), a));
  ASSERT_FALSE(later.ok());
  EXPECT_TRUE(Contains(later.message(), "kolo is not running")) << later.message();
  EXPECT_TRUE(Contains(later.message(), "exception")) << later.message();
}

}  // namespace
}  // namespace kolo::test
