// Every collective at np=2 and np=4, results checked against values each rank
// computes locally for all ranks.
#include <algorithm>
#include <atomic>
#include <future>
#include <numeric>

#include "test_util.h"

namespace kolo::test {
namespace {

double Fold(ReduceOp op, DataType t, double acc, double v) {
  if (t == DataType::kBool) {
    return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? (acc && v) : (acc || v);
  }
  switch (op) {
    case ReduceOp::kMin:
      return std::min(acc, v);
    case ReduceOp::kMax:
      return std::max(acc, v);
    case ReduceOp::kProduct:
      return acc * v;
    default:
      return acc + v;
  }
}

// The result every rank must see at element i, computed in the tensor's dtype.
double Expected(DataType t, ReduceOp op, int size, int64_t i) {
  double acc = ValueOf(t, 0, i, op);
  for (int r = 1; r < size; ++r) acc = Fold(op, t, acc, ValueOf(t, r, i, op));
  Buffer b(t, 1);
  b.Set(0, acc);
  if (op == ReduceOp::kAverage) {
    ScaleBuffer(b.data(), 1, t, 1.0 / size);
  }
  return b.Get(0);
}

using DtypeOp = std::tuple<DataType, ReduceOp>;

class AllreduceTest : public RuntimeTest, public ::testing::WithParamInterface<DtypeOp> {};

TEST_P(AllreduceTest, InPlaceOutOfPlaceAndFused) {
  auto [t, op] = GetParam();
  if (t == DataType::kBool && op == ReduceOp::kAverage) GTEST_SKIP() << "average of bool";
  const std::vector<int64_t> sizes = {1, 17, 1000, 0};
  std::vector<Buffer> in, out;
  for (int64_t n : sizes) {
    in.emplace_back(t, n);
    out.emplace_back(t, n);
    for (int64_t i = 0; i < n; ++i) in.back().Set(i, ValueOf(t, rank_, i, op));
  }
  AllreduceOptions opts;
  opts.op = op;
  // One tensor in place, one out of place.
  opts.name = "single.inplace";
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(in[1].View(), in[1].View(), opts)).ok());
  opts.name = "single.out";
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(in[2].View(), out[2].View(), opts)).ok());
  for (int64_t i = 0; i < sizes[1]; ++i) {
    ASSERT_EQ(in[1].Get(i), Expected(t, op, size_, i))
        << "in-place, rank " << rank_ << " elem " << i;
  }
  for (int64_t i = 0; i < sizes[2]; ++i) {
    ASSERT_EQ(out[2].Get(i), Expected(t, op, size_, i))
        << "out-of-place, rank " << rank_ << " elem " << i;
  }
  // A group is negotiated as one unit, so its members are fused.
  for (size_t k = 0; k < sizes.size(); ++k) {
    for (int64_t i = 0; i < sizes[k]; ++i) in[k].Set(i, ValueOf(t, rank_, i, op));
  }
  std::vector<TensorView> ins, outs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    ins.push_back(in[k].View());
    outs.push_back(out[k].View());
  }
  opts.name = "fused";
  Status s = Run(rt_->EnqueueGroupedAllreduce(ins, outs, opts));
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (size_t k = 0; k < sizes.size(); ++k) {
    for (int64_t i = 0; i < sizes[k]; ++i) {
      ASSERT_EQ(out[k].Get(i), Expected(t, op, size_, i))
          << "fused tensor " << k << ", rank " << rank_ << " elem " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypesAllOps, AllreduceTest,
                         ::testing::Combine(::testing::ValuesIn(AllDataTypes()),
                                            ::testing::Values(ReduceOp::kSum, ReduceOp::kAverage,
                                                              ReduceOp::kMin, ReduceOp::kMax,
                                                              ReduceOp::kProduct)),
                         [](const auto& info) {
                           return std::string(DataTypeName(std::get<0>(info.param))) + "_" +
                                  ReduceOpName(std::get<1>(info.param));
                         });

class Collectives : public RuntimeTest {};

TEST_F(Collectives, AllreduceScaleFactors) {
  for (DataType t :
       {DataType::kFloat32, DataType::kFloat64, DataType::kInt32, DataType::kFloat16}) {
    Buffer b(t, 8);
    for (int i = 0; i < 8; ++i) b.Set(i, 4 * (rank_ + 1) * (i + 1));
    AllreduceOptions opts;
    opts.op = ReduceOp::kSum;
    opts.prescale_factor = 0.5;
    opts.postscale_factor = 3;
    opts.name = std::string("scaled.") + DataTypeName(t);
    ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts)).ok());
    for (int i = 0; i < 8; ++i) {
      double want = 3 * 0.5 * 4 * (i + 1) * size_ * (size_ + 1) / 2;
      ASSERT_EQ(b.Get(i), want) << DataTypeName(t) << " rank " << rank_ << " elem " << i;
    }
  }
}

TEST_F(Collectives, ManyRandomSizesFusedOrNot) {
  std::mt19937 gen(7);  // same sizes on every rank
  std::vector<int64_t> sizes;
  for (int k = 0; k < 40; ++k) sizes.push_back(gen() % 20000);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    AllreduceSizesAndCheck(*rt_, sizes, "rand.", 11);
    if (HasFatalFailure()) return;
  }
}

class AllgatherTest : public RuntimeTest, public ::testing::WithParamInterface<DataType> {};

TEST_P(AllgatherTest, DifferentFirstDimensions) {
  DataType t = GetParam();
  const int cols = 3;
  auto rows_of = [](int r) { return r == 1 ? 0 : r + 1; };  // rank 1 sends nothing
  Buffer in(t, rows_of(rank_) * cols);
  for (int64_t i = 0; i < in.size(); ++i) in.Set(i, ValueOf(t, rank_, i, ReduceOp::kSum));
  WorkResult out;
  Status s = Run(rt_->EnqueueAllgather(in.View({rows_of(rank_), cols}), {}), &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  int64_t total_rows = 0;
  for (int r = 0; r < size_; ++r) total_rows += rows_of(r);
  ASSERT_EQ(out.shape, (std::vector<int64_t>{total_rows, cols}));
  int64_t offset = 0;
  for (int r = 0; r < size_; ++r) {
    for (int64_t i = 0; i < rows_of(r) * cols; ++i) {
      Buffer want(t, 1);
      want.Set(0, ValueOf(t, r, i, ReduceOp::kSum));
      ASSERT_EQ(Buffer::Read(out.data.data(), t, offset + i), want.Get(0))
          << "from rank " << r << " elem " << i << " on rank " << rank_;
    }
    offset += rows_of(r) * cols;
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, AllgatherTest, ::testing::ValuesIn(AllDataTypes()),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

class BroadcastTest : public RuntimeTest, public ::testing::WithParamInterface<DataType> {};

TEST_P(BroadcastTest, FromEveryRoot) {
  DataType t = GetParam();
  for (int root = 0; root < size_; ++root) {
    Buffer b(t, 33);
    for (int64_t i = 0; i < 33; ++i) b.Set(i, ValueOf(t, rank_, i, ReduceOp::kSum));
    CollectiveOptions opts;
    opts.name = "bcast." + std::to_string(root);
    ASSERT_TRUE(Run(rt_->EnqueueBroadcast(b.View({3, 11}), root, opts)).ok());
    for (int64_t i = 0; i < 33; ++i) {
      Buffer want(t, 1);
      want.Set(0, ValueOf(t, root, i, ReduceOp::kSum));
      ASSERT_EQ(b.Get(i), want.Get(0)) << "root " << root << " rank " << rank_ << " elem " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, BroadcastTest, ::testing::ValuesIn(AllDataTypes()),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

TEST_F(Collectives, AlltoallWithSplits) {
  // Rank r sends (r + j) % 3 rows to rank j; row values encode (source, destination, row).
  const int cols = 2;
  std::vector<int64_t> splits(size_);
  for (int j = 0; j < size_; ++j) splits[j] = (rank_ + j) % 3;
  int64_t rows = std::accumulate(splits.begin(), splits.end(), int64_t{0});
  Buffer in(DataType::kInt32, rows * cols);
  int64_t row = 0;
  for (int j = 0; j < size_; ++j) {
    for (int64_t k = 0; k < splits[j]; ++k, ++row) {
      for (int c = 0; c < cols; ++c) in.Set(row * cols + c, 1000 * rank_ + 100 * j + 10 * k + c);
    }
  }
  WorkResult out;
  Status s = Run(rt_->EnqueueAlltoall(in.View({rows, cols}), splits, {}), &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(out.received_splits.size(), static_cast<size_t>(size_));
  row = 0;
  for (int src = 0; src < size_; ++src) {
    ASSERT_EQ(out.received_splits[src], (src + rank_) % 3) << "from rank " << src;
    for (int64_t k = 0; k < out.received_splits[src]; ++k, ++row) {
      for (int c = 0; c < cols; ++c) {
        ASSERT_EQ(Buffer::Read(out.data.data(), DataType::kInt32, row * cols + c),
                  1000 * src + 100 * rank_ + 10 * k + c)
            << "from rank " << src << " row " << k << " on rank " << rank_;
      }
    }
  }
  ASSERT_EQ(out.shape, (std::vector<int64_t>{row, cols}));
}

TEST_F(Collectives, AlltoallEvenSplitByDefault) {
  Buffer in(DataType::kFloat32, size_ * 2);
  for (int64_t i = 0; i < in.size(); ++i) in.Set(i, rank_ * 100 + i);
  WorkResult out;
  ASSERT_TRUE(Run(rt_->EnqueueAlltoall(in.View(), {}, {}), &out).ok());
  for (int src = 0; src < size_; ++src) {
    for (int k = 0; k < 2; ++k) {
      ASSERT_EQ(Buffer::Read(out.data.data(), DataType::kFloat32, src * 2 + k),
                src * 100 + rank_ * 2 + k);
    }
  }
}

TEST_F(Collectives, ReducescatterUnevenRows) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
    for (DataType t : {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16}) {
      const int64_t rows = 2 * size_ + 1, cols = 3;
      Buffer in(t, rows * cols);
      for (int64_t i = 0; i < in.size(); ++i) in.Set(i, ValueOf(t, rank_, i, ReduceOp::kSum));
      ReducescatterOptions opts;
      opts.op = op;
      opts.name = std::string("rs.") + ReduceOpName(op) + DataTypeName(t);
      WorkResult out;
      Status s = Run(rt_->EnqueueReducescatter(in.View({rows, cols}), opts), &out);
      ASSERT_TRUE(s.ok()) << s.ToString();
      int64_t my_rows = rows / size_ + (rank_ < rows % size_ ? 1 : 0);
      int64_t first_row = 0;
      for (int r = 0; r < rank_; ++r) first_row += rows / size_ + (r < rows % size_ ? 1 : 0);
      ASSERT_EQ(out.shape, (std::vector<int64_t>{my_rows, cols}));
      for (int64_t i = 0; i < my_rows * cols; ++i) {
        ASSERT_EQ(Buffer::Read(out.data.data(), t, i), Expected(t, op, size_, first_row * cols + i))
            << ReduceOpName(op) << " " << DataTypeName(t) << " rank " << rank_ << " elem " << i;
      }
      // The input is left as it was.
      ASSERT_EQ(in.Get(1), Buffer::Read(in.data(), t, 1));
    }
  }
}

TEST_F(Collectives, GroupedAllgatherAndReducescatterReturnEveryPartInOrder) {
  // Rank r gathers r + 1 rows of `a` and 1 row of `b`; reducescatters `c`.
  Buffer a(DataType::kFloat32, (rank_ + 1) * 2), b(DataType::kInt32, 3), c(DataType::kFloat64, 8);
  for (int64_t i = 0; i < a.size(); ++i) a.Set(i, rank_);
  for (int64_t i = 0; i < b.size(); ++i) b.Set(i, 10 * rank_ + i);
  for (int64_t i = 0; i < c.size(); ++i) c.Set(i, i);
  WorkResult gathered;
  ASSERT_TRUE(
      Run(rt_->EnqueueGroupedAllgather({a.View({rank_ + 1, 2}), b.View({1, 3})}, {}), &gathered)
          .ok());
  ASSERT_EQ(gathered.parts.size(), 2u);
  const int64_t rows = size_ * (size_ + 1) / 2;
  ASSERT_EQ(gathered.parts[0].shape, (std::vector<int64_t>{rows, 2}));
  ASSERT_EQ(gathered.parts[1].shape, (std::vector<int64_t>{size_, 3}));
  int64_t row = 0;
  for (int r = 0; r < size_; ++r) {
    for (int k = 0; k < r + 1; ++k, ++row) {
      ASSERT_EQ(Buffer::Read(gathered.parts[0].data.data(), DataType::kFloat32, row * 2), r)
          << "rank " << rank_ << " row " << row;
    }
    ASSERT_EQ(Buffer::Read(gathered.parts[1].data.data(), DataType::kInt32, r * 3 + 2), 10 * r + 2)
        << "rank " << rank_;
  }
  ReducescatterOptions sum;
  sum.op = ReduceOp::kSum;
  WorkResult scattered;
  ASSERT_TRUE(
      Run(rt_->EnqueueGroupedReducescatter({c.View({8}), c.View({4, 2})}, sum), &scattered).ok());
  ASSERT_EQ(scattered.parts.size(), 2u);
  int64_t first = 0;
  for (int r = 0; r < rank_; ++r) first += 8 / size_ + (r < 8 % size_ ? 1 : 0);
  ASSERT_EQ(Buffer::Read(scattered.parts[0].data.data(), DataType::kFloat64, 0), first * size_);
}

TEST_F(Collectives, GroupedAllgatherFailsAsAWhole) {
  // One member disagrees on one rank: every member fails on every rank.
  Buffer a(DataType::kFloat32, 4), b(DataType::kFloat32, 4);
  CollectiveOptions opts;
  opts.name = "grouped.gather";
  std::vector<int64_t> b_shape =
      rank_ == 0 ? std::vector<int64_t>{1, 4} : std::vector<int64_t>{2, 2};
  Status s = Run(rt_->EnqueueGroupedAllgather({a.View({1, 4}), b.View(b_shape)}, opts));
  ASSERT_FALSE(s.ok()) << "rank " << rank_;
  EXPECT_NE(s.message().find("Group 'grouped.gather' failed"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("'grouped.gather.1'"), std::string::npos) << s.message();
}

TEST_F(Collectives, OneHostIsHomogeneous) {
  EXPECT_EQ(rt_->local_size(), size_);
  EXPECT_TRUE(rt_->is_homogeneous());
}

// WhenDone hands the result to a callback instead of a waiting thread, once,
// releases the handle, and reports an unknown handle as an error.
TEST_F(Collectives, WhenDoneCallsBackOnceWithTheResult) {
  Buffer in(DataType::kInt32, 3);
  for (int64_t i = 0; i < 3; ++i) in.Set(i, rank_ + i);
  Result<Handle> h = rt_->EnqueueAllgather(in.View({1, 3}), {});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  std::promise<std::pair<Status, WorkResult>> got;
  std::atomic<int> calls{0};
  rt_->WhenDone(h.value(), [&](Status s, WorkResult r) {
    if (calls++ == 0) got.set_value({std::move(s), std::move(r)});
  });
  std::future<std::pair<Status, WorkResult>> ready = got.get_future();
  ASSERT_EQ(ready.wait_for(std::chrono::seconds(30)), std::future_status::ready)
      << "rank " << rank_ << ": the callback never ran";
  auto [status, result] = ready.get();
  ASSERT_TRUE(status.ok()) << status.ToString();
  ASSERT_EQ(result.shape, (std::vector<int64_t>{size_, 3}));
  for (int r = 0; r < size_; ++r) {
    EXPECT_EQ(Buffer::Read(result.data.data(), DataType::kInt32, r * 3 + 2), r + 2)
        << "from rank " << r << " on rank " << rank_;
  }
  EXPECT_EQ(calls.load(), 1);
  EXPECT_TRUE(rt_->Poll(h.value())) << "the handle is released (an unknown one polls done)";

  Status unknown;
  rt_->WhenDone(h.value(), [&](Status s, WorkResult) { unknown = std::move(s); });
  EXPECT_FALSE(unknown.ok()) << "a released handle is an error, given at once";
}

TEST_F(Collectives, BarrierCompletesOnEveryRank) {
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(Run(rt_->EnqueueBarrier({})).ok());
}

TEST_F(Collectives, JoinWithUnevenStepCounts) {
  // Rank r runs 2 * (r + 1) steps; joined ranks contribute zeros.
  const int steps = 2 * (rank_ + 1);
  for (int step = 0; step < 2 * size_; ++step) {
    if (step >= steps) break;
    Buffer b(DataType::kFloat32, 4);
    for (int i = 0; i < 4; ++i) b.Set(i, 1);
    AllreduceOptions opts;
    opts.op = ReduceOp::kSum;
    opts.name = "step." + std::to_string(step);
    ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts)).ok());
    int active = 0;
    for (int r = 0; r < size_; ++r) active += step < 2 * (r + 1) ? 1 : 0;
    ASSERT_EQ(b.Get(0), active) << "step " << step << " rank " << rank_;
  }
  WorkResult joined;
  ASSERT_TRUE(Run(rt_->EnqueueJoin({}), &joined).ok());
  EXPECT_EQ(joined.value, size_ - 1);
  // Everything is back to normal after the join.
  Buffer b(DataType::kFloat32, 1);
  b.Set(0, 1);
  AllreduceOptions opts;
  opts.op = ReduceOp::kSum;
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), opts)).ok());
  EXPECT_EQ(b.Get(0), size_);
}

TEST_F(Collectives, CacheFastPathAndInvalidation) {
  for (int step = 0; step < 30; ++step) {
    int64_t n = step < 20 ? 10 : 12;  // the shape changes at step 20
    std::vector<Buffer> bufs;
    std::vector<Handle> hs;
    for (int k = 0; k < 5; ++k) bufs.emplace_back(DataType::kFloat64, n);
    for (int k = 0; k < 5; ++k) {
      for (int64_t i = 0; i < n; ++i) bufs[k].Set(i, rank_ + step + k);
      AllreduceOptions opts;
      opts.op = ReduceOp::kSum;
      opts.name = "cached." + std::to_string(k);
      auto h = rt_->EnqueueAllreduce(bufs[k].View(), bufs[k].View(), opts);
      ASSERT_TRUE(h.ok());
      hs.push_back(h.value());
    }
    for (Handle h : hs) ASSERT_TRUE(rt_->Wait(h).ok());
    for (int k = 0; k < 5; ++k) {
      double want = size_ * (size_ - 1) / 2.0 + size_ * (step + k);
      ASSERT_EQ(bufs[k].Get(n - 1), want) << "step " << step << " tensor " << k;
    }
  }
}

class SmallCache : public RuntimeTest {
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_CACHE_CAPACITY", "2"}, {"KOLO_FUSION_THRESHOLD", "0"}};
  }
};

TEST_F(SmallCache, EvictionKeepsResultsRight) {
  for (int step = 0; step < 10; ++step) {
    std::vector<Buffer> bufs;
    std::vector<Handle> hs;
    for (int k = 0; k < 5; ++k) bufs.emplace_back(DataType::kInt32, 3);
    for (int k = 0; k < 5; ++k) {
      for (int i = 0; i < 3; ++i) bufs[k].Set(i, rank_ + k);
      AllreduceOptions opts;
      opts.op = ReduceOp::kMax;
      opts.name = "evict." + std::to_string((k + step) % 5);
      auto h = rt_->EnqueueAllreduce(bufs[k].View(), bufs[k].View(), opts);
      ASSERT_TRUE(h.ok());
      hs.push_back(h.value());
    }
    for (Handle h : hs) ASSERT_TRUE(rt_->Wait(h).ok());
    for (int k = 0; k < 5; ++k) ASSERT_EQ(bufs[k].Get(2), size_ - 1 + k) << "step " << step;
  }
}

}  // namespace
}  // namespace kolo::test
