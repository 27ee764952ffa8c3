// kolo._core's side of the TensorFlow op library's C table (StartTfOperation,
// bindings/tf_operation.h) on host memory, as the CPU kernels use it, and its
// refusal of device tensors where kolo cannot reach the device: each tensor's
// device travels through the table and is never taken for host memory.
#include <cstring>
#include <string>
#include <vector>

#include "test_util.h"
#include "tf_operation.h"
#include "tf_outcome.h"

namespace kolo::test {
namespace {

class TfOperation : public RuntimeTest {};

TEST_F(TfOperation, AllreduceOnHostMemoryInPlaceAndByTheCaller) {
  for (bool caller_waits : {false, true}) {
    std::vector<float> data(5);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>((rank_ + 1) * i);
    const int64_t shape[] = {5};
    KoloTfTensor t{data.data(), KOLO_TF_FLOAT32, 1, shape, KOLO_TF_HOST};
    TfOutcome outcome;
    const std::string name = caller_waits ? "tf.allreduce.caller" : "tf.allreduce.background";
    StartTfOperation(rt_.get(), TfRequest(KOLO_TF_ALLREDUCE, name.c_str(), caller_waits), 1, &t, &t,
                     &TfOutcome::Done, &outcome);
    ASSERT_TRUE(outcome.Wait());
    ASSERT_EQ(outcome.code, KOLO_TF_OK) << outcome.message;
    const float ranks_sum = size_ * (size_ + 1) / 2.0f;
    for (size_t i = 0; i < data.size(); ++i) {
      ASSERT_EQ(data[i], ranks_sum * i) << "rank " << rank_ << " elem " << i;
    }
    EXPECT_EQ(outcome.reports(), 1);
  }
}

TEST_F(TfOperation, AllgatherResultIsHostMemoryWithItsShape) {
  const int64_t rows = rank_ + 1;
  std::vector<int64_t> data(rows * 2, rank_);
  const int64_t shape[] = {rows, 2};
  KoloTfTensor t{data.data(), KOLO_TF_INT64, 2, shape, KOLO_TF_HOST};
  TfOutcome outcome;
  StartTfOperation(rt_.get(), TfRequest(KOLO_TF_ALLGATHER, "tf.allgather"), 1, &t, nullptr,
                   &TfOutcome::Done, &outcome);
  ASSERT_TRUE(outcome.Wait());
  ASSERT_EQ(outcome.code, KOLO_TF_OK) << outcome.message;
  ASSERT_EQ(outcome.results.size(), 1u);
  const TfResultCopy& r = outcome.results[0];
  EXPECT_EQ(r.device, KOLO_TF_HOST);
  ExpectGatheredRows(r, size_, 2, 0, rank_);
}

// A tensor on a device that no machine here has: refused on every rank with
// kolo's message (which device, and why), reported once, never read as host
// memory.
TEST_F(TfOperation, TensorOnAnUnusableDeviceIsRefusedOnEveryRank) {
  std::vector<float> data(4, 1.0f);
  const int64_t shape[] = {4};
  KoloTfTensor t{data.data(), KOLO_TF_FLOAT32, 1, shape, 99};
  KoloTfRequest r = TfRequest(KOLO_TF_ALLREDUCE, "tf.unusable_device");
  r.cuda_stream = nullptr;
  TfOutcome outcome;
  StartTfOperation(rt_.get(), r, 1, &t, &t, &TfOutcome::Done, &outcome);
  ASSERT_TRUE(outcome.Wait());
  EXPECT_EQ(outcome.code, KOLO_TF_INVALID_ARGUMENT) << outcome.message;
  EXPECT_TRUE(outcome.message.find("cuda:99") != std::string::npos ||
              outcome.message.find("no GPU support") != std::string::npos)
      << outcome.message;
  EXPECT_EQ(data, std::vector<float>(4, 1.0f)) << "rank " << rank_;
  // kolo goes on: the next collective runs.
  KoloTfTensor host{data.data(), KOLO_TF_FLOAT32, 1, shape, KOLO_TF_HOST};
  TfOutcome next;
  StartTfOperation(rt_.get(), TfRequest(KOLO_TF_ALLREDUCE, "tf.after_refusal"), 1, &host, &host,
                   &TfOutcome::Done, &next);
  ASSERT_TRUE(next.Wait());
  ASSERT_EQ(next.code, KOLO_TF_OK) << next.message;
  EXPECT_EQ(data[0], static_cast<float>(size_)) << "rank " << rank_;
}

TEST_F(TfOperation, DeviceCodeThatIsNoDeviceIsRefusedAtOnce) {
  float x = 1;
  const int64_t shape[] = {1};
  KoloTfTensor t{&x, KOLO_TF_FLOAT32, 1, shape, -7};
  TfOutcome outcome;
  StartTfOperation(rt_.get(), TfRequest(KOLO_TF_ALLREDUCE, "tf.bad_device_code"), 1, &t, &t,
                   &TfOutcome::Done, &outcome);
  ASSERT_EQ(outcome.reports(), 1) << "a refusal reports before start() returns";
  EXPECT_EQ(outcome.code, KOLO_TF_INVALID_ARGUMENT);
  EXPECT_NE(outcome.message.find("device code -7"), std::string::npos) << outcome.message;
}

TEST(TfOperationWithoutRuntime, IsRefusedSayingKoloIsNotRunning) {
  TfOutcome outcome;
  KoloTfRequest r{};
  r.kind = KOLO_TF_BARRIER;
  r.name = "";
  r.call_site = "";
  StartTfOperation(nullptr, r, 0, nullptr, nullptr, &TfOutcome::Done, &outcome);
  ASSERT_EQ(outcome.reports(), 1);
  EXPECT_NE(outcome.code, KOLO_TF_OK);
  EXPECT_NE(outcome.message.find("kolo is not running"), std::string::npos) << outcome.message;
}

}  // namespace
}  // namespace kolo::test
