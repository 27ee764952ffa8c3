#include "coordinator.h"

#include <gtest/gtest.h>

#include "base/rows.h"

namespace kolo {
namespace {

using Clock = Coordinator::Clock;

Request Allreduce(const std::string& name, std::vector<int64_t> shape = {4},
                  DataType dtype = DataType::kFloat32) {
  Request r;
  r.op = OpType::kAllreduce;
  r.name = name;
  r.shape = std::move(shape);
  r.dtype = dtype;
  r.reduce_op = ReduceOp::kAverage;
  return r;
}

Request Op(OpType op, const std::string& name, std::vector<int64_t> shape = {4}) {
  Request r = Allreduce(name, std::move(shape));
  r.op = op;
  return r;
}

class CoordinatorTest : public ::testing::Test {
 protected:
  Clock::time_point t0 = Clock::now();
  StallSettings no_stall{0, 0};
};

TEST_F(CoordinatorTest, ReadyOnlyWhenEveryRankAsked) {
  Coordinator c(3, no_stall);
  c.AddRequests(0, {Allreduce("a")}, t0);
  c.AddRequests(1, {Allreduce("a")}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
  EXPECT_EQ(c.pending(), 1u);
  c.AddRequests(2, {Allreduce("a")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kAllreduce);
  EXPECT_EQ(out[0].names, std::vector<std::string>{"a"});
  EXPECT_EQ(out[0].sizes, std::vector<int64_t>{4});
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorTest, OrderIsFirstArrivalNotSubmissionOrder) {
  Coordinator c(2, no_stall);
  c.AddRequests(0, {Allreduce("x"), Allreduce("y")}, t0);
  c.AddRequests(1, {Allreduce("y"), Allreduce("x")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].names[0], "x");
  EXPECT_EQ(out[1].names[0], "y");
}

struct MismatchCase {
  const char* label;
  Request a, b;
  std::vector<const char*> fragments;
};

Request WithShape(Request r, std::vector<int64_t> s) {
  r.shape = std::move(s);
  return r;
}

std::vector<MismatchCase> MismatchCases() {
  Request base = Allreduce("t", {17, 17, 17});
  std::vector<MismatchCase> cases;
  cases.push_back({"shape",
                   base,
                   WithShape(base, {18, 18, 18}),
                   {"Mismatched allreduce tensor shapes for tensor 't'", "rank 0", "[17, 17, 17]",
                    "rank 1", "[18, 18, 18]"}});
  Request dtype = base;
  dtype.dtype = DataType::kInt32;
  cases.push_back({"dtype", base, dtype, {"Mismatched data types", "float32", "int32", "rank 1"}});
  Request op = base;
  op.op = OpType::kBroadcast;
  cases.push_back({"op", base, op, {"Mismatched operations", "allreduce", "broadcast"}});
  Request red = base;
  red.reduce_op = ReduceOp::kSum;
  cases.push_back({"reduce op", base, red, {"Mismatched reduce operations", "average", "sum"}});
  Request pre = base;
  pre.prescale = 0.5;
  cases.push_back({"prescale", base, pre, {"Mismatched prescale factors", "1", "0.5"}});
  Request post = base;
  post.postscale = 3;
  cases.push_back({"postscale", base, post, {"Mismatched postscale factors", "3"}});
  Request dev = base;
  dev.device = 0;
  cases.push_back({"device", base, dev, {"Mismatched devices", "cpu", "cuda:0"}});
  Request b1 = Op(OpType::kBroadcast, "t"), b2 = b1;
  b1.root = 0;
  b2.root = 1;
  cases.push_back({"root", b1, b2, {"Mismatched broadcast root ranks", "root 0", "root 1"}});
  Request g1 = Op(OpType::kAllgather, "t", {2, 3}), g2 = Op(OpType::kAllgather, "t", {2, 4});
  cases.push_back(
      {"allgather rest dims",
       g1,
       g2,
       {"Mismatched allgather tensor shapes", "all dimensions but the first", "[2, 3]", "[2, 4]"}});
  Request p1 = Op(OpType::kAddProcessSet, "ps"), p2 = p1;
  p1.ranks = {0, 1};
  p2.ranks = {0, 2};
  cases.push_back({"process set", p1, p2, {"Mismatched process set ranks", "[0, 1]", "[0, 2]"}});
  return cases;
}

TEST_F(CoordinatorTest, EveryMismatchNamesRanksAndValues) {
  for (const MismatchCase& m : MismatchCases()) {
    Coordinator c(2, no_stall);
    c.AddRequests(0, {m.a}, t0);
    c.AddRequests(1, {m.b}, t0);
    auto out = c.ComputeResponses(t0).responses;
    ASSERT_EQ(out.size(), 1u) << m.label;
    EXPECT_EQ(out[0].op, OpType::kError) << m.label;
    for (const char* f : m.fragments) {
      EXPECT_NE(out[0].error.find(f), std::string::npos)
          << m.label << ": '" << f << "' missing from: " << out[0].error;
    }
  }
}

TEST_F(CoordinatorTest, AllgatherFirstDimensionMayDiffer) {
  Coordinator c(3, no_stall);
  c.AddRequests(0, {Op(OpType::kAllgather, "g", {1, 5})}, t0);
  c.AddRequests(1, {Op(OpType::kAllgather, "g", {3, 5})}, t0);
  c.AddRequests(2, {Op(OpType::kAllgather, "g", {0, 5})}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kAllgather);
  EXPECT_EQ(out[0].sizes, (std::vector<int64_t>{1, 3, 0}));
}

TEST_F(CoordinatorTest, MismatchListsAllDisagreeingRanks) {
  Coordinator c(4, no_stall);
  c.AddRequests(0, {Allreduce("t", {2})}, t0);
  c.AddRequests(1, {Allreduce("t", {3})}, t0);
  c.AddRequests(2, {Allreduce("t", {2})}, t0);
  c.AddRequests(3, {Allreduce("t", {5})}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_NE(out[0].error.find("Ranks that differ from rank 0: 1, 3."), std::string::npos)
      << out[0].error;
}

TEST_F(CoordinatorTest, JoinedRanksCountAsPresentForAllreduce) {
  Coordinator c(3, no_stall);
  Request join = Op(OpType::kJoin, "join");
  c.AddRequests(2, {join}, t0);
  c.AddRequests(0, {Allreduce("a", {6})}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
  c.AddRequests(1, {Allreduce("a", {6})}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kAllreduce);
  EXPECT_EQ(out[0].sizes, std::vector<int64_t>{6});  // the joined rank reduces 6 zeros
}

TEST_F(CoordinatorTest, JoinCompletesWithLastRankAndResets) {
  Coordinator c(3, no_stall);
  c.AddRequests(1, {Op(OpType::kJoin, "join")}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
  c.AddRequests(0, {Op(OpType::kJoin, "join")}, t0);
  c.AddRequests(2, {Op(OpType::kJoin, "join")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kJoin);
  EXPECT_EQ(out[0].value, 2);
  // After the join, tensors need every rank again.
  c.AddRequests(0, {Allreduce("b")}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
}

TEST_F(CoordinatorTest, NonAllreduceAfterJoinIsAnError) {
  Coordinator c(2, no_stall);
  c.AddRequests(1, {Op(OpType::kJoin, "join")}, t0);
  c.AddRequests(0, {Op(OpType::kBroadcast, "b")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kError);
  EXPECT_NE(out[0].error.find("Rank(s) 1 already called join()"), std::string::npos)
      << out[0].error;
}

TEST_F(CoordinatorTest, GroupIsHeldUntilComplete) {
  Coordinator c(2, no_stall);
  Request a = Allreduce("g.0"), b = Allreduce("g.1");
  a.group = b.group = "g";
  a.group_size = b.group_size = 2;
  c.AddRequests(0, {a, b}, t0);
  c.AddRequests(1, {a}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
  c.AddRequests(1, {b}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].names[0], "g.0");
  EXPECT_EQ(out[1].names[0], "g.1");
}

TEST_F(CoordinatorTest, GroupFailsAsAWhole) {
  Coordinator c(2, no_stall);
  Request a = Allreduce("g.0"), b = Allreduce("g.1");
  a.group = b.group = "g";
  a.group_size = b.group_size = 2;
  Request b_bad = WithShape(b, {9});
  c.AddRequests(0, {a, b}, t0);
  c.AddRequests(1, {a, b_bad}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 2u);
  for (const Response& r : out) {
    EXPECT_EQ(r.op, OpType::kError);
    EXPECT_NE(r.error.find("Group 'g' failed"), std::string::npos) << r.error;
  }
}

TEST_F(CoordinatorTest, StallWarningNamesMissingRanks) {
  Coordinator c(4, StallSettings{10, 0});
  c.AddRequests(0, {Allreduce("slow")}, t0);
  c.AddRequests(2, {Allreduce("slow")}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0 + std::chrono::seconds(5)).warnings.empty());
  auto late = c.ComputeResponses(t0 + std::chrono::seconds(11));
  ASSERT_EQ(late.warnings.size(), 1u);
  const std::string& w = late.warnings[0];
  EXPECT_NE(w.find("'slow'"), std::string::npos) << w;
  EXPECT_NE(w.find("submitted by rank(s) 0, 2"), std::string::npos) << w;
  EXPECT_NE(w.find("not by rank(s) 1, 3"), std::string::npos) << w;
  // Not repeated every cycle, only every check interval.
  EXPECT_TRUE(c.ComputeResponses(t0 + std::chrono::seconds(12)).warnings.empty());
  EXPECT_EQ(c.ComputeResponses(t0 + std::chrono::seconds(22)).warnings.size(), 1u);
}

TEST_F(CoordinatorTest, StalledTensorsAreListedEveryRoundForTheMonitor) {
  Coordinator c(4, StallSettings{10, 0});
  Request r = Allreduce("slow");
  r.call_site = "train.py:57 in step";
  c.AddRequests(0, {r}, t0);
  c.AddRequests(2, {r}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0 + std::chrono::seconds(5)).stalled.empty());
  for (int s : {11, 12}) {  // every round, not only with the warnings
    auto out = c.ComputeResponses(t0 + std::chrono::seconds(s));
    ASSERT_EQ(out.stalled.size(), 1u) << "at " << s << " s";
    EXPECT_EQ(out.stalled[0].name, "slow");
    EXPECT_EQ(out.stalled[0].call_site, "train.py:57 in step");
    EXPECT_EQ(out.stalled[0].missing, (std::vector<int>{1, 3}));
    EXPECT_DOUBLE_EQ(out.stalled[0].seconds, s);
  }
  c.AddRequests(1, {r}, t0 + std::chrono::seconds(13));
  c.AddRequests(3, {r}, t0 + std::chrono::seconds(13));
  EXPECT_TRUE(c.ComputeResponses(t0 + std::chrono::seconds(13)).stalled.empty());
}

TEST_F(CoordinatorTest, TheRankThatCameLastIsNamedWhenTheRanksCameInDifferentRounds) {
  Coordinator c(3, StallSettings{0, 0});
  c.AddRequests(0, {Allreduce("a"), Allreduce("b")}, t0);
  c.AddRequests(1, {Allreduce("a"), Allreduce("b")}, t0);
  c.AddRequests(2, {Allreduce("b")}, t0);
  auto first = c.ComputeResponses(t0);  // b: every rank in this round
  ASSERT_EQ(first.responses.size(), 1u);
  EXPECT_TRUE(first.last_arrivals.empty());
  c.AddRequests(2, {Allreduce("a")}, t0);  // a round later
  auto second = c.ComputeResponses(t0);
  ASSERT_EQ(second.responses.size(), 1u);
  EXPECT_EQ(second.last_arrivals, std::vector<int>{2});
}

TEST_F(CoordinatorTest, TheRankThatCameLastIsFoundThroughTheReferenceToo) {
  Coordinator c(4, StallSettings{0, 0});
  const std::vector<Request> reference = {Allreduce("g")};
  c.AddRequests(0, reference, t0);
  RankBits early(4);
  early.Set(1);
  c.AddReference(reference, early, {}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
  RankBits late(4);
  late.Set(2);
  late.Set(3);
  c.AddReference(reference, late, {}, t0);
  auto out = c.ComputeResponses(t0);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.last_arrivals, std::vector<int>{2}) << "the lowest of those that came last";
}

TEST_F(CoordinatorTest, StalledTensorAsksTheMissingRanksWithEveryWarningAndTheirAnswerIsAMismatch) {
  Coordinator c(3, StallSettings{10, 0}, /*process_set=*/0);
  c.AddRequests(0, {Allreduce("x")}, t0);
  c.AddRequests(1, {Allreduce("x")}, t0);
  auto late = c.ComputeResponses(t0 + std::chrono::seconds(11));
  ASSERT_EQ(late.responses.size(), 1u);
  EXPECT_EQ(late.responses[0].op, OpType::kMissing);
  EXPECT_EQ(late.responses[0].names, std::vector<std::string>{"x"});
  EXPECT_EQ(late.responses[0].ranks, std::vector<int32_t>{2});
  EXPECT_TRUE(c.ComputeResponses(t0 + std::chrono::seconds(15)).responses.empty());
  // Asked again with the next warning: a rank may hold the name elsewhere only by now.
  auto again = c.ComputeResponses(t0 + std::chrono::seconds(22));
  ASSERT_EQ(again.responses.size(), 1u);
  EXPECT_EQ(again.responses[0].op, OpType::kMissing);
  EXPECT_EQ(again.responses[0].ranks, std::vector<int32_t>{2});
  // Rank 2 answers: it holds "x" on process set 3.
  Request elsewhere = Allreduce("x");
  elsewhere.process_set = 3;
  c.AddRequests(2, {elsewhere}, t0 + std::chrono::seconds(23));
  auto out = c.ComputeResponses(t0 + std::chrono::seconds(23));
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].op, OpType::kError);
  EXPECT_EQ(out.responses[0].error,
            "Mismatched process sets for allreduce tensor 'x': rank 0 submitted it on process "
            "set 0 but rank 2 submitted it on process set 3.");
  // An answer that arrives after the tensor was decided is dropped.
  c.AddRequests(2, {elsewhere}, t0 + std::chrono::seconds(24));
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorTest, StallShutdownFailsTheTensor) {
  Coordinator c(2, StallSettings{1, 3});
  c.AddRequests(0, {Allreduce("lost")}, t0);
  auto out = c.ComputeResponses(t0 + std::chrono::seconds(4));
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].op, OpType::kError);
  EXPECT_NE(out.responses[0].error.find("not by rank(s) 1"), std::string::npos);
  EXPECT_NE(out.responses[0].error.find("KOLO_STALL_SHUTDOWN_TIME_SECONDS"), std::string::npos);
  EXPECT_EQ(c.pending(), 0u);
}

// Unnamed collective number `index` (of epoch `epoch`), an allreduce unless
// `op` says otherwise, called at `site`; named as RuntimeImpl names it.
Request Unnamed(int64_t index, const std::string& site, OpType op = OpType::kAllreduce,
                int64_t epoch = 0, std::vector<int64_t> shape = {4},
                DataType dtype = DataType::kFloat32) {
  Request r = Op(op,
                 std::string(OpTypeName(op)) + ".noname." +
                     (epoch > 0 ? "e" + std::to_string(epoch) + "." : std::string()) +
                     std::to_string(index),
                 std::move(shape));
  r.dtype = dtype;
  r.unnamed_epoch = epoch;
  r.unnamed_index = index;
  r.call_site = site;
  return r;
}

std::vector<int> Ranks(const Response& r) { return {r.ranks.begin(), r.ranks.end()}; }

// An unnamed allreduce whose tensor has as many elements as the line number of
// `site` ("a.py:30 in g": 30): calls from different lines disagree, as the
// collectives of ranks out of step mostly do.
Request At(int64_t index, const std::string& site) {
  const size_t colon = site.find(':');
  return Unnamed(index, site, OpType::kAllreduce, 0, {std::stoll(site.substr(colon + 1))});
}

TEST_F(CoordinatorTest, UnnamedCallsThatAgreeFromDifferentPlacesPairByNumber) {
  // A rank-dependent branch: the root broadcasts at line 10, the others at
  // line 12, the same tensor. Horovod pairs them by number; so does kolo.
  Coordinator c(3, no_stall);
  Request root = Unnamed(0, "a.py:10 in f", OpType::kBroadcast);
  root.root = 0;
  c.AddRequests(0, {root}, t0);
  for (int r = 1; r < 3; ++r) {
    Request other = Unnamed(0, "a.py:12 in f", OpType::kBroadcast);
    other.root = 0;
    c.AddRequests(r, {other}, t0);
  }
  auto out = c.ComputeResponses(t0);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].op, OpType::kBroadcast) << out.responses[0].error;
  EXPECT_TRUE(out.warnings.empty());
  EXPECT_EQ(c.pending(), 0u);
  // And the next ones, from the same line on every rank, pair as before.
  for (int r = 0; r < 3; ++r) c.AddRequests(r, {Unnamed(1, "a.py:20 in f")}, t0);
  out = c.ComputeResponses(t0);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].op, OpType::kAllreduce);
}

TEST_F(CoordinatorTest, AfterAPairFromTwoPlacesTheRanksStillAtTheOtherPlaceAreBehind) {
  // Rank 0 raised before the allgather at line 10 that ranks 1 and 2 call;
  // its next unnamed collective, an allgather of the same signature at line
  // 20, pairs with theirs by number (as in Horovod). Then ranks 1 and 2 call
  // line 20 while rank 0 is at line 30: they are the ones behind, whichever
  // side arrives first.
  for (bool behind_first : {true, false}) {
    SCOPED_TRACE(behind_first ? "ranks 1 and 2 arrive first" : "rank 0 arrives first");
    Coordinator c(3, no_stall);
    auto allgather = [](int64_t n, const std::string& site) {
      return Unnamed(n, site, OpType::kAllgather, 0, {2}, DataType::kInt64);
    };
    c.AddRequests(1, {allgather(0, "a.py:10 in f")}, t0);
    c.AddRequests(2, {allgather(0, "a.py:10 in f")}, t0);
    c.AddRequests(0, {allgather(0, "a.py:20 in g")}, t0);
    auto out = c.ComputeResponses(t0).responses;
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].op, OpType::kAllgather) << out[0].error;
    auto behind = [&] {
      c.AddRequests(1, {allgather(1, "a.py:20 in g")}, t0);
      c.AddRequests(2, {allgather(1, "a.py:20 in g")}, t0);
    };
    // One side in a round of its own, the other in the next: the side that
    // comes last is not therefore kept.
    if (behind_first) {
      behind();
    } else {
      c.AddRequests(0, {At(1, "a.py:30 in g")}, t0);
    }
    EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
    if (behind_first) {
      c.AddRequests(0, {At(1, "a.py:30 in g")}, t0);
    } else {
      behind();
    }
    out = c.ComputeResponses(t0).responses;
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].op, OpType::kResync);
    EXPECT_EQ(Ranks(out[0]), (std::vector<int>{1, 2}));
    c.AddRequests(1, {At(1, "a.py:30 in g")}, t0);
    c.AddRequests(2, {At(1, "a.py:30 in g")}, t0);
    out = c.ComputeResponses(t0).responses;
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].op, OpType::kAllreduce);  // in step again
  }
}

TEST_F(CoordinatorTest, UnnamedCallsThatDisagreeFromDifferentPlacesNameBothPlaces) {
  // Same number, different places, different shapes: out of step, and the
  // error names where each rank called its collective.
  Coordinator c(2, no_stall);
  c.AddRequests(0, {At(0, "a.py:3 in f")}, t0);
  c.AddRequests(1, {At(0, "a.py:7 in g")}, t0);
  auto out = c.ComputeResponses(t0);
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].op, OpType::kResync);
  EXPECT_NE(out.responses[0].error.find("a.py:3 in f"), std::string::npos)
      << out.responses[0].error;
  EXPECT_NE(out.responses[0].error.find("a.py:7 in g"), std::string::npos)
      << out.responses[0].error;
}

TEST_F(CoordinatorTest, UnnamedCallsFromDifferentPlacesResyncTheRanksBehind) {
  // Rank 0 raised before the allreduce at line 10, which rank 1 waits in, and
  // called its next unnamed collective, an allgather at line 30.
  Coordinator c(2, no_stall);
  c.AddRequests(1, {Unnamed(2, "a.py:10 in f")}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
  c.AddRequests(0, {Unnamed(2, "a.py:30 in g", OpType::kAllgather)}, t0);
  auto out = c.ComputeResponses(t0);
  ASSERT_EQ(out.responses.size(), 1u);
  const Response& r = out.responses[0];
  EXPECT_EQ(r.op, OpType::kResync);
  EXPECT_EQ(Ranks(r), std::vector<int>{1});
  EXPECT_EQ(r.unnamed_epoch, 0);
  EXPECT_EQ(r.unnamed_from, 2);
  EXPECT_EQ(r.error.find("Unnamed collectives out of step on process set 0: rank(s) 1 called "
                         "allreduce tensor 'allreduce.noname.2' at a.py:10 in f, but rank(s) 0 "
                         "called their unnamed collective of that number (allgather tensor "
                         "'allgather.noname.2') at a.py:30 in g."),
            0u)
      << r.error;
  EXPECT_NE(r.error.find("cancelled it (nothing was exchanged) on rank(s) 1"), std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("name=..."), std::string::npos) << r.error;
  ASSERT_EQ(out.warnings.size(), 1u);  // rank 0 logs it too
  // Rank 0's allgather still waits; rank 1's next unnamed collective is number
  // 2 again, the same allgather: they pair.
  EXPECT_EQ(c.pending(), 1u);
  c.AddRequests(1, {Unnamed(2, "a.py:30 in g", OpType::kAllgather)}, t0);
  auto next = c.ComputeResponses(t0).responses;
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(next[0].op, OpType::kAllgather);
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorTest, UnnamedMismatchFromOnePlaceIsAPlainMismatch) {
  // Every rank called it at the same line with rank-dependent shapes: the
  // ranks are in step, later unnamed collectives must keep working.
  Coordinator c(2, no_stall);
  c.AddRequests(0, {Unnamed(0, "a.py:10 in f", OpType::kAllreduce, 0, {2})}, t0);
  c.AddRequests(1, {Unnamed(0, "a.py:10 in f", OpType::kAllreduce, 0, {3})}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kError);
  EXPECT_EQ(out[0].unnamed_from, 0);  // found on each rank by its number
  EXPECT_EQ(out[0].error.find("out of step"), std::string::npos) << out[0].error;
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorTest, ResyncAlsoDropsTheRanksLaterUnnamedRequests) {
  // Rank 1 started two unnamed collectives of the test rank 0 left early.
  Coordinator c(2, no_stall);
  c.AddRequests(1, {At(0, "a.py:10 in f"), At(1, "a.py:11 in f")}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
  c.AddRequests(0, {At(0, "a.py:30 in g")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kResync);
  EXPECT_EQ(Ranks(out[0]), std::vector<int>{1});
  EXPECT_EQ(out[0].unnamed_from, 0);
  EXPECT_EQ(c.pending(), 1u);  // only rank 0's number 0
  c.AddRequests(1, {At(0, "a.py:30 in g"), At(1, "a.py:31 in g")}, t0);
  c.AddRequests(0, {At(1, "a.py:31 in g")}, t0);
  out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].op, OpType::kAllreduce);
  EXPECT_EQ(out[1].op, OpType::kAllreduce);
}

TEST_F(CoordinatorTest, APlaceThatAnotherRankLeftIsBehindWhateverArrivesLast) {
  // Rank 0 left the test early and arrives first at the next one's line 30;
  // rank 1, still in the test, arrives last at line 10: arrival order alone
  // picks the wrong side once, and the places left tell the rest.
  Coordinator c(2, no_stall);
  c.AddRequests(0, {At(0, "a.py:30 in g")}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
  c.AddRequests(1, {At(0, "a.py:10 in f")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Ranks(out[0]), std::vector<int>{0});  // the last arrival is kept: wrong here
  c.AddRequests(0, {At(0, "a.py:50 in h")}, t0);  // rank 0's next test
  out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(Ranks(out[0]), std::vector<int>{1});  // rank 1 leaves line 10
  c.AddRequests(1, {At(0, "a.py:30 in g")}, t0);  // rank 1's next: rank 0 left it
  out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kResync);
  EXPECT_EQ(Ranks(out[0]), std::vector<int>{1});  // behind, although it came last
  c.AddRequests(1, {At(0, "a.py:50 in h")}, t0);
  out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kAllreduce);  // in step again
}

TEST_F(CoordinatorTest, PlacesCalledInOneRoundKeepTheOneFewerRanksCalled) {
  // Rank 1 raised and went on; ranks 0 and 2 wait where it skipped, all in one
  // round: the ranks that raised are fewer, mostly.
  Coordinator c(3, no_stall);
  c.AddRequests(0, {At(0, "a.py:10 in f")}, t0);
  c.AddRequests(1, {At(0, "a.py:30 in g")}, t0);
  c.AddRequests(2, {At(0, "a.py:10 in f")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kResync);
  EXPECT_EQ(Ranks(out[0]), (std::vector<int>{0, 2}));
}

TEST_F(CoordinatorTest, StalledUnnamedTensorResyncsTheRanksThatSentIt) {
  Coordinator c(2, StallSettings{1, 3});
  c.AddRequests(1, {Unnamed(3, "a.py:10 in f", OpType::kAllreduce, 1), Allreduce("named")}, t0);
  auto out = c.ComputeResponses(t0 + std::chrono::seconds(4)).responses;
  ASSERT_EQ(out.size(), 2u);
  for (const Response& r : out) {
    const bool unnamed = r.names[0] == "allreduce.noname.e1.3";
    EXPECT_EQ(r.op, unnamed ? OpType::kResync : OpType::kError) << r.error;
    EXPECT_EQ(r.error.find("It was unnamed: rank(s) 1 number their next unnamed collective like "
                           "this one") != std::string::npos,
              unnamed)
        << r.error;
    if (unnamed) {
      EXPECT_EQ(Ranks(r), std::vector<int>{1});
      EXPECT_EQ(r.unnamed_epoch, 1);
      EXPECT_EQ(r.unnamed_from, 3);
      EXPECT_NE(r.error.find("called at a.py:10 in f"), std::string::npos) << r.error;
    }
  }
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorTest, ACompletedBarrierResyncsUnnamedTensorsStillPending) {
  Coordinator c(2, no_stall);
  c.AddRequests(1, {Unnamed(0, "a.py:10 in f"), Op(OpType::kBarrier, "barrier")}, t0);
  c.AddRequests(0, {Op(OpType::kBarrier, "barrier")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].op, OpType::kBarrier);
  EXPECT_EQ(out[1].op, OpType::kResync);
  EXPECT_EQ(Ranks(out[1]), std::vector<int>{1});
  EXPECT_EQ(out[1].error.find("Cancelled: every rank passed a barrier() or join() while unnamed "
                              "allreduce tensor 'allreduce.noname.0' (called at a.py:10 in f) "
                              "waited on rank(s) 1 for rank(s) 0"),
            0u)
      << out[1].error;
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorTest, ABarrierThatRanksInSkippedCollectivesCannotReachResyncsThem) {
  // Ranks 0 and 2 raised before the unnamed collective rank 1 waits in, and went on to
  // a barrier (a process-set change, ...): neither side can go on.
  Coordinator c(3, no_stall);
  c.AddRequests(1, {Unnamed(5, "a.py:10 in f")}, t0);
  c.AddRequests(0, {Op(OpType::kBarrier, "barrier")}, t0);
  c.AddRequests(2, {Op(OpType::kBarrier, "barrier")}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());  // rank 1 might just be slow
  auto out = c.ComputeResponses(t0 + std::chrono::milliseconds(1100));
  ASSERT_EQ(out.responses.size(), 1u);
  const Response& r = out.responses[0];
  EXPECT_EQ(r.op, OpType::kResync);
  EXPECT_EQ(Ranks(r), std::vector<int>{1});
  EXPECT_EQ(r.unnamed_from, 5);
  EXPECT_EQ(r.error.find("Cancelled: rank(s) 1 waited in unnamed allreduce tensor "
                         "'allreduce.noname.5' (called at a.py:10 in f), which rank(s) 0, 2 never "
                         "called: they wait in barrier tensor 'barrier'"),
            0u)
      << r.error;
  EXPECT_EQ(out.warnings.size(), 1u);
  c.AddRequests(1, {Op(OpType::kBarrier, "barrier")}, t0);
  out = c.ComputeResponses(t0 + std::chrono::milliseconds(1200));
  ASSERT_EQ(out.responses.size(), 1u);
  EXPECT_EQ(out.responses[0].op, OpType::kBarrier);
}

TEST_F(CoordinatorTest, ABarrierWaitsForRanksThatAreComputingOrBehindInStep) {
  Coordinator c(3, no_stall);
  // Rank 1 sent nothing (computing); rank 2 sent the unnamed collective the others
  // sent too, and will reach the barrier after it.
  c.AddRequests(0, {Unnamed(5, "a.py:10 in f"), Op(OpType::kBarrier, "barrier")}, t0);
  c.AddRequests(2, {Unnamed(5, "a.py:10 in f")}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
  EXPECT_TRUE(c.ComputeResponses(t0 + std::chrono::seconds(5)).responses.empty());
  EXPECT_EQ(c.pending(), 2u);
}

Request Refusal(Request r, const std::string& reason) {
  r.refusal = reason;
  r.dtype = DataType::kFloat32;  // a refusal carries no tensor
  r.shape.clear();
  return r;
}

TEST_F(CoordinatorTest, ARefusalFailsTheCollectiveOnEveryRankOnceAllSentIt) {
  Coordinator c(3, no_stall);
  c.AddRequests(1, {Allreduce("x")}, t0);
  c.AddRequests(0, {Refusal(Allreduce("x"), "complex64 is not supported")}, t0);
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty()) << "rank 2 has not called it yet";
  c.AddRequests(2, {Allreduce("x", {9})}, t0);  // its shape is not compared with a refusal's
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kError);
  EXPECT_EQ(out[0].names, std::vector<std::string>{"x"});
  EXPECT_EQ(out[0].error,
            "allreduce 'x': rank 0 refused its input: complex64 is not supported. The "
            "collective failed on every rank; nothing was exchanged.");
  EXPECT_EQ(Ranks(out[0]), std::vector<int>{0}) << "the refusing rank holds no entry for it";
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorTest, EveryRefusingRankIsNamed) {
  Coordinator c(3, no_stall);
  c.AddRequests(2, {Refusal(Op(OpType::kBroadcast, "b"), "root out of range")}, t0);
  c.AddRequests(1, {Op(OpType::kBroadcast, "b")}, t0);
  c.AddRequests(0, {Refusal(Op(OpType::kBroadcast, "b"), "not contiguous")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].error.find("broadcast 'b': rank 2 refused its input: root out of range "
                              "(rank(s) 0 refused theirs too)."),
            0u)
      << out[0].error;
  EXPECT_EQ(Ranks(out[0]), (std::vector<int>{0, 2}));
}

TEST_F(CoordinatorTest, ARefusedGroupFailsAsAWhole) {
  Coordinator c(2, no_stall);
  auto member = [](int i, bool refused) {
    Request r = Allreduce("g." + std::to_string(i));
    r.group = "g";
    r.group_size = 2;
    return refused ? Refusal(r, "member 1 is not contiguous") : r;
  };
  c.AddRequests(0, {member(0, false), member(1, false)}, t0);
  c.AddRequests(1, {member(0, true), member(1, true)}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 2u);
  for (const Response& r : out) {
    EXPECT_EQ(r.op, OpType::kError);
    EXPECT_EQ(r.error.find("Group 'g' failed: allreduce 'g.0': rank 1 refused its input"), 0u)
        << r.error;
    EXPECT_EQ(Ranks(r), std::vector<int>{1});
  }
}

TEST_F(CoordinatorTest, AnUnnamedRefusalPairsByNumberAndKeepsRanksInStep) {
  Coordinator c(2, no_stall);
  c.AddRequests(0, {Refusal(Unnamed(4, "t.py:7 in f"), "dtype complex64")}, t0);
  c.AddRequests(1, {Unnamed(4, "t.py:7 in f")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kError);
  EXPECT_EQ(out[0].error.find("allreduce 'allreduce.noname.4' (unnamed, called at t.py:7 in f): "
                              "rank 0 refused its input: dtype complex64"),
            0u)
      << out[0].error;
  EXPECT_EQ(out[0].unnamed_epoch, 0);
  EXPECT_EQ(out[0].unnamed_from, 4);
  // Number 5 pairs as usual: nobody was resynchronized.
  c.AddRequests(0, {Unnamed(5, "t.py:9 in f")}, t0);
  c.AddRequests(1, {Unnamed(5, "t.py:9 in f")}, t0);
  out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kAllreduce);
}

TEST_F(CoordinatorTest, ARefusingRanksNextCallOfTheNameWaitsForTheOthersNextOne) {
  // Rank 0 refused "x", then called "x" again with a valid tensor before rank
  // 1 reached its first "x": that is rank 0's second "x", not a duplicate.
  Coordinator c(2, no_stall);
  c.AddRequests(0, {Refusal(Allreduce("x"), "bad"), Allreduce("x")}, t0);
  c.AddRequests(0, {Allreduce("x")}, t0);  // sent again (a reference bit): still one
  EXPECT_TRUE(c.ComputeResponses(t0).responses.empty());
  c.AddRequests(1, {Allreduce("x")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kError);
  EXPECT_EQ(c.pending(), 1u) << "rank 0's second x waits";
  c.AddRequests(1, {Allreduce("x")}, t0);
  out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kAllreduce);
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorTest, ReferenceHoldersOfARefusedEntryAreNotAbsorbed) {
  // Rank 1 refused "x"; its next "x" comes as a bit of rank 0's reference: it
  // is rank 1's second "x", kept for after the refused one.
  Coordinator c(2, no_stall);
  c.AddRequests(0, {Allreduce("x")}, t0);
  c.AddRequests(1, {Refusal(Allreduce("x"), "bad")}, t0);
  RankBits whole(2);
  whole.Set(1);
  c.AddReference({Allreduce("x")}, whole, {}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kError);
  ASSERT_EQ(c.pending(), 1u);
  c.AddRequests(0, {Allreduce("x")}, t0);
  out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kAllreduce);
}

TEST_F(CoordinatorTest, SplitRowsGivesExtraRowsToFirstRanks) {
  EXPECT_EQ(SplitRows(10, 4, 0), 3);
  EXPECT_EQ(SplitRows(10, 4, 1), 3);
  EXPECT_EQ(SplitRows(10, 4, 2), 2);
  EXPECT_EQ(SplitRows(10, 4, 3), 2);
  EXPECT_EQ(SplitRows(1, 3, 2), 0);
}

// Rank 0's requests as the reference (RequestMessage): ranks that hold them
// all are counted a word at a time, ranks that hold some by their bits.
TEST_F(CoordinatorTest, ReferenceHoldersCountLikeFullRequests) {
  const int n = 130;  // three words of ranks
  Coordinator c(n, no_stall);
  std::vector<Request> reference = {Allreduce("a"), Allreduce("b"), Op(OpType::kBarrier, "bar")};
  c.AddRequests(0, reference, t0);
  RankBits whole(n);
  for (int r = 1; r < n; ++r) {
    if (r != 7 && r != 129) whole.Set(r);
  }
  // Rank 7 holds "a" and the barrier; rank 129 holds none yet.
  std::vector<std::pair<int, std::vector<uint64_t>>> partial = {{7, {0x5}}};
  c.AddReference(reference, whole, partial, t0);
  auto out = c.ComputeResponses(t0).responses;
  EXPECT_TRUE(out.empty());
  c.AddRequests(129, reference, t0);
  out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].names[0], "a");
  EXPECT_EQ(out[1].names[0], "bar");
  c.AddRequests(7, {Allreduce("b")}, t0);
  out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].names[0], "b");
  EXPECT_EQ(out[0].op, OpType::kAllreduce);
  EXPECT_EQ(c.pending(), 0u);
}

TEST_F(CoordinatorTest, ReferenceHoldersAreNamedWhenStalledAndCountedOnce) {
  Coordinator c(70, StallSettings{10, 0});
  std::vector<Request> reference = {Allreduce("slow")};
  c.AddRequests(0, reference, t0);
  RankBits whole(70);
  for (int r = 1; r < 70; ++r) {
    if (r != 65) whole.Set(r);
  }
  c.AddReference(reference, whole, {}, t0);
  c.AddReference(reference, whole, {}, t0);  // again: no rank counts twice
  c.AddRequests(3, reference, t0);
  auto late = c.ComputeResponses(t0 + std::chrono::seconds(11));
  ASSERT_EQ(late.warnings.size(), 1u);
  EXPECT_NE(late.warnings[0].find("not by rank(s) 65 "), std::string::npos) << late.warnings[0];
  ASSERT_EQ(late.responses.size(), 1u);
  EXPECT_EQ(late.responses[0].op, OpType::kMissing);
  EXPECT_EQ(late.responses[0].ranks, std::vector<int32_t>{65});
}

TEST_F(CoordinatorTest, ReferenceHoldersOfADifferingRequestAreComparedOneByOne) {
  // Rank 1's request came first and rank 0's differs from it: every rank
  // holding rank 0's version is a disagreeing rank, by number.
  Coordinator c(4, no_stall);
  c.AddRequests(1, {Allreduce("t", {3})}, t0);
  std::vector<Request> reference = {Allreduce("t", {2})};
  c.AddRequests(0, reference, t0);
  RankBits whole(4);
  whole.Set(2);
  whole.Set(3);
  c.AddReference(reference, whole, {}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kError);
  EXPECT_NE(out[0].error.find("Ranks that differ from rank 1: 0, 2, 3."), std::string::npos)
      << out[0].error;
}

TEST_F(CoordinatorTest, ReferenceHoldersOfAnAllgatherGiveTheirFirstDimension) {
  Coordinator c(3, no_stall);
  std::vector<Request> reference = {Op(OpType::kAllgather, "g", {2, 5})};
  c.AddRequests(0, reference, t0);
  c.AddRequests(1, {Op(OpType::kAllgather, "g", {4, 5})}, t0);
  RankBits whole(3);
  whole.Set(2);
  c.AddReference(reference, whole, {}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].sizes, (std::vector<int64_t>{2, 4, 2}));
}

TEST_F(CoordinatorTest, JoinedRanksCountAsPresentWordwise) {
  Coordinator c(100, no_stall);
  for (int r = 50; r < 100; ++r) c.AddRequests(r, {Op(OpType::kJoin, "join")}, t0);
  for (int r = 0; r < 50; ++r) c.AddRequests(r, {Allreduce("a")}, t0);
  auto out = c.ComputeResponses(t0).responses;
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op, OpType::kAllreduce);
}

}  // namespace
}  // namespace kolo
