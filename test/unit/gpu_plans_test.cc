// The GPU path's parts that need no device: how the fusion copy kernel
// splits a copy into 16-byte vectors (ops/copy_split.h), whether NCCL lets
// ranks share a GPU (ops/shared_gpu.h), the pool its CUDA events are kept in
// (ops/object_pool.h, here with objects that count themselves), where a
// collective is launched and whether a group goes as one NCCL group
// (ops/gpu_launch.h), and what a waiting caller does next
// (runtime/caller_step.h). They run in every build.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "ops/copy_split.h"
#include "ops/gpu_launch.h"
#include "ops/object_pool.h"
#include "ops/shared_gpu.h"
#include "runtime/caller_step.h"

namespace kolo {
namespace {

// Every element of the copy is covered exactly once, in range, and the
// vectors start on a 16-byte boundary of both source and destination.
void ExpectCoversOnce(uintptr_t src, uintptr_t dst, int64_t count, int elem) {
  const CopySplit s = SplitForVectors(src, dst, count, elem);
  const int64_t lanes = kCopyVectorBytes / elem;
  ASSERT_EQ(s.head + s.vectors * lanes + s.tail, count)
      << "src%16=" << src % 16 << " dst%16=" << dst % 16 << " count=" << count << " elem=" << elem;
  ASSERT_GE(s.head, 0);
  ASSERT_GE(s.tail, 0);
  if (s.vectors > 0) {
    EXPECT_EQ((src + s.head * elem) % kCopyVectorBytes, 0u) << "src misaligned, count " << count;
    EXPECT_EQ((dst + s.head * elem) % kCopyVectorBytes, 0u) << "dst misaligned, count " << count;
    EXPECT_LT(s.head, lanes);
    EXPECT_LT(s.tail, lanes);
  }
  // The kernel's scalar index map: i < head, then the tail after the vectors.
  std::vector<int> seen(count, 0);
  for (int64_t v = 0; v < s.vectors; ++v)
    for (int64_t l = 0; l < lanes; ++l) ++seen[s.head + v * lanes + l];
  for (int64_t i = 0; i < s.head + s.tail; ++i) {
    const int64_t e = i < s.head ? i : s.head + s.vectors * lanes + (i - s.head);
    ASSERT_LT(e, count);
    ++seen[e];
  }
  for (int64_t e = 0; e < count; ++e) ASSERT_EQ(seen[e], 1) << "element " << e << " of " << count;
}

TEST(CopySplit, AlignedBuffersAreAllVectorsButTheTail) {
  const CopySplit s = SplitForVectors(0x1000, 0x2000, 1003, 4);
  EXPECT_EQ(s.head, 0);
  EXPECT_EQ(s.vectors, 250);
  EXPECT_EQ(s.tail, 3);
}

TEST(CopySplit, SameOffsetGetsAScalarHead) {
  const CopySplit s = SplitForVectors(0x1008, 0x2008, 100, 4);  // 8 bytes to the boundary
  EXPECT_EQ(s.head, 2);
  EXPECT_EQ(s.vectors, 24);
  EXPECT_EQ(s.tail, 2);
}

TEST(CopySplit, DifferentOffsetsGoOneByOne) {
  const CopySplit s = SplitForVectors(0x1004, 0x2008, 100, 4);
  EXPECT_EQ(s.head, 100);
  EXPECT_EQ(s.vectors, 0);
  EXPECT_EQ(s.tail, 0);
}

TEST(CopySplit, EveryOffsetSizeAndCountCoversEachElementOnce) {
  for (int elem : {1, 2, 4, 8}) {
    for (uintptr_t so = 0; so < 16; so += elem) {
      for (uintptr_t d : {uintptr_t{0}, so, uintptr_t{(so + elem) % 16}}) {
        for (int64_t count : {0, 1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 100, 1001}) {
          ExpectCoversOnce(0x10000 + so, 0x80000 + d, count, elem);
        }
      }
    }
  }
}

TEST(CopySplit, ScalingInPlaceUsesVectors) {
  const CopySplit s = SplitForVectors(0x1000, 0x1000, 64, 2);  // 128 bytes
  EXPECT_EQ(s.vectors, 8);
  EXPECT_EQ(s.head + s.tail, 0);
}

TEST(SharedGpu, VersionNames) {
  EXPECT_EQ(NcclVersionName(23007), "2.30.7");
  EXPECT_EQ(NcclVersionName(22803), "2.28.3");
  EXPECT_EQ(NcclVersionName(2804), "2.8.4");
}

TEST(SharedGpu, NeedsNccl230AndItsSetting) {
  EXPECT_TRUE(NcclSharesGpu(23007, "1").allowed);
  EXPECT_TRUE(NcclSharesGpu(23000, "0x1").allowed);  // NCCL parses base 0
  EXPECT_TRUE(NcclSharesGpu(30000, "2").allowed);
  for (const char* off : {static_cast<const char*>(nullptr), "", "0", "yes", "1x"}) {
    const SharedGpuVerdict v = NcclSharesGpu(23007, off);
    EXPECT_FALSE(v.allowed) << (off ? off : "(unset)");
    EXPECT_NE(
        v.advice.find("NCCL 2.30.7 needs one GPU per rank unless NCCL_MULTI_RANK_GPU_ENABLE=1"),
        std::string::npos)
        << v.advice;
  }
  const SharedGpuVerdict old = NcclSharesGpu(22803, "1");
  EXPECT_FALSE(old.allowed);
  EXPECT_NE(old.advice.find("NCCL 2.28.3 needs one GPU per rank (from NCCL 2.30 on"),
            std::string::npos)
      << old.advice;
}

// Stands in for a CUDA event: counts how many exist.
struct Counted {
  static inline std::atomic<int> alive{0};
  Counted() { ++alive; }
  ~Counted() { --alive; }
  int id = -1;
};

ObjectPool<Counted>::Make Numbered(std::atomic<int>* next) {
  return [next](Counted* c) {
    c->id = (*next)++;
    return Status::OK();
  };
}

TEST(ObjectPool, ReusesWhatWasGivenBack) {
  std::atomic<int> next{0};
  ObjectPool<Counted> pool(Numbered(&next));
  auto a = pool.Take(), b = pool.Take();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(a.value()->id, b.value()->id);
  EXPECT_EQ(pool.made(), 2u);
  const int first = a.value()->id;
  a = Status::Internal("dropped");  // gives the first one back
  EXPECT_EQ(pool.idle(), 1u);
  auto c = pool.Take();
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value()->id, first) << "an idle object is used again";
  EXPECT_EQ(pool.made(), 2u);
  EXPECT_EQ(pool.idle(), 0u);
}

TEST(ObjectPool, AFailedMakeIsReturned) {
  ObjectPool<Counted> pool([](Counted*) { return Status::Internal("cudaEventCreate: no device"); });
  const int before = Counted::alive;
  auto a = pool.Take();
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("no device"), std::string::npos) << a.status().message();
  EXPECT_EQ(pool.made(), 0u);
  EXPECT_EQ(Counted::alive, before) << "the object that failed to be made is freed";
}

TEST(ObjectPool, EverythingIsFreedWithOrAfterThePool) {
  const int before = Counted::alive;
  std::atomic<int> next{0};
  std::shared_ptr<Counted> outlives;
  {
    ObjectPool<Counted> pool(Numbered(&next));
    auto idle = pool.Take();
    auto kept = pool.Take();
    ASSERT_TRUE(idle.ok() && kept.ok());
    outlives = kept.value();
    idle = Status::Internal("given back");
    EXPECT_EQ(Counted::alive, before + 2);
  }
  EXPECT_EQ(Counted::alive, before + 1) << "the idle one goes with the pool";
  outlives.reset();
  EXPECT_EQ(Counted::alive, before) << "one given back after the pool is gone is deleted";
}

TEST(ObjectPool, ThreadsShareItWithoutMakingMoreThanTheyHold) {
  std::atomic<int> next{0};
  ObjectPool<Counted> pool(Numbered(&next));
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        auto a = pool.Take();
        if (!a.ok() || a.value()->id < 0) ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  EXPECT_LE(pool.made(), static_cast<size_t>(kThreads));
  EXPECT_EQ(pool.idle(), pool.made());
}

// NextCallerStep(done, stopped, device_busy, past_until, device_patience_over, steps)
TEST(CallerStep, RunsTheCycleItCameForThenWatchesTheDevice) {
  // Its operation queued, nothing on a GPU: a round.
  EXPECT_EQ(NextCallerStep(false, false, false, false, false, 0), CallerStep::kRunCycle);
  // The round started it on a GPU: watch the events, no second round.
  EXPECT_EQ(NextCallerStep(false, false, true, false, false, 1), CallerStep::kPollDevice);
  // Another thread's device work in flight before its own was negotiated:
  // watched first (it finishes on its own), then the round.
  EXPECT_EQ(NextCallerStep(false, false, true, false, false, 0), CallerStep::kPollDevice);
  EXPECT_EQ(NextCallerStep(false, false, false, false, false, 5), CallerStep::kRunCycle);
}

TEST(CallerStep, StopsWhenDoneStoppedOrItsSliceOrPatienceIsOver) {
  EXPECT_EQ(NextCallerStep(true, false, true, false, false, 3), CallerStep::kStop);
  EXPECT_EQ(NextCallerStep(false, true, false, false, false, 0), CallerStep::kStop);
  EXPECT_EQ(NextCallerStep(false, false, true, true, false, 1), CallerStep::kStop);
  EXPECT_EQ(NextCallerStep(false, false, false, true, false, 1), CallerStep::kStop);
  // A slice over before the first step still gets the step it came for.
  EXPECT_EQ(NextCallerStep(false, false, false, true, false, 0), CallerStep::kRunCycle);
  EXPECT_EQ(NextCallerStep(false, false, true, true, false, 0), CallerStep::kPollDevice);
  // Device work that outlasts the caller's patience goes to the background
  // thread, whose rounds notice a lost rank; nothing on a device, no patience.
  EXPECT_EQ(NextCallerStep(false, false, true, false, true, 4), CallerStep::kStop);
  EXPECT_EQ(NextCallerStep(false, false, false, false, true, 4), CallerStep::kRunCycle);
}

// Streams stand in as distinct addresses; null is the legacy default stream.
TEST(LaunchStream, OneCallerStreamIsUsedOnlyWithStreamOrderedCompletion) {
  int a = 0, b = 0;
  const LaunchStream on_a = ChooseLaunchStream(true, {&a, &a, &a});
  EXPECT_TRUE(on_a.callers);
  EXPECT_EQ(on_a.stream, &a);
  // The legacy default stream is a stream like another.
  const LaunchStream legacy = ChooseLaunchStream(true, {nullptr, nullptr});
  EXPECT_TRUE(legacy.callers);
  EXPECT_EQ(legacy.stream, nullptr);
  // Two streams, none (a joined rank's zeros), or host-side completion:
  // kolo's stream, after the callers'.
  EXPECT_FALSE(ChooseLaunchStream(true, {&a, &b}).callers);
  EXPECT_FALSE(ChooseLaunchStream(true, {&a, nullptr}).callers);
  EXPECT_FALSE(ChooseLaunchStream(true, {}).callers);
  EXPECT_FALSE(ChooseLaunchStream(false, {&a}).callers);
}

TEST(LaunchStream, ALaunchOnAnotherStreamWaitsForThePreviousOne) {
  int a = 0, b = 0;
  EXPECT_FALSE(WaitsForPreviousLaunch(false, nullptr, &a));  // the device's first
  EXPECT_FALSE(WaitsForPreviousLaunch(true, &a, &a));        // stream order already
  EXPECT_TRUE(WaitsForPreviousLaunch(true, &a, &b));
  EXPECT_TRUE(WaitsForPreviousLaunch(true, nullptr, &a));
  EXPECT_TRUE(WaitsForPreviousLaunch(true, &a, nullptr));
}

// AllreduceAsNcclGroup(counts, elem, min_bytes, in_steps, joined)
TEST(NcclGroup, OnlyTensorsThatAreAllLargeEnoughGoAsAGroup) {
  const int64_t mib = 1 << 20;
  EXPECT_TRUE(AllreduceAsNcclGroup({mib / 4, mib / 4}, 4, mib, false, false));
  EXPECT_TRUE(AllreduceAsNcclGroup({mib, 3 * mib, mib / 2}, 2, mib, false, false));
  // One small tensor: the fusion buffer for all of them.
  EXPECT_FALSE(AllreduceAsNcclGroup({mib, mib / 4 - 1}, 4, mib, false, false));
  // One tensor is no group; 0 turns groups off.
  EXPECT_FALSE(AllreduceAsNcclGroup({mib}, 4, mib, false, false));
  EXPECT_FALSE(AllreduceAsNcclGroup({mib, mib}, 4, 0, false, false));
  // Reductions in steps and a joined rank's zeros need one buffer.
  EXPECT_FALSE(AllreduceAsNcclGroup({mib, mib}, 4, mib, true, false));
  EXPECT_FALSE(AllreduceAsNcclGroup({mib, mib}, 4, mib, false, true));
}

}  // namespace
}  // namespace kolo
