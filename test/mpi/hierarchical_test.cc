// The hierarchical allreduce (reduce-scatter within each host, allreduce
// across hosts, allgather within the host) against MPI_Allreduce. Needs ranks
// on at least two hosts: CTest runs it at np=4 over two loopback "hosts"
// (test/launcher/fake_ssh.sh); on one host it skips.
#include <mpi.h>

#include <string>
#include <vector>

#include "../../ops/shm_allreduce.h"
#include "ops/data_mover.h"
#include "test_util.h"

namespace kolo::test {
namespace {

TEST(Hierarchical, MatchesMpiAllreduceBitForBitOnEveryDtypeOpAndPieceBoundary) {
  std::string why_not;
  auto hierarchy = Hierarchy::Create(MPI_COMM_WORLD, &why_not);
  ASSERT_TRUE(hierarchy.ok()) << hierarchy.status().ToString();
  if (!hierarchy.value()) GTEST_SKIP() << "needs ranks on two hosts: " << why_not;
  int local_size = 0, cross_size = 0;
  MPI_Comm_size(hierarchy.value()->local.get(), &local_size);
  MPI_Comm_size(hierarchy.value()->cross.get(), &cross_size);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(local_size * cross_size, size);
  EXPECT_GT(cross_size, 1);
  auto ops = MpiOps::Create();
  ASSERT_TRUE(ops.ok());
  // 256-byte pieces: the counts cross piece and block boundaries, and some are
  // smaller than the number of ranks on a host.
  auto mover =
      MakeHierarchicalMover(MPI_COMM_WORLD, ops.value().get(), 256, std::move(hierarchy).value());
  ExpectSameBitsAsMpiAllreduce([&](void* p, int64_t n, DataType dtype, ReduceOp op) {
    return mover->Allreduce(p, n, dtype, op);
  });
}

// Through the runtime: KOLO_HIERARCHICAL_ALLREDUCE=1, fused and in-place
// tensors, and a process set that spans both hosts unevenly (flat fallback).
class HierarchicalRuntime : public RuntimeTest {
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_HIERARCHICAL_ALLREDUCE", "1"},
            {"KOLO_PIECE_SIZE", "4096"},
            {"KOLO_IN_PLACE_THRESHOLD", "16384"}};
  }
};

TEST_F(HierarchicalRuntime, FusedPiecedAndInPlaceTensorsAverageCorrectly) {
  AllreduceSizesAndCheck(*rt_, {1, 5, 1000, 3000, 70000, 3}, "hier.", 13);
  // A set of three ranks: two on one host, one on the other (flat fallback).
  if (size_ < 3) return;
  WorkResult added;
  auto add = rt_->EnqueueAddProcessSet({0, 1, size_ - 1});
  ASSERT_TRUE(add.ok());
  ASSERT_TRUE(rt_->Wait(add.value(), &added).ok());
  if (rank_ == 0 || rank_ == 1 || rank_ == size_ - 1) {
    Buffer b(DataType::kInt32, 10);
    for (int i = 0; i < 10; ++i) b.Set(i, rank_ + i);
    AllreduceOptions opts;
    opts.op = ReduceOp::kSum;
    opts.process_set = added.value;
    auto h = rt_->EnqueueAllreduce(b.View(), b.View(), opts);
    ASSERT_TRUE(h.ok());
    Status s = rt_->Wait(h.value());
    ASSERT_TRUE(s.ok()) << s.ToString();
    for (int i = 0; i < 10; ++i) EXPECT_EQ(b.Get(i), 0 + 1 + (size_ - 1) + 3 * i);
  }
  ASSERT_TRUE(Run(rt_->EnqueueBarrier({})).ok());  // non-members must not shut down early
}

}  // namespace
}  // namespace kolo::test
