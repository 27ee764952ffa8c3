// Helpers for the multi-rank tests: a fresh runtime per test, typed buffers
// of every dtype, and values each rank can compute for every other rank.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../ops/cpu_kernels.h"
#include "kolo/mpi_handle.h"
#include "kolo/runtime.h"
#include "ops/data_mover.h"

// Defined when built with ASan or TSan (GCC or clang): some tests shrink or
// skip work that the sanitizers make too slow or that their allocators refuse.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KOLO_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KOLO_SANITIZED 1
#endif
#endif

namespace kolo::test {

// A runtime created for one test and shut down after it.
class RuntimeTest : public ::testing::Test {
 protected:
  virtual std::vector<std::pair<std::string, std::string>> Settings() { return {}; }
  void SetUp() override {
    InitOptions options;
    options.comm = HandleOfComm(MPI_COMM_WORLD);
    options.settings = Settings();
    auto rt = Runtime::Create(options);
    ASSERT_TRUE(rt.ok()) << rt.status().ToString();
    rt_ = std::move(rt).value();
    rank_ = rt_->rank();
    size_ = rt_->size();
  }
  void TearDown() override {
    if (rt_) {
      EXPECT_TRUE(rt_->Shutdown().ok());
    }
  }
  Status Run(Result<Handle> h, WorkResult* out = nullptr) {
    if (!h.ok()) return h.status();
    return rt_->Wait(h.value(), out);
  }
  std::unique_ptr<Runtime> rt_;
  int rank_ = 0, size_ = 1;
};

// Orders ranks by a message, not a sleep: a barrier on a communicator of the
// test's own, beside kolo's (the tests run under MPI_THREAD_MULTIPLE, so the
// background threads go on negotiating meanwhile). Made collectively, by every
// rank. A waiting rank polls with short naps instead of spinning inside
// MPI_Barrier, so that it leaves the cores to the other ranks' threads.
class SideBarrier {
 public:
  SideBarrier() { MPI_Comm_dup(MPI_COMM_WORLD, &comm_); }
  ~SideBarrier() { MPI_Comm_free(&comm_); }
  SideBarrier(const SideBarrier&) = delete;
  SideBarrier& operator=(const SideBarrier&) = delete;

  // Returns once every rank has called it.
  void Wait() {
    MPI_Request request;
    MPI_Ibarrier(comm_, &request);
    for (int done = 0;;) {
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// A host buffer of `n` elements of `dtype`, read and written as doubles.
class Buffer {
 public:
  Buffer(DataType dtype, int64_t n) : dtype_(dtype), n_(n), bytes_(n * DataTypeSize(dtype) + 1) {}
  void* data() { return bytes_.data(); }
  int64_t size() const { return n_; }
  DataType dtype() const { return dtype_; }
  TensorView View(std::vector<int64_t> shape) { return {data(), dtype_, std::move(shape)}; }
  TensorView View() { return View({n_}); }

  double Get(int64_t i) const { return Read(bytes_.data(), dtype_, i); }
  void Set(int64_t i, double v) { Write(bytes_.data(), dtype_, i, v); }

  static double Read(const void* p, DataType t, int64_t i) {
    switch (t) {
      case DataType::kUInt8:
        return static_cast<const uint8_t*>(p)[i];
      case DataType::kInt8:
        return static_cast<const int8_t*>(p)[i];
      case DataType::kUInt16:
        return static_cast<const uint16_t*>(p)[i];
      case DataType::kInt16:
        return static_cast<const int16_t*>(p)[i];
      case DataType::kInt32:
        return static_cast<const int32_t*>(p)[i];
      case DataType::kInt64:
        return static_cast<double>(static_cast<const int64_t*>(p)[i]);
      case DataType::kFloat16:
        return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
      case DataType::kBFloat16:
        return BFloat16ToFloat(static_cast<const uint16_t*>(p)[i]);
      case DataType::kFloat32:
        return static_cast<const float*>(p)[i];
      case DataType::kFloat64:
        return static_cast<const double*>(p)[i];
      case DataType::kBool:
        return static_cast<const bool*>(p)[i] ? 1 : 0;
    }
    return 0;
  }
  static void Write(void* p, DataType t, int64_t i, double v) {
    switch (t) {
      case DataType::kUInt8:
        static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v);
        break;
      case DataType::kInt8:
        static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v);
        break;
      case DataType::kUInt16:
        static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(v);
        break;
      case DataType::kInt16:
        static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v);
        break;
      case DataType::kInt32:
        static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v);
        break;
      case DataType::kInt64:
        static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v);
        break;
      case DataType::kFloat16:
        static_cast<uint16_t*>(p)[i] = FloatToHalf(static_cast<float>(v));
        break;
      case DataType::kBFloat16:
        static_cast<uint16_t*>(p)[i] = FloatToBFloat16(static_cast<float>(v));
        break;
      case DataType::kFloat32:
        static_cast<float*>(p)[i] = static_cast<float>(v);
        break;
      case DataType::kFloat64:
        static_cast<double*>(p)[i] = v;
        break;
      case DataType::kBool:
        static_cast<bool*>(p)[i] = v != 0;
        break;
    }
  }

 private:
  DataType dtype_;
  int64_t n_;
  std::vector<uint8_t> bytes_;
};

inline const std::vector<DataType>& AllDataTypes() {
  static const std::vector<DataType> kAll = {
      DataType::kUInt8,   DataType::kInt8,    DataType::kUInt16,  DataType::kInt16,
      DataType::kInt32,   DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
      DataType::kFloat32, DataType::kFloat64, DataType::kBool};
  return kAll;
}

inline bool IsFloat(DataType t) {
  return t == DataType::kFloat16 || t == DataType::kBFloat16 || t == DataType::kFloat32 ||
         t == DataType::kFloat64;
}

// The value rank `r` contributes at element `i`: small integers, exact in
// every dtype, whose sums over 4 ranks still fit in int8.
inline double ValueOf(DataType t, int r, int64_t i, ReduceOp op) {
  if (t == DataType::kBool) return ((r + i) % 3) == 0 ? 1 : 0;
  if (op == ReduceOp::kProduct) return 1 + ((r + i) % 2);
  return (r + 1) * (i % 5 + 1);
}

// Sums float32 buffers of the given sizes, all in flight at once (so that the
// runtime fuses, splits and reduces in place as its settings say), and checks
// every element: rank r contributes (r + 1) * (i % period) + k to tensor k.
inline void AllreduceSizesAndCheck(Runtime& rt, const std::vector<int64_t>& sizes,
                                   const std::string& prefix, int64_t period) {
  const int rank = rt.rank(), size = rt.size();
  std::vector<Buffer> bufs;
  for (int64_t n : sizes) bufs.emplace_back(DataType::kFloat32, n);
  std::vector<Handle> handles;
  for (size_t k = 0; k < bufs.size(); ++k) {
    for (int64_t i = 0; i < bufs[k].size(); ++i) bufs[k].Set(i, (rank + 1) * (i % period) + k);
    AllreduceOptions opts;
    opts.op = ReduceOp::kSum;
    opts.name = prefix + std::to_string(k);
    auto h = rt.EnqueueAllreduce(bufs[k].View(), bufs[k].View(), opts);
    ASSERT_TRUE(h.ok());
    handles.push_back(h.value());
  }
  for (Handle h : handles) ASSERT_TRUE(rt.Wait(h).ok());
  for (size_t k = 0; k < bufs.size(); ++k) {
    for (int64_t i = 0; i < bufs[k].size(); ++i) {
      double want = (i % period) * size * (size + 1) / 2.0 + k * size;
      ASSERT_EQ(bufs[k].Get(i), want) << "tensor " << k << " rank " << rank << " elem " << i;
    }
  }
}

// Runs `allreduce` (an allreduce of host memory over MPI_COMM_WORLD, e.g. a
// backend's) on every dtype x sum/min/max/product x counts crossing 256-byte
// pieces, and checks it bit for bit against MPI_Allreduce on the same input.
inline void ExpectSameBitsAsMpiAllreduce(
    const std::function<Status(void*, int64_t, DataType, ReduceOp)>& allreduce) {
  auto ops = MpiOps::Create();
  ASSERT_TRUE(ops.ok());
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (DataType dtype : AllDataTypes()) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct}) {
      for (int64_t count : {0, 1, 3, 7, 63, 64, 65, 129, 1000, 4099}) {
        Buffer ours(dtype, count), theirs(dtype, count);
        for (int64_t i = 0; i < count; ++i) {
          // Small values: products and fp16 sums stay exact, ranks differ.
          double v = dtype == DataType::kBool ? (i + rank) % 2 : (i * 7 + rank * 3) % 5 + 1;
          ours.Set(i, v);
          theirs.Set(i, v);
        }
        ASSERT_TRUE(allreduce(ours.data(), count, dtype, op).ok());
        ASSERT_EQ(
            MPI_Allreduce(MPI_IN_PLACE, theirs.data(), static_cast<int>(count),
                          ops.value()->Datatype(dtype), ops.value()->Op(dtype, op), MPI_COMM_WORLD),
            MPI_SUCCESS);
        for (int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(ours.Get(i), theirs.Get(i))
              << DataTypeName(dtype) << " op " << static_cast<int>(op) << " count " << count
              << " element " << i << " rank " << rank;
        }
      }
    }
  }
}

// ExpectSameBitsAsMpiAllreduce for an out-of-place allreduce(in, out, ...):
// the input is a copy of each test buffer, the result goes into the buffer,
// and the input must come back unwritten.
inline void ExpectSameBitsOutOfPlaceLeavingTheInputAlone(
    const std::function<Status(const void*, void*, int64_t, DataType, ReduceOp)>& allreduce) {
  ExpectSameBitsAsMpiAllreduce([&](void* p, int64_t n, DataType dtype, ReduceOp op) {
    const size_t bytes = static_cast<size_t>(n) * DataTypeSize(dtype);
    std::vector<uint8_t> in(static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + bytes);
    const std::vector<uint8_t> before = in;
    Status s = allreduce(in.data(), p, n, dtype, op);
    EXPECT_EQ(in, before) << "the input was written to";
    return s;
  });
}

}  // namespace kolo::test
