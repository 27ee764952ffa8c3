// Adasum through the runtime on host memory (np=2, 3, 4): orthogonal tensors
// add up, parallel ones average, fused tensors each get their own
// coefficients, scale factors apply as Horovod applies them; Horovod's
// refusals reach every rank before anything is exchanged. The comparison
// with the NumPy reference of the whole algorithm is in the Python tests
// (test/python/test_torch_adasum.py).
#include "../../ops/adasum.h"
#include "test_util.h"

namespace kolo::test {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

class Adasum : public RuntimeTest {
 protected:
  // The refusal every rank gets where the job's size is not a power of two.
  bool Refused(const Status& s) {
    if (adasum::IsPowerOfTwo(size_)) return false;
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.ToString();
    EXPECT_EQ(s.message(), "Running Adasum with non-power of 2 ranks is not supported yet.");
    return true;
  }
};

// Rank r's tensor is (r + 1) in its own elements r, r + size, ... and zero
// elsewhere: orthogonal to every other rank's, so Adasum is the plain sum.
void SetOrthogonal(Buffer& b, int rank, int size) {
  for (int64_t i = 0; i < b.size(); ++i) b.Set(i, i % size == rank ? rank + 1 : 0);
}
// Rank r's tensor is (r + 1) * v: parallel to every other's, so Adasum is
// their average, (size + 1) / 2 * v.
void SetParallel(Buffer& b, int rank) {
  for (int64_t i = 0; i < b.size(); ++i) b.Set(i, (rank + 1) * (i % 7 - 3));
}

TEST_F(Adasum, OrthogonalTensorsAddUpAndParallelOnesAverageFusedOrNot) {
  for (DataType dtype : {DataType::kFloat16, DataType::kFloat32, DataType::kFloat64}) {
    const double tolerance = dtype == DataType::kFloat16 ? 1e-2 : 1e-5;
    for (bool fused : {false, true}) {
      // Odd lengths, and one shorter than the number of ranks.
      Buffer ortho(dtype, 3 * size_ + 1), parallel(dtype, 19), tiny(dtype, 1);
      SetOrthogonal(ortho, rank_, size_);
      SetParallel(parallel, rank_);
      tiny.Set(0, rank_ + 1);  // parallel too
      AllreduceOptions o;
      o.op = ReduceOp::kAdasum;
      o.name = std::string("adasum.") + DataTypeName(dtype) + (fused ? ".fused" : ".single");
      std::vector<Status> done;
      if (fused) {
        done.push_back(
            Run(rt_->EnqueueGroupedAllreduce({ortho.View(), parallel.View(), tiny.View()},
                                             {ortho.View(), parallel.View(), tiny.View()}, o)));
      } else {
        const std::string base = o.name;
        for (Buffer* b : {&ortho, &parallel, &tiny}) {
          o.name = base + "." + std::to_string(done.size());
          done.push_back(Run(rt_->EnqueueAllreduce(b->View(), b->View(), o)));
        }
      }
      for (const Status& s : done) {
        if (Refused(s)) return;
        ASSERT_TRUE(s.ok()) << s.ToString();
      }
      for (int64_t i = 0; i < ortho.size(); ++i) {
        ASSERT_EQ(ortho.Get(i), i % size_ + 1)
            << DataTypeName(dtype) << " rank " << rank_ << " elem " << i;
      }
      const double mean = (size_ + 1) / 2.0;
      for (int64_t i = 0; i < parallel.size(); ++i) {
        ASSERT_NEAR(parallel.Get(i), mean * (i % 7 - 3), tolerance * 4)
            << DataTypeName(dtype) << " rank " << rank_ << " elem " << i;
      }
      ASSERT_NEAR(tiny.Get(0), mean, tolerance * 4) << DataTypeName(dtype) << " rank " << rank_;
    }
  }
}

TEST_F(Adasum, PrescaleBeforeAndPostscaleAfterAsHorovod) {
  Buffer b(DataType::kFloat32, 2 * size_ + 3), input(DataType::kFloat32, 2 * size_ + 3);
  SetOrthogonal(input, rank_, size_);
  AllreduceOptions o;
  o.op = ReduceOp::kAdasum;
  o.name = "adasum.scaled";
  o.prescale_factor = 3.0;
  o.postscale_factor = 0.5;
  // Out of place: the input stays as it was.
  Status s = Run(rt_->EnqueueAllreduce(input.View(), b.View(), o));
  if (Refused(s)) return;
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (int64_t i = 0; i < b.size(); ++i) {
    ASSERT_EQ(b.Get(i), 1.5 * (i % size_ + 1)) << "rank " << rank_ << " elem " << i;
    ASSERT_EQ(input.Get(i), i % size_ == rank_ ? rank_ + 1 : 0) << "input changed, elem " << i;
  }
}

TEST_F(Adasum, EveryRankGetsTheSameBits) {
  Buffer b(DataType::kFloat32, 1001);
  std::mt19937 gen(rank_ + 1);
  std::normal_distribution<float> normal;
  for (int64_t i = 0; i < b.size(); ++i) b.Set(i, normal(gen));
  AllreduceOptions o;
  o.op = ReduceOp::kAdasum;
  o.name = "adasum.bits";
  Status s = Run(rt_->EnqueueAllreduce(b.View(), b.View(), o));
  if (Refused(s)) return;
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<float> mine(static_cast<float*>(b.data()), static_cast<float*>(b.data()) + b.size());
  std::vector<float> first = mine;
  MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  EXPECT_EQ(std::memcmp(mine.data(), first.data(), mine.size() * sizeof(float)), 0)
      << "rank " << rank_ << " differs from rank 0";
}

TEST_F(Adasum, IntegerTensorsAreRefusedOnEveryRank) {
  Buffer b(DataType::kInt32, 4);
  AllreduceOptions o;
  o.op = ReduceOp::kAdasum;
  o.name = "adasum.int";
  Status s = Run(rt_->EnqueueAllreduce(b.View(), b.View(), o));
  if (Refused(s)) return;
  EXPECT_EQ(s.code(), StatusCode::kPreconditionFailed) << s.ToString();
  EXPECT_TRUE(Contains(s.message(), "Adasum reduces float16, float32 and float64 tensors"))
      << s.message();
  EXPECT_TRUE(Contains(s.message(), "not int32")) << s.message();
  // Nothing is left pending: the name is free again.
  o.op = ReduceOp::kSum;
  EXPECT_TRUE(Run(rt_->EnqueueAllreduce(b.View(), b.View(), o)).ok());
}

TEST_F(Adasum, OtherProcessSetsAreRefusedOnEveryMember) {
  const std::vector<int> pair = {0, 1};
  auto add = rt_->EnqueueAddProcessSet(pair);
  ASSERT_TRUE(add.ok());
  WorkResult added;
  ASSERT_TRUE(rt_->Wait(add.value(), &added).ok());
  if (rank_ < 2) {
    Buffer b(DataType::kFloat32, 4);
    AllreduceOptions o;
    o.op = ReduceOp::kAdasum;
    o.name = "adasum.set";
    o.process_set = added.value;
    Status s = Run(rt_->EnqueueAllreduce(b.View(), b.View(), o));
    EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << s.ToString();
    EXPECT_EQ(s.message(), "Adasum does not support non-global process sets yet.");
  }
  ASSERT_TRUE(rt_->Wait(rt_->EnqueueRemoveProcessSet(added.value).value()).ok());
}

}  // namespace
}  // namespace kolo::test
