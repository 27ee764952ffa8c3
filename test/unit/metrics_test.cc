// The monitor's counters and the snapshot line each rank sends kolorun.
#include <gtest/gtest.h>

#include <thread>

#include "metrics.h"
#include "metrics_snapshot.h"

namespace kolo {
namespace {

using std::chrono::microseconds;

TEST(MetricsTest, CountsCollectivesBytesTimesAndSteps) {
  Metrics m;
  m.CountCollective(OpType::kAllreduce, 0, 400);
  m.CountCollective(OpType::kAllreduce, 0, 100);
  m.CountCollective(OpType::kAllgather, 3, 8);
  m.CountCollective(OpType::kBarrier, 42, 0);  // a high set id: the last slot
  m.CountCollective(OpType::kJoin, 0, 0);      // not a counted operation
  m.AddNegotiation(microseconds(7));
  m.AddMoving(microseconds(11));
  m.AddWaiting(microseconds(13));
  m.CountStep();
  m.CountStep();
  MetricsSample s = m.Sample();
#if KOLO_METRICS_ENABLED
  EXPECT_EQ(s.ops[0][0].count, 2);
  EXPECT_EQ(s.ops[0][0].bytes, 500);
  EXPECT_EQ(s.ops[1][3].count, 1);
  EXPECT_EQ(s.ops[5][kSetSlots - 1].count, 1);
  EXPECT_EQ(s.negotiate_us, 7);
  EXPECT_EQ(s.move_us, 11);
  EXPECT_EQ(s.wait_us, 13);
  EXPECT_EQ(s.steps, 2);
#else
  EXPECT_EQ(s.ops[0][0].count, 0) << "KOLO_METRICS=OFF counts nothing";
#endif
}

TEST(MetricsTest, CountsFromSeveralThreadsAddUp) {
  Metrics m;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&m] {
      for (int i = 0; i < 10000; ++i) {
        m.CountCollective(OpType::kAllreduce, 1, 4);
        m.CountStep();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  MetricsSample s = m.Sample();
  if (!KOLO_METRICS_ENABLED) GTEST_SKIP() << "counters compiled out";
  EXPECT_EQ(s.ops[0][1].count, 40000);
  EXPECT_EQ(s.ops[0][1].bytes, 160000);
  EXPECT_EQ(s.steps, 40000);
}

TEST(MetricsTest, StallsArePerSetAndReplacedByTheNextReport) {
  Metrics m;
  EXPECT_FALSE(m.has_stalls());
  m.SetStalls(0, {{0, "a", "x.py:1", {1}, 2.0}});
  m.SetStalls(2, {{0, "b", "", {3, 4}, 5.0}});
  ASSERT_EQ(m.Sample().stalled.size(), 2u);
  EXPECT_EQ(m.Sample().stalled[1].process_set, 2);
  m.SetStalls(0, {});
  ASSERT_EQ(m.Sample().stalled.size(), 1u);
  EXPECT_EQ(m.Sample().stalled[0].name, "b");
  m.SetStalls(2, {});
  EXPECT_FALSE(m.has_stalls());
}

TEST(MetricsTest, LastArrivalsAreCountedPerRankMostOftenFirst) {
  Metrics m;
  m.CountLastArrivals({3, 1});
  m.CountLastArrivals({3});
  MetricsSample s = m.Sample();
  if (!KOLO_METRICS_ENABLED) GTEST_SKIP() << "counters compiled out";
  ASSERT_EQ(s.last_arrivals.size(), 2u);
  EXPECT_EQ(s.last_arrivals[0], (std::pair<int, int64_t>{3, 2}));
  EXPECT_EQ(s.last_arrivals[1], (std::pair<int, int64_t>{1, 1}));
}

RankSnapshot Example() {
  RankSnapshot s;
  s.rank = 3;
  s.host = "node-7";
  s.sample.ops[0][0] = {120, 4096000};
  s.sample.ops[2][1] = {2, 64};
  s.sample.negotiate_us = 1500;
  s.sample.move_us = 98000;
  s.sample.wait_us = 250000;
  s.sample.steps = 40;
  s.sample.stalled.push_back({0, "allreduce.noname.7", "train.py:57 in step, 100%", {1, 2}, 3.5});
  s.sample.last_arrivals = {{5, 12}, {2, 1}};
  return s;
}

TEST(SnapshotTest, RoundTripsThroughItsLine) {
  const std::string line = EncodeSnapshot("tok", Example());
  ASSERT_EQ(line.back(), '\n');
  EXPECT_LE(line.size(), kMaxSnapshotBytes);
  Result<RankSnapshot> back = ParseSnapshot(line.substr(0, line.size() - 1), "tok");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << line;
  const RankSnapshot& s = back.value();
  EXPECT_EQ(s.rank, 3);
  EXPECT_EQ(s.host, "node-7");
  EXPECT_EQ(s.sample.ops[0][0].count, 120);
  EXPECT_EQ(s.sample.ops[0][0].bytes, 4096000);
  EXPECT_EQ(s.sample.ops[2][1].count, 2);
  EXPECT_EQ(s.sample.ops[1][0].count, 0);
  EXPECT_EQ(s.sample.negotiate_us, 1500);
  EXPECT_EQ(s.sample.move_us, 98000);
  EXPECT_EQ(s.sample.wait_us, 250000);
  EXPECT_EQ(s.sample.steps, 40);
  ASSERT_EQ(s.sample.stalled.size(), 1u);
  EXPECT_EQ(s.sample.stalled[0].name, "allreduce.noname.7");
  EXPECT_EQ(s.sample.stalled[0].call_site, "train.py:57 in step, 100%");
  EXPECT_EQ(s.sample.stalled[0].missing, (std::vector<int>{1, 2}));
  EXPECT_DOUBLE_EQ(s.sample.stalled[0].seconds, 3.5);
  EXPECT_EQ(s.sample.last_arrivals, (std::vector<std::pair<int, int64_t>>{{5, 12}, {2, 1}}));
  EXPECT_FALSE(s.truncated);
}

TEST(SnapshotTest, StaysWithinItsLimitWithEveryCounterAndManyStalls) {
  RankSnapshot s = Example();
  for (auto& op : s.sample.ops) {
    for (auto& c : op) c = {999999999999, 999999999999999};
  }
  for (int r = 0; r < 50; ++r) s.sample.last_arrivals.emplace_back(1000000 + r, 999999999999);
  for (int i = 0; i < 20; ++i) {
    s.sample.stalled.push_back(
        {i, std::string(200, 'n'), std::string(200, ' '), std::vector<int>(40, 1000000), 1e6});
  }
  const std::string line = EncodeSnapshot(std::string(32, 'f'), s);
  EXPECT_LE(line.size(), kMaxSnapshotBytes) << "every op and set slot counted";
  Result<RankSnapshot> back = ParseSnapshot(line.substr(0, line.size() - 1), std::string(32, 'f'));
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back.value().truncated);
}

TEST(SnapshotTest, RefusesAWrongTokenAndMalformedLines) {
  const std::string line = EncodeSnapshot("tok", Example());
  Result<RankSnapshot> wrong = ParseSnapshot(line.substr(0, line.size() - 1), "other");
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("token"), std::string::npos);
  for (const char* bad :
       {"KOLOM tok", "KOLOM tok x h", "KOLOM tok 1 h n=abc", "KOLOM tok 1 h c=9,0,1,1",
        "KOLOM tok 1 h c=0,0,1", "KOLOM tok 1 h s=0,1,1,,a%zz,b", "KOLOM tok 1 h s=0,1,1,,a%4",
        "KOLOM tok 1 h junk", "HELLO tok 1 h"}) {
    Result<RankSnapshot> r = ParseSnapshot(bad, "tok");
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_FALSE(r.status().message().empty()) << bad;
    }
  }
  // A field this kolorun does not know (a newer rank) is skipped.
  EXPECT_TRUE(ParseSnapshot("KOLOM tok 1 h n=2 mem=7", "tok").ok());
}

}  // namespace
}  // namespace kolo
