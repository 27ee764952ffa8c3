// A caller that waits for a host operation runs its cycle itself while the
// background thread is idle (KOLO_CALLER_RUNS): results, a caller that finds
// nothing running runs its round, the hand-back to the background thread of a
// round that waits on a late rank, callers and other threads' operations side
// by side, and the setting turned off. Only what the core promises is checked:
// which thread ran a round is asserted where the schedule forces it. And a start
// that nobody waits for yet: it waits a cycle time for others to fuse with,
// and a caller that waits starts the round at once.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace kolo::test {
namespace {

class CallerRuns : public RuntimeTest {
 protected:
  // A blocking allreduce of `n` floats, every rank's value rank + i + 1; checks the sum.
  void BlockingAllreduce(const std::string& name, int n, int i, bool caller_waits = true) {
    std::vector<float> x(static_cast<size_t>(n), static_cast<float>(rank_ + i + 1));
    TensorView v{x.data(), DataType::kFloat32, {n}};
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.name = name;
    o.caller_waits = caller_waits;
    Status s = Run(rt_->EnqueueAllreduce(v, v, o));
    ASSERT_TRUE(s.ok()) << name << ": " << s.ToString();
    // sum over ranks r of (r + i + 1)
    const float want = static_cast<float>(size_ * (size_ - 1) / 2 + size_ * (i + 1));
    for (float got : x) ASSERT_EQ(got, want) << name;
  }
};

// Rounds only when something makes one due: the background thread sleeps until then.
class QuietBackground : public CallerRuns {
 protected:
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_CYCLE_TIME", "60000"}, {"KOLO_IDLE_TICK_MS", "60000"}};
  }
};

TEST_F(CallerRuns, BlockingAllreducesGiveTheRightResultsWhicheverThreadRunsTheirRounds) {
  // Which thread runs a round is a matter of timing (a round that waits on a late rank goes
  // to the background thread, and a caller that finds it running waits for it): not
  // promised, not checked here; the results are.
  for (int i = 0; i < 200; ++i) {
    BlockingAllreduce("blocking." + std::to_string(i % 7), i % 3 == 0 ? 1 : 1000, i);
  }
}

TEST_F(QuietBackground, ABlockingCallRunsItsRoundOnTheCallingThread) {
  // Nothing has made a cycle due since init and a caller that waits wakes no thread, so
  // the background thread cannot hold the round: the caller must run it itself.
  const CycleStats before = rt_->cycle_stats();
  BlockingAllreduce("first", 4, 0);
  const CycleStats after = rt_->cycle_stats();
  EXPECT_GE(after.by_callers, before.by_callers + 1);
  for (int i = 1; i < 20; ++i) BlockingAllreduce("more", 4, i);
}

TEST_F(QuietBackground, ARoundThatWaitsOnALateRankIsFinishedByTheBackgroundThread) {
  // Rank 0 waits in its own cycle for the others, which start their allreduce
  // only once rank 0's caller has left the round to its background thread. (With
  // the background thread asleep, rank 0's caller is sure to run that cycle.)
  MPI_Comm side;
  MPI_Comm_dup(MPI_COMM_WORLD, &side);
  const CycleStats before = rt_->cycle_stats();
  if (rank_ == 0) {
    std::thread release([&] {
      while (rt_->cycle_stats().left_unfinished == before.left_unfinished) {
        std::this_thread::yield();
      }
      int go = 1;
      for (int r = 1; r < size_; ++r) MPI_Send(&go, 1, MPI_INT, r, 0, side);
    });
    BlockingAllreduce("late", 16, 0);
    release.join();
    const CycleStats after = rt_->cycle_stats();
    EXPECT_GT(after.left_unfinished, before.left_unfinished);
    EXPECT_GT(after.by_background, before.by_background);
  } else {
    int go = 0;
    MPI_Recv(&go, 1, MPI_INT, 0, 0, side, MPI_STATUS_IGNORE);
    BlockingAllreduce("late", 16, 0);
  }
  MPI_Comm_free(&side);
}

TEST_F(CallerRuns, CallersAndOtherThreadsOperationsGoTogether) {
  // One thread makes blocking calls (its caller runs cycles), another starts
  // operations that wake the background thread; both see every result.
  std::thread other([&] {
    for (int i = 0; i < 100; ++i) BlockingAllreduce("async." + std::to_string(i), 64, i, false);
  });
  for (int i = 0; i < 100; ++i) BlockingAllreduce("sync." + std::to_string(i), 64, i);
  other.join();
}

TEST_F(CallerRuns, ShutdownWhileCallersWaitEndsEveryOperation) {
  // Every rank's operations complete; then shutdown (TearDown) must find the
  // cycles ended cleanly even though the last ones ran on callers.
  for (int i = 0; i < 20; ++i) BlockingAllreduce("before.shutdown", 4, i);
  ASSERT_TRUE(rt_->Shutdown().ok());
  Buffer b(DataType::kFloat32, 4);
  AllreduceOptions o;
  o.caller_waits = true;
  Status s = Run(rt_->EnqueueAllreduce(b.View(), b.View(), o));
  EXPECT_FALSE(s.ok());
  rt_.reset();
}

class CallerRunsOff : public CallerRuns {
 protected:
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_CALLER_RUNS", "0"}};
  }
};

TEST_F(CallerRunsOff, EveryCycleRunsOnTheBackgroundThread) {
  const CycleStats before = rt_->cycle_stats();
  for (int i = 0; i < 50; ++i) BlockingAllreduce("off", 100, i);
  const CycleStats after = rt_->cycle_stats();
  EXPECT_EQ(after.by_callers, 0);
  EXPECT_GT(after.by_background, before.by_background);
}

}  // namespace
// A cycle time far longer than the test: only a waiting caller can start a round.
class LongCycle : public CallerRuns, public ::testing::WithParamInterface<bool> {
 protected:
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_CYCLE_TIME", "60000"}, {"KOLO_CALLER_RUNS", GetParam() ? "1" : "0"}};
  }
};

TEST_P(LongCycle, StartsWaitForOthersToFuseWithAndAWaitingCallerRunsThemAtOnce) {
  const auto began = std::chrono::steady_clock::now();
  std::vector<std::vector<float>> xs(3, std::vector<float>(8, static_cast<float>(rank_ + 1)));
  std::vector<Handle> handles;
  for (size_t i = 0; i < xs.size(); ++i) {
    TensorView v{xs[i].data(), DataType::kFloat32, {8}};
    AllreduceOptions o;
    o.op = ReduceOp::kSum;
    o.name = "batched." + std::to_string(i);
    auto h = rt_->EnqueueAllreduce(v, v, o);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    // Returned before its collective ran: nothing runs it within the cycle time.
    EXPECT_FALSE(rt_->Poll(h.value())) << o.name;
    handles.push_back(h.value());
  }
  for (Handle h : handles) ASSERT_TRUE(rt_->Wait(h, nullptr).ok());
  const float want = static_cast<float>(size_ * (size_ + 1) / 2);
  for (const auto& x : xs) EXPECT_EQ(x[0], want);
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(30))
      << "the waiting caller waited for the cycle time";
}

INSTANTIATE_TEST_SUITE_P(CallerRunsOnAndOff, LongCycle, ::testing::Bool());

}  // namespace kolo::test
