// kolo._core's side of the TensorFlow op library's C table on device memory,
// as the GPU kernels use it: the tensors' device and the op's stream go
// through the table, kolo's collective runs after the work enqueued on that
// stream, and the report comes once the device work has finished, with
// allgather's and alltoall's results in device memory. Runs where a CUDA
// device is present (one per rank); elsewhere every test skips saying why.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gpu_fixture.h"
#include "test_util.h"
#include "tf_operation.h"
#include "tf_outcome.h"

namespace kolo::test {
namespace {

void ReadDevice(const KoloTfResult& r, std::vector<uint8_t>* out) {
  out->resize(r.bytes);
  if (r.bytes > 0) {
    EXPECT_EQ(cudaMemcpy(out->data(), r.data, r.bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  }
}

class TfOperationGpu : public OneGpuPerRankTest {
 protected:
  void SetUp() override {
    OneGpuPerRankTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    RuntimeTest::TearDown();
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  KoloTfRequest Request(int32_t kind, const char* name) {
    KoloTfRequest r = TfRequest(kind, name);
    r.cuda_stream = stream_;
    return r;
  }
  // `values` copied to a new device buffer on the test's stream, not waited
  // for: kolo's collective must wait for the copy.
  template <typename T>
  T* Upload(const std::vector<T>& values) {
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(values.size() * sizeof(T), 1)), cudaSuccess);
    buffers_.emplace_back(p, &cudaFree);
    // Pageable memory: the copy is staged, then runs in stream order.
    EXPECT_EQ(cudaMemcpyAsync(p, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice,
                              stream_),
              cudaSuccess);
    return static_cast<T*>(p);
  }
  template <typename T>
  std::vector<T> Download(const T* p, size_t n) {
    std::vector<T> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }

  cudaStream_t stream_ = nullptr;
  std::vector<std::unique_ptr<void, cudaError_t (*)(void*)>> buffers_;
};

TEST_F(TfOperationGpu, AllreduceInPlaceAfterTheStreamAndDoneWhenTheResultIsThere) {
  const size_t n = 1 << 20;  // large enough that an unordered read would see zeros
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) values[i] = static_cast<float>((rank_ + 1) * (i % 7));
  // The stream first clears the buffer, then writes the values: kolo must see the values.
  float* data = Upload(std::vector<float>(n, 0.0f));
  ASSERT_EQ(
      cudaMemcpyAsync(data, values.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream_),
      cudaSuccess);
  const int64_t shape[] = {static_cast<int64_t>(n)};
  KoloTfTensor t{data, KOLO_TF_FLOAT32, 1, shape, device_};
  TfOutcome outcome;
  StartTfOperation(rt_.get(), Request(KOLO_TF_ALLREDUCE, "tf.gpu.allreduce"), 1, &t, &t,
                   &TfOutcome::Done, &outcome);
  ASSERT_TRUE(outcome.Wait());
  ASSERT_EQ(outcome.code, KOLO_TF_OK) << outcome.message;
  // Read on another non-blocking stream: only kolo's report orders it.
  cudaStream_t reader = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking), cudaSuccess);
  std::vector<float> got(n);
  ASSERT_EQ(cudaMemcpyAsync(got.data(), data, n * sizeof(float), cudaMemcpyDeviceToHost, reader),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(reader), cudaSuccess);
  cudaStreamDestroy(reader);
  const float ranks_sum = size_ * (size_ + 1) / 2.0f;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(got[i], ranks_sum * (i % 7)) << "rank " << rank_ << " elem " << i;
  }
}

TEST_F(TfOperationGpu, AllgatherResultStaysInDeviceMemory) {
  const int64_t rows = rank_ + 1;
  int64_t* data = Upload(std::vector<int64_t>(rows * 3, rank_ + 10));
  const int64_t shape[] = {rows, 3};
  KoloTfTensor t{data, KOLO_TF_INT64, 2, shape, device_};
  TfOutcome outcome(&ReadDevice);
  StartTfOperation(rt_.get(), Request(KOLO_TF_ALLGATHER, "tf.gpu.allgather"), 1, &t, nullptr,
                   &TfOutcome::Done, &outcome);
  ASSERT_TRUE(outcome.Wait());
  ASSERT_EQ(outcome.code, KOLO_TF_OK) << outcome.message;
  ASSERT_EQ(outcome.results.size(), 1u);
  const TfResultCopy& r = outcome.results[0];
  EXPECT_EQ(r.device, device_);
  ExpectGatheredRows(r, size_, 3, 10, rank_);
}

TEST_F(TfOperationGpu, AlltoallAndBroadcastOnTheDevice) {
  std::vector<float> mine(size_ * 2);
  for (size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<float>(rank_ * 100 + i);
  float* data = Upload(mine);
  const int64_t shape[] = {static_cast<int64_t>(mine.size())};
  KoloTfTensor t{data, KOLO_TF_FLOAT32, 1, shape, device_};
  TfOutcome swapped(&ReadDevice);
  StartTfOperation(rt_.get(), Request(KOLO_TF_ALLTOALL, "tf.gpu.alltoall"), 1, &t, nullptr,
                   &TfOutcome::Done, &swapped);
  ASSERT_TRUE(swapped.Wait());
  ASSERT_EQ(swapped.code, KOLO_TF_OK) << swapped.message;
  ASSERT_EQ(swapped.results.size(), 1u);
  EXPECT_EQ(swapped.results[0].device, device_);
  EXPECT_EQ(swapped.results[0].received_splits, std::vector<int64_t>(size_, 2));
  std::vector<float> got(size_ * 2);
  ASSERT_EQ(swapped.results[0].bytes.size(), got.size() * sizeof(float));
  std::memcpy(got.data(), swapped.results[0].bytes.data(), got.size() * sizeof(float));
  for (int from = 0; from < size_; ++from) {
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(got[from * 2 + k], static_cast<float>(from * 100 + rank_ * 2 + k))
          << "rank " << rank_ << " from " << from;
    }
  }

  KoloTfRequest b = Request(KOLO_TF_BROADCAST, "tf.gpu.broadcast");
  b.root = 0;
  TfOutcome broadcast;
  StartTfOperation(rt_.get(), b, 1, &t, &t, &TfOutcome::Done, &broadcast);
  ASSERT_TRUE(broadcast.Wait());
  ASSERT_EQ(broadcast.code, KOLO_TF_OK) << broadcast.message;
  std::vector<float> root = Download(data, mine.size());
  for (size_t i = 0; i < root.size(); ++i) {
    ASSERT_EQ(root[i], static_cast<float>(i)) << "rank " << rank_ << " elem " << i;
  }
}

}  // namespace
}  // namespace kolo::test
