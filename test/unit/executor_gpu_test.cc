// The executor's side of the GPU path, with a Gpu that records what it is
// asked and finishes when told (no device, no MPI calls): when a device
// collective's entries finish, on which streams the callers are ordered after
// it with stream-ordered completion (KOLO_ENABLE_ASYNC_COMPLETION), and that
// work already completed holds up no caller and fails nobody later.
#include <gtest/gtest.h>

#include <memory>
#include <utility>
#include <vector>

#include "executor.h"

namespace kolo {
namespace {

class FakeGpu : public Gpu {
 public:
  struct Launched {
    OpType op;
    std::vector<void*> streams;  // of the tensors it was given
  };

  int DeviceCount() override { return 1; }
  Status CheckDevice(int, DataType) override { return Status::OK(); }
  Result<std::shared_ptr<void>> MarkReady(int, void*) override {
    return std::shared_ptr<void>(std::make_shared<int>());
  }
  Status CheckStream(int, void*) override { return Status::OK(); }
  std::unique_ptr<GpuComms> MakeComms(MPI_Comm) override { return std::make_unique<GpuComms>(); }

  Result<Token> Allreduce(GpuComms&, int, const std::vector<GpuTensor>& tensors, DataType, ReduceOp,
                          double, double) override {
    return Launch(OpType::kAllreduce, tensors);
  }
  Result<Token> Broadcast(GpuComms&, int, const GpuTensor& tensor, int64_t, int) override {
    return Launch(OpType::kBroadcast, {tensor});
  }
  Result<Token> Allgatherv(GpuComms&, int, const GpuTensor& tensor, int64_t,
                           const std::vector<int64_t>&, GpuOutput*) override {
    return Launch(OpType::kAllgather, {tensor});
  }
  Result<Token> Alltoallv(GpuComms&, int, const GpuTensor& tensor, const std::vector<int64_t>&,
                          const std::vector<int64_t>&, GpuOutput*) override {
    return Launch(OpType::kAlltoall, {tensor});
  }
  Result<Token> ReduceScatter(GpuComms&, int, const GpuTensor& tensor, const std::vector<int64_t>&,
                              DataType, ReduceOp, double, double, GpuOutput*) override {
    return Launch(OpType::kReducescatter, {tensor});
  }

  // Not done until Release(); then done, or the error given.
  Result<bool> Poll(const Token&) override {
    if (!released_) return false;
    if (!error_.ok()) return error_;
    return true;
  }
  Status OrderAfter(const Token& token, void* stream) override {
    ordered_.emplace_back(token.get(), stream);
    return Status::OK();
  }

  void Release(Status error = Status::OK()) {
    released_ = true;
    error_ = std::move(error);
  }

  std::vector<Launched> launched_;
  std::vector<std::pair<void*, void*>> ordered_;  // (token, stream)

 private:
  Result<Token> Launch(OpType op, const std::vector<GpuTensor>& tensors) {
    Launched l{op, {}};
    for (const GpuTensor& t : tensors) l.streams.push_back(t.stream);
    launched_.push_back(std::move(l));
    return Token(std::make_shared<int>(static_cast<int>(launched_.size())));
  }

  bool released_ = false;
  Status error_;
};

// Streams and device memory stand in as distinct addresses: nothing reads them.
int stream_a = 0, stream_b = 0;
float memory[8];

TensorEntry DeviceEntry(const std::string& name, void* stream, int64_t count) {
  TensorEntry e;
  e.request.name = name;
  e.input = TensorView{memory, DataType::kFloat32, {count}, 0};
  e.output = e.input;
  e.stream = stream;
  return e;
}

Job DeviceJob(OpType op, std::vector<TensorEntry> entries) {
  Job job;
  job.response.op = op;
  job.response.device = 0;
  job.response.root = 0;
  for (TensorEntry& e : entries) {
    job.response.names.push_back(e.request.name);
    job.response.sizes.push_back(e.input.NumElements());
    job.entries.emplace_back(std::move(e));
  }
  return job;
}

class ExecutorOnDevice : public ::testing::Test {
 protected:
  Movers Device() {
    Movers m;
    m.device = &gpu_;
    m.device_comms = &comms_;
    return m;
  }
  std::vector<Finished> TakeFinished() {
    std::vector<Finished> out;
    executor_->TakeFinished(&out);
    return out;
  }

  FakeGpu gpu_;
  GpuComms comms_;
  std::unique_ptr<Executor> executor_;
};

TEST_F(ExecutorOnDevice, WithoutAsyncCompletionEntriesFinishWhenTheGpuIsDone) {
  executor_ = std::make_unique<Executor>(nullptr, false);
  executor_->Execute(DeviceJob(OpType::kAllreduce, {DeviceEntry("a", &stream_a, 4)}), Device());
  EXPECT_TRUE(TakeFinished().empty());
  EXPECT_TRUE(executor_->gpu_busy());
  executor_->PollGpu();
  EXPECT_TRUE(TakeFinished().empty());
  gpu_.Release();
  executor_->PollGpu();
  std::vector<Finished> done = TakeFinished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok()) << done[0].status.ToString();
  EXPECT_FALSE(executor_->gpu_busy());
  EXPECT_TRUE(gpu_.ordered_.empty()) << "the host waited: no stream to order";
}

// Allreduce and broadcast finish once queued, each entry's stream ordered
// after the collective; the work is only watched from then on.
TEST_F(ExecutorOnDevice, AsyncCompletionFinishesOnceQueuedAndOrdersEachStream) {
  executor_ = std::make_unique<Executor>(nullptr, true);
  executor_->Execute(DeviceJob(OpType::kAllreduce,
                               {DeviceEntry("a", &stream_a, 4), DeviceEntry("b", &stream_b, 2)}),
                     Device());
  ASSERT_EQ(gpu_.launched_.size(), 1u);
  EXPECT_EQ(gpu_.launched_[0].streams, (std::vector<void*>{&stream_a, &stream_b}));
  std::vector<Finished> done = TakeFinished();
  ASSERT_EQ(done.size(), 2u);
  for (const Finished& f : done) EXPECT_TRUE(f.status.ok()) << f.status.ToString();
  ASSERT_EQ(gpu_.ordered_.size(), 2u);
  EXPECT_EQ(gpu_.ordered_[0].second, &stream_a);
  EXPECT_EQ(gpu_.ordered_[1].second, &stream_b);
  EXPECT_EQ(gpu_.ordered_[0].first, gpu_.ordered_[1].first) << "both after the one collective";
  EXPECT_FALSE(executor_->gpu_busy()) << "completed work holds up no caller";

  executor_->Execute(DeviceJob(OpType::kBroadcast, {DeviceEntry("c", nullptr, 8)}), Device());
  done = TakeFinished();
  ASSERT_EQ(done.size(), 1u);
  ASSERT_EQ(gpu_.ordered_.size(), 3u);
  EXPECT_EQ(gpu_.ordered_[2].second, nullptr) << "the legacy default stream is a stream";

  // An error found later has nobody to fail: it is logged, the work dropped.
  gpu_.Release(Status::Internal("NCCL (asynchronous error) failed: remote process exited"));
  executor_->PollGpu();
  EXPECT_TRUE(TakeFinished().empty());
  executor_->DrainGpu();  // returns: nothing left in flight
}

// Results that kolo allocates and copies out complete on the host as before.
TEST_F(ExecutorOnDevice, AsyncCompletionLeavesAllgatherToTheHost) {
  executor_ = std::make_unique<Executor>(nullptr, true);
  Job job = DeviceJob(OpType::kAllgather, {DeviceEntry("g", &stream_a, 4)});
  job.entries[0]->request.shape = {4};
  job.response.sizes = {4};
  executor_->Execute(std::move(job), Device());
  ASSERT_EQ(gpu_.launched_.size(), 1u);
  EXPECT_TRUE(TakeFinished().empty());
  EXPECT_TRUE(executor_->gpu_busy());
  EXPECT_TRUE(gpu_.ordered_.empty());
  gpu_.Release();
  executor_->PollGpu();
  std::vector<Finished> done = TakeFinished();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok()) << done[0].status.ToString();
}

}  // namespace
}  // namespace kolo
