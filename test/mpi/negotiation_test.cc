// The slow path's reference protocol (RequestMessage): ranks answer rank 0's
// pending requests with a flag or bits and send only what differs in full.
// These tests drive ranks out of step with rank 0 so that every kind of
// answer occurs (holds all, holds some, holds none, holds more), with the
// response cache off so that every step is negotiated.
#include <chrono>
#include <string>
#include <thread>

#include "test_util.h"

namespace kolo::test {
namespace {

class Negotiation : public RuntimeTest {
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_CACHE_CAPACITY", "0"}, {"KOLO_CYCLE_TIME", "1"}};
  }
};

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_F(Negotiation, RanksOutOfStepWithRankZeroGetExactResults) {
  constexpr int kTensors = 8;
  for (int step = 0; step < 6; ++step) {
    std::vector<Buffer> bufs;
    for (int k = 0; k < kTensors; ++k) bufs.emplace_back(DataType::kFloat64, 3 + k);
    std::vector<Handle> hs;
    // Each rank submits in its own rotated order, a few cycles apart, so that
    // rank 0's pending set is a different subset from every other rank's.
    for (int i = 0; i < kTensors; ++i) {
      const int k = (i + rank_ * 3 + step) % kTensors;
      for (int64_t j = 0; j < bufs[k].size(); ++j) bufs[k].Set(j, rank_ + k + step);
      AllreduceOptions opts;
      opts.op = ReduceOp::kSum;
      opts.name = "out_of_step." + std::to_string(k);
      auto h = rt_->EnqueueAllreduce(bufs[k].View(), bufs[k].View(), opts);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      hs.push_back(h.value());
      if ((i + rank_) % 3 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (Handle h : hs) ASSERT_TRUE(rt_->Wait(h).ok());
    for (int k = 0; k < kTensors; ++k) {
      const double want = size_ * (size_ - 1) / 2.0 + size_ * (k + step);
      for (int64_t j = 0; j < bufs[k].size(); ++j) {
        ASSERT_EQ(bufs[k].Get(j), want) << "step " << step << " tensor " << k;
      }
    }
  }
}

TEST_F(Negotiation, AMismatchAgainstRankZerosVersionNamesEveryDifferingRank) {
  // Rank 1 asks first with shape {3}; rank 0 and the others ask later with
  // shape {2}, so they answer rank 0's reference. "order" puts rank 1 first by
  // construction: rank 1 enqueues it after its own request, which therefore
  // reaches the coordinator in the same round as rank 1's "order" or before;
  // the others enqueue theirs only once "order" is done everywhere.
  Buffer b(DataType::kFloat32, 3), o(DataType::kFloat32, 1);
  AllreduceOptions opts, order;
  opts.name = "differs.from.rank1";
  order.name = "rank1.asked.first";
  Result<Handle> differs = Status::Internal("not yet");
  if (rank_ == 1) differs = rt_->EnqueueAllreduce(b.View({3}), b.View({3}), opts);
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(o.View(), o.View(), order)).ok());
  if (rank_ != 1) differs = rt_->EnqueueAllreduce(b.View({2}), b.View({2}), opts);
  Status s = Run(std::move(differs));
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(Contains(s.message(), "Mismatched allreduce tensor shapes")) << s.message();
  EXPECT_TRUE(Contains(s.message(), "rank 1 sent a tensor of shape [3]")) << s.message();
  if (size_ >= 3) {
    std::string others = "Ranks that differ from rank 1: 0";
    for (int r = 2; r < size_; ++r) others += ", " + std::to_string(r);
    EXPECT_TRUE(Contains(s.message(), others)) << s.message();
  }
  // Negotiation goes on normally afterwards.
  Buffer c(DataType::kFloat32, 2);
  c.Set(0, 1);
  c.Set(1, 1);
  AllreduceOptions sum;
  sum.op = ReduceOp::kSum;
  sum.name = "after.mismatch";
  ASSERT_TRUE(Run(rt_->EnqueueAllreduce(c.View(), c.View(), sum)).ok());
  EXPECT_EQ(c.Get(1), size_);
}

TEST_F(Negotiation, BarriersAndAllgathersOfEveryRankGoThroughTheReference) {
  for (int step = 0; step < 4; ++step) {
    ASSERT_TRUE(Run(rt_->EnqueueBarrier({})).ok());
    // Allgather with rank-dependent rows: every rank's first dimension counts.
    Buffer in(DataType::kInt32, 2 * (rank_ + 1));
    for (int64_t j = 0; j < in.size(); ++j) in.Set(j, rank_);
    CollectiveOptions o;
    o.name = "gather.rows";
    Result<Handle> h = rt_->EnqueueAllgather(in.View({rank_ + 1, 2}), o);
    WorkResult out;
    ASSERT_TRUE(Run(std::move(h), &out).ok());
    ASSERT_EQ(out.shape[0], size_ * (size_ + 1) / 2);
    const int32_t* rows = reinterpret_cast<const int32_t*>(out.data.data());
    int64_t at = 0;
    for (int r = 0; r < size_; ++r) {
      for (int64_t j = 0; j < 2 * (r + 1); ++j) ASSERT_EQ(rows[at++], r) << "step " << step;
    }
  }
}

}  // namespace
}  // namespace kolo::test
