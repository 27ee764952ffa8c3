// The shared-memory allreduce against MPI_Allreduce, its failure when a rank
// never arrives, and the MPI path (pieces, fusion) with shared memory off.
#include <mpi.h>

#include <chrono>
#include <string>
#include <vector>

#include "../../ops/shm_allreduce.h"
#include "ops/data_mover.h"
#include "test_util.h"

namespace kolo::test {
namespace {

int Rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Through the slots only (shm_single_copy_test.cc tests the single copy).
Result<std::unique_ptr<ShmAllreduce>> CreateSlots(int64_t piece_bytes, double timeout_seconds) {
  ShmAllreduce::Options options;
  options.piece_bytes = piece_bytes;
  options.timeout_seconds = timeout_seconds;
  options.single_copy = false;
  return ShmAllreduce::Create(MPI_COMM_WORLD, options);
}

TEST(ShmAllreduce, MatchesMpiAllreduceBitForBitOnEveryDtypeOpAndPieceBoundary) {
  // 256-byte pieces: the counts below cross piece and slice boundaries.
  auto shm = CreateSlots(256, 30);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  ExpectSameBitsAsMpiAllreduce([&](void* p, int64_t n, DataType dtype, ReduceOp op) {
    return shm.value()->Allreduce(p, n, dtype, op);
  });
}

TEST(ShmAllreduce, OutOfPlaceMatchesMpiAllreduceAndLeavesTheInputAlone) {
  auto shm = CreateSlots(256, 30);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  ExpectSameBitsOutOfPlaceLeavingTheInputAlone(
      [&](const void* in, void* out, int64_t n, DataType dtype, ReduceOp op) {
        return shm.value()->Allreduce(in, out, n, dtype, op);
      });
}

TEST(ShmAllreduce, LargePiecesAreExactWhetherCopiedPlainlyOrStreamed) {
  // Pieces big enough to be timed: the first is copied plainly, the second
  // streamed, then whichever measured faster (each rank decides for itself).
  const int64_t piece = CopyChooser::kMinTimedBytes * 2;
  auto shm = CreateSlots(piece, 30);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int64_t n = piece / 4 * 6 + 13;  // six whole pieces and a ragged one
  std::vector<float> x(static_cast<size_t>(n));
  for (int round = 0; round < 3; ++round) {
    for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(Rank() + 1) * (i % 1000);
    ASSERT_TRUE(shm.value()->Allreduce(x.data(), n, DataType::kFloat32, ReduceOp::kSum).ok());
    const float ranks_sum = static_cast<float>(size * (size + 1) / 2);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(x[i], ranks_sum * (i % 1000)) << "element " << i;
  }
}

TEST(ShmAllreduce, ARankThatNeverArrivesFailsTheCallNamingItInsteadOfHanging) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  auto shm = CreateSlots(1024, 0.5);
  ASSERT_TRUE(shm.ok()) << shm.status().ToString();
  std::vector<float> x(100, 1.0f);
  const int absent = size - 1;
  if (Rank() != absent) {
    auto start = std::chrono::steady_clock::now();
    Status s = shm.value()->Allreduce(x.data(), 100, DataType::kFloat32, ReduceOp::kSum);
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("rank " + std::to_string(absent) + " has not copied its piece in"),
              std::string::npos)
        << s.message();
    EXPECT_GE(waited, 0.45) << "failed before its 0.5 s timeout";  // a hang: CTest's timeout
    // The segment is no longer trusted: later calls fail at once.
    Status again = shm.value()->Allreduce(x.data(), 100, DataType::kFloat32, ReduceOp::kSum);
    EXPECT_NE(again.message().find("failed earlier"), std::string::npos) << again.message();
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// The runtime with shared memory off and small pieces: MPI allreduces in
// pieces, fused small tensors and in-place large ones, negotiated over MPI.
class MpiPath : public RuntimeTest {
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_SHM_ALLREDUCE", "0"},
            {"KOLO_SHM_NEGOTIATION", "0"},  // the rounds over MPI too
            {"KOLO_PIECE_SIZE", "4K"},
            {"KOLO_IN_PLACE_THRESHOLD", "16K"}};
  }
};

TEST_F(MpiPath, ManySizesInPiecesFusedAndInPlace) {
  AllreduceSizesAndCheck(*rt_, {1, 100, 1023, 1024, 1025, 4096, 9000, 40000}, "mpi_path.", 13);
}

}  // namespace
}  // namespace kolo::test
