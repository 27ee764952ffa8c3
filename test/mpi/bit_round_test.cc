// The negotiation round's exchange (ops/bit_round.h): the shared-memory round
// gives every rank the same AND as MPI, round after round (the slots'
// double-buffering), also for vectors longer than its slots and on subsets of
// the ranks that span hosts; a rank that gives up stops the others' wait.
#include <mpi.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "../../ops/bit_round.h"
#include "test_util.h"

namespace kolo::test {
namespace {

int Rank(MPI_Comm comm = MPI_COMM_WORLD) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}

// Waits for the round; fails the test after 30 s instead of hanging.
Status WaitBack(BitRound& round) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    bool back = false;
    KOLO_RETURN_IF_ERROR(round.Test(&back));
    if (back) return Status::OK();
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::Internal("the round did not come back within 30 s");
    }
  }
}

// Rounds of random vectors (some longer than the slots), checked against
// MPI_Allreduce(MPI_BAND) of the same vectors.
void ExpectSameAndAsMpi(MPI_Comm comm, const char* expected_kind) {
  BitRoundOptions options;
  options.max_words = 5;
  options.global_rank = Rank();
  std::string why;
  auto round = MakeBitRound(comm, options, &why);
  ASSERT_TRUE(round.ok()) << round.status().ToString();
  EXPECT_STREQ(round.value()->kind(), expected_kind) << why;
  std::mt19937_64 random(1234 + static_cast<uint64_t>(Rank(comm)));
  for (int r = 0; r < 200; ++r) {
    const size_t words = r % 7 == 6 ? 9 : 1 + r % 5;  // every 7th over the slots (MPI)
    std::vector<uint64_t> bits(words);
    // Mostly ones, so that the AND keeps bits set.
    for (uint64_t& w : bits) w = random() | random() | random();
    std::vector<uint64_t> expected = bits;
    MPI_Allreduce(MPI_IN_PLACE, expected.data(), static_cast<int>(words), MPI_UINT64_T, MPI_BAND,
                  comm);
    ASSERT_TRUE(round.value()->Start(&bits).ok());
    Status s = WaitBack(*round.value());
    ASSERT_TRUE(s.ok()) << "round " << r << ": " << s.ToString();
    ASSERT_EQ(bits, expected) << "round " << r;
  }
}

TEST(BitRound, SharedMemoryGivesTheSameAndAsMpiRoundAfterRound) {
  ExpectSameAndAsMpi(MPI_COMM_WORLD, "shared memory");
}

TEST(BitRound, OnASubsetOfTheRanks) {
  // Ranks 0, 1 and the last: on two loopback hosts (2 + 2) a set that holds
  // two ranks of one host and one of the other.
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int me = Rank();
  const bool member = me <= 1 || me == size - 1;
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, me, &sub);
  if (member) {
    ExpectSameAndAsMpi(sub, "shared memory");
    MPI_Comm_free(&sub);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(BitRound, OffItIsMpi) {
  BitRoundOptions options;
  options.shared_memory = false;
  std::string why;
  auto round = MakeBitRound(MPI_COMM_WORLD, options, &why);
  ASSERT_TRUE(round.ok()) << round.status().ToString();
  EXPECT_STREQ(round.value()->kind(), "MPI_Iallreduce");
  EXPECT_NE(why.find("KOLO_SHM_NEGOTIATION=0"), std::string::npos) << why;
}

// A set of one rank (here each rank's MPI_COMM_SELF): the round is back as it
// starts and leaves the vector as it was, the AND of one vector.
TEST(BitRound, OneRankNeedsNoExchange) {
  for (bool shared_memory : {true, false}) {
    BitRoundOptions options;
    options.shared_memory = shared_memory;
    std::string why;
    auto round = MakeBitRound(MPI_COMM_SELF, options, &why);
    ASSERT_TRUE(round.ok()) << round.status().ToString();
    EXPECT_STREQ(round.value()->kind(), "one rank") << why;
    for (int i = 0; i < 3; ++i) {
      std::vector<uint64_t> bits = {~uint64_t{0} - static_cast<uint64_t>(i), uint64_t{42} << i};
      const std::vector<uint64_t> mine = bits;
      ASSERT_TRUE(round.value()->Start(&bits).ok());
      bool back = false;
      ASSERT_TRUE(round.value()->Test(&back).ok());
      EXPECT_TRUE(back) << "round " << i;
      EXPECT_EQ(bits, mine) << "round " << i;
    }
  }
}

// Within a host. Across hosts only Open MPI 5's fault tolerance (a revoke)
// tells the other hosts' leaders; without it they wait, as for an MPI round,
// until the stall check gives up.
TEST(BitRound, ARankThatGivesUpStopsTheWaitOfItsHost) {
  MPI_Comm host;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, Rank(), MPI_INFO_NULL, &host);
  int size = 1;
  MPI_Comm_size(host, &size);
  if (size > 1) {
    BitRoundOptions options;
    options.global_rank = Rank();
    std::string why;
    auto made = MakeBitRound(host, options, &why);
    ASSERT_TRUE(made.ok()) << made.status().ToString();
    BitRound& round = *made.value();
    // The host's last rank aborts instead of starting the round: the others
    // were waiting for it, and stop with a message that names it.
    int quitter = Rank();
    MPI_Bcast(&quitter, 1, MPI_INT, size - 1, host);
    std::vector<uint64_t> bits(1, ~uint64_t{0});
    if (Rank(host) == size - 1) {
      round.Abort();
    } else {
      ASSERT_TRUE(round.Start(&bits).ok());
      Status s = WaitBack(round);
      EXPECT_FALSE(s.ok());
      EXPECT_NE(s.message().find("rank " + std::to_string(quitter) + " gave up"), std::string::npos)
          << s.ToString();
    }
  }
  MPI_Comm_free(&host);
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace kolo::test
