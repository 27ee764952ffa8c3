// Grouped collectives and the response cache: a group negotiated once rides
// the fast path as a whole from then on, and falls back to the coordinator as
// a whole (errors included) when any member changes or leaves the cache.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "test_util.h"

namespace kolo::test {
namespace {

// One step's tensors: `sizes[k]` float64 elements each, element i of tensor k
// holding rank + 10 * step + k + i on every rank.
std::vector<Buffer> StepBuffers(const std::vector<int64_t>& sizes, int rank, int step) {
  std::vector<Buffer> bufs;
  for (size_t k = 0; k < sizes.size(); ++k) {
    bufs.emplace_back(DataType::kFloat64, sizes[k]);
    for (int64_t i = 0; i < sizes[k]; ++i) {
      bufs[k].Set(i, rank + 10.0 * step + static_cast<double>(k) + static_cast<double>(i));
    }
  }
  return bufs;
}

// The sum over ranks of StepBuffers' element i of tensor k.
double StepSum(int size, int step, size_t k, int64_t i) {
  return size * (size - 1) / 2.0 +
         size * (10.0 * step + static_cast<double>(k) + static_cast<double>(i));
}

std::vector<TensorView> Views(std::vector<Buffer>& bufs) {
  std::vector<TensorView> views;
  for (Buffer& b : bufs) views.push_back(b.View());
  return views;
}

AllreduceOptions Sum(const std::string& name) {
  AllreduceOptions opts;
  opts.op = ReduceOp::kSum;
  opts.name = name;
  return opts;
}

// Runs with a timeline that marks every round that asked the coordinator
// (SLOW_PATH), so that a test can tell the fast path from the slow one.
class GroupCache : public RuntimeTest {
 protected:
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_TIMELINE", TimelinePath()}, {"KOLO_TIMELINE_MARK_CYCLES", "1"}};
  }

  // One file per world size: the np=2 and np=4 runs may overlap.
  static std::string TimelinePath() {
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    return ::testing::TempDir() + "/kolo_group_cache_np" + std::to_string(world) + ".json";
  }

  // Rank 0's timeline, one event a line. Call after Shutdown().
  static std::vector<std::string> TimelineEvents() {
    std::ifstream f(TimelinePath());
    std::vector<std::string> events;
    for (std::string line; std::getline(f, line);) events.push_back(line);
    return events;
  }

  // The rounds that asked the coordinator after every tensor in `names` had
  // been reduced once; -1 if one of them never was.
  static int SlowRoundsAfterFirstReductions(const std::vector<std::string>& events,
                                            const std::vector<std::string>& names) {
    size_t last_first = 0;
    for (const std::string& name : names) {
      std::string tid;
      for (const std::string& e : events) {
        if (e.find("\"thread_name\"") == std::string::npos ||
            e.find("\"name\":\"allreduce." + name + "\"") == std::string::npos) {
          continue;
        }
        size_t at = e.find("\"tid\":") + 6;
        tid = e.substr(at, e.find(',', at) - at);
      }
      if (tid.empty()) return -1;
      auto first = std::find_if(events.begin(), events.end(), [&](const std::string& e) {
        return e.find("\"name\":\"ALLREDUCE\"") != std::string::npos &&
               e.find("\"tid\":" + tid + ",") != std::string::npos;
      });
      if (first == events.end()) return -1;
      last_first = std::max(last_first, static_cast<size_t>(first - events.begin()));
    }
    return static_cast<int>(std::count_if(
        events.begin() + static_cast<std::ptrdiff_t>(last_first), events.end(),
        [](const std::string& e) { return e.find("\"SLOW_PATH\"") != std::string::npos; }));
  }

  static int SlowRounds(const std::vector<std::string>& events) {
    return static_cast<int>(std::count_if(events.begin(), events.end(), [](const std::string& e) {
      return e.find("\"SLOW_PATH\"") != std::string::npos;
    }));
  }

  static std::vector<std::string> MemberNames(const std::string& group, size_t n) {
    std::vector<std::string> names;
    for (size_t k = 0; k < n; ++k) names.push_back(group + "." + std::to_string(k));
    return names;
  }
};

TEST_F(GroupCache, RepeatedGroupRidesTheFastPathAfterTheFirstStep) {
  const std::vector<int64_t> sizes = {1, 7, 64, 3, 300, 5};
  for (int step = 0; step < 12; ++step) {
    std::vector<Buffer> bufs = StepBuffers(sizes, rank_, step);
    std::vector<TensorView> views = Views(bufs);
    ASSERT_TRUE(Run(rt_->EnqueueGroupedAllreduce(views, views, Sum("grp"))).ok())
        << "step " << step;
    for (size_t k = 0; k < sizes.size(); ++k) {
      for (int64_t i = 0; i < sizes[k]; ++i) {
        ASSERT_EQ(bufs[k].Get(i), StepSum(size_, step, k, i))
            << "rank " << rank_ << " step " << step << " tensor " << k << " elem " << i;
      }
    }
  }
  ASSERT_TRUE(rt_->Shutdown().ok());
  if (rank_ != 0) return;
  std::vector<std::string> events = TimelineEvents();
  EXPECT_GT(SlowRounds(events), 0) << "the first step asks the coordinator";
  EXPECT_EQ(SlowRoundsAfterFirstReductions(events, MemberNames("grp", sizes.size())), 0)
      << "steps after the first must be served by the cache";
}

TEST_F(GroupCache, UngroupedAndGroupedCachedInTheSameStep) {
  const std::vector<int64_t> group_sizes = {4, 9, 2, 33};
  std::vector<std::string> step0_names = MemberNames("mixed.g", group_sizes.size());
  for (int u = 0; u < 3; ++u) step0_names.push_back("mixed.u." + std::to_string(u));
  for (int step = 0; step < 10; ++step) {
    // Two ungrouped tensors before the group, one after, all in flight at once.
    std::vector<Buffer> single = StepBuffers({5, 17, 2}, rank_, step);
    std::vector<Buffer> group = StepBuffers(group_sizes, rank_, step);
    std::vector<TensorView> views = Views(group);
    std::vector<Handle> handles;
    auto enqueue_single = [&](int u) {
      auto h = rt_->EnqueueAllreduce(single[u].View(), single[u].View(),
                                     Sum("mixed.u." + std::to_string(u)));
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      handles.push_back(h.value());
    };
    enqueue_single(0);
    enqueue_single(1);
    auto h = rt_->EnqueueGroupedAllreduce(views, views, Sum("mixed.g"));
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    handles.push_back(h.value());
    enqueue_single(2);
    for (Handle handle : handles) ASSERT_TRUE(rt_->Wait(handle).ok()) << "step " << step;
    for (size_t k = 0; k < group_sizes.size(); ++k) {
      ASSERT_EQ(group[k].Get(group_sizes[k] - 1), StepSum(size_, step, k, group_sizes[k] - 1))
          << "rank " << rank_ << " step " << step << " member " << k;
    }
    for (size_t u = 0; u < single.size(); ++u) {
      ASSERT_EQ(single[u].Get(single[u].size() - 1), StepSum(size_, step, u, single[u].size() - 1))
          << "rank " << rank_ << " step " << step << " ungrouped " << u;
    }
  }
  ASSERT_TRUE(rt_->Shutdown().ok());
  if (rank_ != 0) return;
  EXPECT_EQ(SlowRoundsAfterFirstReductions(TimelineEvents(), step0_names), 0)
      << "steps after the first must be served by the cache";
}

TEST_F(GroupCache, MemberReshapedOnOneRankFailsTheWholeGroupEverywhere) {
  // Cached after step 0; at step 3 the last rank's member 1 grows by one
  // element. Its stale entry sends the group to the coordinator on every rank,
  // which fails all members everywhere; the next steps run again.
  for (int step = 0; step < 7; ++step) {
    const bool reshaped = step == 3 && rank_ == size_ - 1;
    const std::vector<int64_t> sizes = {6, reshaped ? 9 : 8, 10};
    std::vector<Buffer> bufs = StepBuffers(sizes, rank_, step);
    std::vector<TensorView> views = Views(bufs);
    Status s = Run(rt_->EnqueueGroupedAllreduce(views, views, Sum("reshaped")));
    if (step == 3) {
      ASSERT_FALSE(s.ok()) << "rank " << rank_;
      EXPECT_NE(s.message().find("Group 'reshaped' failed"), std::string::npos) << s.message();
      EXPECT_NE(s.message().find("'reshaped.1'"), std::string::npos) << s.message();
      continue;
    }
    ASSERT_TRUE(s.ok()) << "rank " << rank_ << " step " << step << ": " << s.ToString();
    for (size_t k = 0; k < sizes.size(); ++k) {
      ASSERT_EQ(bufs[k].Get(sizes[k] - 1), StepSum(size_, step, k, sizes[k] - 1))
          << "rank " << rank_ << " step " << step << " member " << k;
    }
  }
}

TEST_F(GroupCache, CachedGroupWithJoinedRanks) {
  // Rank r runs 2 * (r + 1) steps; while a rank is joined, the others' cached
  // group goes through the coordinator and the joined ranks reduce zeros.
  const std::vector<int64_t> sizes = {3, 5};
  for (int step = 0; step < 2 * (rank_ + 1); ++step) {
    std::vector<Buffer> bufs = StepBuffers(sizes, rank_, step);
    std::vector<TensorView> views = Views(bufs);
    ASSERT_TRUE(Run(rt_->EnqueueGroupedAllreduce(views, views, Sum("joined.g"))).ok())
        << "rank " << rank_ << " step " << step;
    double want = 0;
    for (int r = 0; r < size_; ++r) {
      if (step < 2 * (r + 1)) want += r + 10.0 * step + 1 + 4;  // member 1, element 4
    }
    ASSERT_EQ(bufs[1].Get(4), want) << "rank " << rank_ << " step " << step;
  }
  ASSERT_TRUE(Run(rt_->EnqueueJoin({})).ok());
  // Cached again, and on every rank again.
  for (int step = 0; step < 3; ++step) {
    std::vector<Buffer> bufs = StepBuffers(sizes, rank_, step);
    std::vector<TensorView> views = Views(bufs);
    ASSERT_TRUE(Run(rt_->EnqueueGroupedAllreduce(views, views, Sum("joined.g"))).ok());
    ASSERT_EQ(bufs[0].Get(2), StepSum(size_, step, 0, 2)) << "rank " << rank_ << " step " << step;
  }
}

// A cache too small for the working set: entries, group members among them,
// are evicted while other ranks still wait on them.
class GroupCacheSmall : public RuntimeTest {
  std::vector<std::pair<std::string, std::string>> Settings() override {
    return {{"KOLO_CACHE_CAPACITY", "4"}};
  }
};

TEST_F(GroupCacheSmall, AGroupLargerThanTheCacheIsReportedOnce) {
  std::vector<Buffer> bufs = StepBuffers({2, 2, 5, 1, 7}, rank_, 0);
  std::vector<TensorView> views = Views(bufs);
  ::testing::internal::CaptureStderr();
  for (int step = 0; step < 3; ++step) {
    Status s = Run(rt_->EnqueueGroupedAllreduce(views, views, Sum("too.large")));
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  const std::string err = ::testing::internal::GetCapturedStderr();
  const std::string line =
      "grouped allreduce 'too.large' has 5 tensors, more than "
      "KOLO_CACHE_CAPACITY=4";
  size_t count = 0;
  for (size_t at = err.find(line); at != std::string::npos; at = err.find(line, at + 1)) ++count;
  EXPECT_EQ(count, rank_ == 0 ? 1u : 0u) << "rank " << rank_ << ":\n" << err;
}

TEST_F(GroupCacheSmall, EvictedMembersKeepResultsRightAndNothingHangs) {
  // "fits" (2 members) fits in the cache, "never.fits" (5) cannot; three
  // ungrouped tensors a step rotate among five names. Odd ranks submit the
  // ungrouped tensors first and the groups a little later, so that the other
  // ranks' group hits wait while the ungrouped ones are negotiated and their
  // insertion evicts the members.
  const std::vector<int64_t> fits_sizes = {3, 4}, never_sizes = {2, 2, 5, 1, 7};
  for (int step = 0; step < 16; ++step) {
    std::vector<Buffer> fits = StepBuffers(fits_sizes, rank_, step);
    std::vector<Buffer> never = StepBuffers(never_sizes, rank_, step);
    std::vector<Buffer> single = StepBuffers({6, 6, 6}, rank_, step);
    std::vector<TensorView> fits_views = Views(fits), never_views = Views(never);
    std::vector<Handle> handles;
    auto enqueue = [&](Result<Handle> h) {
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      handles.push_back(h.value());
    };
    auto groups = [&] {
      enqueue(rt_->EnqueueGroupedAllreduce(fits_views, fits_views, Sum("fits")));
      if (step % 4 == 3) {
        enqueue(rt_->EnqueueGroupedAllreduce(never_views, never_views, Sum("never.fits")));
      }
    };
    auto singles = [&] {
      for (size_t u = 0; u < single.size(); ++u) {
        enqueue(rt_->EnqueueAllreduce(single[u].View(), single[u].View(),
                                      Sum("rotating." + std::to_string((3 * step + u) % 5))));
      }
    };
    if (rank_ % 2 == 0) {
      groups();
      singles();
    } else {
      singles();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      groups();
    }
    for (Handle h : handles) ASSERT_TRUE(rt_->Wait(h).ok()) << "rank " << rank_ << " step " << step;
    for (size_t k = 0; k < fits.size(); ++k) {
      ASSERT_EQ(fits[k].Get(fits_sizes[k] - 1), StepSum(size_, step, k, fits_sizes[k] - 1))
          << "rank " << rank_ << " step " << step << " fits." << k;
    }
    for (size_t k = 0; step % 4 == 3 && k < never.size(); ++k) {
      ASSERT_EQ(never[k].Get(never_sizes[k] - 1), StepSum(size_, step, k, never_sizes[k] - 1))
          << "rank " << rank_ << " step " << step << " never.fits." << k;
    }
    for (size_t u = 0; u < single.size(); ++u) {
      ASSERT_EQ(single[u].Get(5), StepSum(size_, step, u, 5))
          << "rank " << rank_ << " step " << step << " rotating";
    }
  }
}

}  // namespace
}  // namespace kolo::test
