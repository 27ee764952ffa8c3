// The GPU path on device memory: every collective through NCCL, fusion with
// scale factors, float16/bfloat16, ordering after work on the caller's
// stream; with stream-ordered completion (KOLO_ENABLE_ASYNC_COMPLETION) the
// caller's stream ordered after the collective, and grouped tensors as one
// NCCL group; a stream that a CUDA graph captures refused by name. Runs where
// a CUDA device is present (NCCL allows one rank per GPU: np=1 on a one-GPU
// machine); elsewhere every test skips saying why.
#include <cuda_runtime.h>
#include <mpi.h>

#include <cstring>
#include <string>
#include <vector>

#include "gpu_fixture.h"
#include "test_util.h"

namespace kolo::test {
namespace {

// Host mirror + device copy of one tensor.
class DeviceBuffer {
 public:
  DeviceBuffer(DataType dtype, int64_t n) : host_(dtype, n), bytes_(n * DataTypeSize(dtype)) {
    EXPECT_EQ(cudaMalloc(&device_, std::max<size_t>(bytes_, 1)), cudaSuccess);
  }
  ~DeviceBuffer() { cudaFree(device_); }
  Buffer& host() { return host_; }
  void Upload() { ASSERT_EQ(cudaMemcpy(device_, host_.data(), bytes_, cudaMemcpyHostToDevice), 0); }
  void Download() {
    ASSERT_EQ(cudaMemcpy(host_.data(), device_, bytes_, cudaMemcpyDeviceToHost), 0);
  }
  TensorView View(std::vector<int64_t> shape) {
    return {device_, host_.dtype(), std::move(shape), 0};
  }
  TensorView View() { return View({host_.size()}); }
  void* device() { return device_; }

 private:
  Buffer host_;
  size_t bytes_;
  void* device_ = nullptr;
};

class Gpu : public OneGpuPerRankTest {};

TEST_F(Gpu, AllreduceEveryFloatTypeFusedAndScaled) {
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                         DataType::kBFloat16, DataType::kInt32, DataType::kInt64}) {
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    std::vector<Handle> handles;
    for (int64_t n : {1, 17, 1000, 70000}) {
      bufs.push_back(std::make_unique<DeviceBuffer>(dtype, n));
      for (int64_t i = 0; i < n; ++i) bufs.back()->host().Set(i, (rank_ + 1) * (i % 5));
      bufs.back()->Upload();
      AllreduceOptions opts;
      opts.op = ReduceOp::kSum;
      opts.prescale_factor = 2;
      opts.postscale_factor = 0.5;
      opts.name = std::string("gpu.") + DataTypeName(dtype) + "." + std::to_string(n);
      auto h = rt_->EnqueueAllreduce(bufs.back()->View(), bufs.back()->View(), opts);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      handles.push_back(h.value());
    }
    for (Handle h : handles) {
      Status s = rt_->Wait(h);
      ASSERT_TRUE(s.ok()) << s.ToString();
    }
    for (auto& b : bufs) {
      b->Download();
      for (int64_t i = 0; i < b->host().size(); ++i) {
        ASSERT_EQ(b->host().Get(i), (i % 5) * size_ * (size_ + 1) / 2.0)
            << DataTypeName(dtype) << " element " << i;
      }
    }
  }
}

TEST_F(Gpu, AverageIsNative) {
  DeviceBuffer b(DataType::kFloat32, 8);
  for (int i = 0; i < 8; ++i) b.host().Set(i, rank_ * 2);
  b.Upload();
  AllreduceOptions opts;  // kAverage
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts)).ok());
  b.Download();
  EXPECT_EQ(b.host().Get(3), size_ - 1);
}

TEST_F(Gpu, BroadcastAllgatherAlltoallReducescatter) {
  DeviceBuffer x(DataType::kFloat32, 6);
  for (int i = 0; i < 6; ++i) x.host().Set(i, rank_ * 10 + i);
  x.Upload();
  ASSERT_TRUE(Run(rt_->EnqueueBroadcast(x.View(), 0, {})).ok());
  x.Download();
  EXPECT_EQ(x.host().Get(5), 5);

  // Allgather with a different first dimension per rank: rank r sends r+1 rows.
  DeviceBuffer rows(DataType::kFloat32, (rank_ + 1) * 2);
  for (int i = 0; i < (rank_ + 1) * 2; ++i) rows.host().Set(i, rank_);
  rows.Upload();
  WorkResult gathered;
  ASSERT_TRUE(Run(rt_->EnqueueAllgather(rows.View({rank_ + 1, 2}), {}), &gathered).ok());
  ASSERT_EQ(gathered.device, 0);
  ASSERT_EQ(gathered.shape[0], size_ * (size_ + 1) / 2);
  DeviceBuffer all(DataType::kFloat32, gathered.shape[0] * 2);
  ASSERT_TRUE(CopyDeviceResult(gathered, all.device()).ok());
  all.Download();
  EXPECT_EQ(all.host().Get(0), 0);
  EXPECT_EQ(all.host().Get(all.host().size() - 1), size_ - 1);

  // Alltoall: one row to every rank.
  DeviceBuffer a(DataType::kFloat32, size_);
  for (int i = 0; i < size_; ++i) a.host().Set(i, rank_ * 100 + i);
  a.Upload();
  WorkResult swapped;
  ASSERT_TRUE(Run(rt_->EnqueueAlltoall(a.View(), {}, {}), &swapped).ok());
  DeviceBuffer got(DataType::kFloat32, size_);
  ASSERT_TRUE(CopyDeviceResult(swapped, got.device()).ok());
  got.Download();
  for (int r = 0; r < size_; ++r) EXPECT_EQ(got.host().Get(r), r * 100 + rank_);

  // Reducescatter of size_+1 rows: rank 0 keeps two.
  DeviceBuffer rs(DataType::kFloat32, size_ + 1);
  for (int i = 0; i <= size_; ++i) rs.host().Set(i, i);
  rs.Upload();
  ReducescatterOptions ro;
  ro.op = ReduceOp::kSum;
  WorkResult scattered;
  ASSERT_TRUE(Run(rt_->EnqueueReducescatter(rs.View(), ro), &scattered).ok());
  DeviceBuffer mine(DataType::kFloat32, scattered.shape[0]);
  ASSERT_TRUE(CopyDeviceResult(scattered, mine.device()).ok());
  mine.Download();
  const int first = rank_ == 0 ? 0 : rank_ + 1;
  EXPECT_EQ(mine.host().Get(0), first * size_);
}

// The collective waits for work the caller queued on its own stream.
TEST_F(Gpu, WaitsForTheCallersStream) {
  cudaStream_t user;
  ASSERT_EQ(cudaStreamCreateWithFlags(&user, cudaStreamNonBlocking), cudaSuccess);
  const int64_t n = 1 << 22;
  DeviceBuffer b(DataType::kFloat32, n);
  std::vector<float> ones(n, 1.0f);
  ASSERT_EQ(cudaMemcpyAsync(b.device(), ones.data(), n * 4, cudaMemcpyHostToDevice, user), 0);
  AllreduceOptions opts;
  opts.op = ReduceOp::kSum;
  opts.cuda_stream = user;
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts)).ok());
  b.Download();
  EXPECT_EQ(b.host().Get(n - 1), size_);
  cudaStreamDestroy(user);
}

// Adasum on device memory as Horovod runs it: summed within the host (NCCL),
// combined across hosts on host memory, divided by the ranks per host
// (Horovod's postscale / local_size). Orthogonal tensors add up across
// hosts, so the result is their sum over every rank / local_size, what
// Horovod's test_adasum_pytorch.py expects (denominator = local_size).
TEST_F(Gpu, AdasumSumsWithinTheHostAndCombinesAcrossHosts) {
  const int local_size = rt_->local_size();
  for (DataType dtype : {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64}) {
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    std::vector<TensorView> views;
    for (int64_t n : {int64_t{1}, int64_t{3} * size_ + 1, int64_t{70001}}) {
      bufs.push_back(std::make_unique<DeviceBuffer>(dtype, n));
      for (int64_t i = 0; i < n; ++i)
        bufs.back()->host().Set(i, i % size_ == rank_ ? rank_ + 1 : 0);
      bufs.back()->Upload();
      views.push_back(bufs.back()->View());
    }
    AllreduceOptions opts;
    opts.op = ReduceOp::kAdasum;
    opts.prescale_factor = 2;
    opts.postscale_factor = 0.5;
    opts.name = std::string("gpu.adasum.") + DataTypeName(dtype);
    ASSERT_TRUE(Run(rt_->EnqueueGroupedAllreduce(views, views, opts)).ok());
    for (auto& b : bufs) {
      b->Download();
      for (int64_t i = 0; i < b->host().size(); ++i) {
        const double want = static_cast<double>(i % size_ + 1) / local_size;
        ASSERT_NEAR(b->host().Get(i), want, 1e-3 * want)
            << DataTypeName(dtype) << " rank " << rank_ << " elem " << i;
      }
    }
  }
  DeviceBuffer ints(DataType::kInt32, 4);
  AllreduceOptions opts;
  opts.op = ReduceOp::kAdasum;
  opts.name = "gpu.adasum.int32";
  Status s = Run(rt_->EnqueueAllreduce(ints.View(), ints.View(), opts));
  EXPECT_EQ(s.code(), StatusCode::kPreconditionFailed) << s.ToString();
}

// Starts a collective on a stream that a CUDA graph is capturing: refused on
// every rank with an error that names the graph, and nothing is captured.
void ExpectCaptureRefused(Runtime& rt, int device) {
  cudaStream_t capturing;
  ASSERT_EQ(cudaStreamCreateWithFlags(&capturing, cudaStreamNonBlocking), cudaSuccess);
  DeviceBuffer b(DataType::kFloat32, 4);
  ASSERT_EQ(cudaStreamBeginCapture(capturing, cudaStreamCaptureModeThreadLocal), cudaSuccess);
  AllreduceOptions opts;
  opts.cuda_stream = capturing;
  opts.name = "gpu.captured";
  Result<Handle> h = rt.EnqueueAllreduce(b.View(), b.View(), opts);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(capturing, &graph), cudaSuccess);
  if (graph != nullptr) cudaGraphDestroy(graph);
  cudaStreamDestroy(capturing);
  ASSERT_FALSE(h.ok()) << "device " << device;
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument) << h.status().ToString();
  EXPECT_NE(h.status().message().find("CUDA graph"), std::string::npos) << h.status().ToString();
  EXPECT_NE(h.status().message().find("gpu.captured"), std::string::npos) << h.status().ToString();
}

TEST_F(Gpu, ACapturedStreamIsRefusedByName) { ExpectCaptureRefused(*rt_, device_); }

// Stream-ordered completion, and grouped tensors of 4 KiB and more as one
// NCCL group.
class GpuAsync : public OneGpuPerRankTest {
 protected:
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_ENABLE_ASYNC_COMPLETION", "1"}, {"KOLO_NCCL_GROUP_MIN_BYTES", "4K"}};
  }
};

// The handle completes once the collective is queued; what the caller queues
// on its stream afterwards (here the copy back) sees the result. Two
// tensors from two streams, fused into one collective on kolo's stream,
// order both streams after it.
TEST_F(GpuAsync, TheCallersStreamsSeeTheResult) {
  const int64_t n = 1 << 22;
  cudaStream_t streams[2];
  std::vector<std::unique_ptr<DeviceBuffer>> bufs;
  std::vector<Handle> handles;
  for (int k = 0; k < 2; ++k) {
    ASSERT_EQ(cudaStreamCreateWithFlags(&streams[k], cudaStreamNonBlocking), cudaSuccess);
    bufs.push_back(std::make_unique<DeviceBuffer>(DataType::kFloat32, n));
    std::vector<float> values(n, static_cast<float>(k + 1));
    ASSERT_EQ(cudaMemcpyAsync(bufs[k]->device(), values.data(), n * 4, cudaMemcpyHostToDevice,
                              streams[k]),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(streams[k]), cudaSuccess);  // `values` goes out of scope
  }
  for (int round = 0; round < 3; ++round) {
    for (int k = 0; k < 2; ++k) {
      AllreduceOptions opts;
      opts.op = ReduceOp::kSum;
      opts.cuda_stream = streams[k];
      opts.name = "gpu.async." + std::to_string(k);
      auto h = rt_->EnqueueAllreduce(bufs[k]->View(), bufs[k]->View(), opts);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      handles.push_back(h.value());
    }
    for (Handle h : handles) ASSERT_TRUE(rt_->Wait(h).ok());
    handles.clear();
  }
  for (int k = 0; k < 2; ++k) {
    std::vector<float> got(n);
    ASSERT_EQ(
        cudaMemcpyAsync(got.data(), bufs[k]->device(), n * 4, cudaMemcpyDeviceToHost, streams[k]),
        cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(streams[k]), cudaSuccess);
    const float want = static_cast<float>((k + 1) * size_ * size_ * size_);
    EXPECT_EQ(got[0], want) << "stream " << k;
    EXPECT_EQ(got[n - 1], want) << "stream " << k;
    cudaStreamDestroy(streams[k]);
  }
}

// Grouped tensors of at least 4 KiB go as one NCCL group, from each input
// into its output, scaled as asked; a small one sends them all through the
// fusion buffer. Both give the fusion buffer's results.
TEST_F(GpuAsync, GroupedTensorsAsOneNcclGroupOrThroughTheFusionBuffer) {
  for (int64_t smallest : {int64_t{1024}, int64_t{7}}) {
    std::vector<std::unique_ptr<DeviceBuffer>> in, out;
    std::vector<TensorView> ins, outs;
    for (int64_t n : {smallest, int64_t{5000}, int64_t{70001}}) {
      in.push_back(std::make_unique<DeviceBuffer>(DataType::kFloat32, n));
      out.push_back(std::make_unique<DeviceBuffer>(DataType::kFloat32, n));
      for (int64_t i = 0; i < n; ++i) in.back()->host().Set(i, (rank_ + 1) * (i % 7));
      in.back()->Upload();
      ins.push_back(in.back()->View());
      outs.push_back(out.back()->View());
    }
    AllreduceOptions opts;
    opts.op = ReduceOp::kSum;
    opts.prescale_factor = 2;
    opts.postscale_factor = 0.25;
    opts.name = "gpu.group." + std::to_string(smallest);
    ASSERT_TRUE(Run(rt_->EnqueueGroupedAllreduce(ins, outs, opts)).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);  // the legacy stream's copies below
    for (size_t k = 0; k < out.size(); ++k) {
      out[k]->Download();
      in[k]->Download();
      for (int64_t i = 0; i < out[k]->host().size(); ++i) {
        ASSERT_EQ(out[k]->host().Get(i), (i % 7) * size_ * (size_ + 1) / 4.0)
            << "tensor " << k << " element " << i << " smallest " << smallest;
        ASSERT_EQ(in[k]->host().Get(i), (rank_ + 1) * (i % 7)) << "the input changed";
      }
    }
  }
}

TEST_F(GpuAsync, ACapturedStreamIsRefusedByName) { ExpectCaptureRefused(*rt_, device_); }

}  // namespace
}  // namespace kolo::test
