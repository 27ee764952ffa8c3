#include <gtest/gtest.h>

#include "fusion_planner.h"
#include "response_cache.h"

namespace kolo {
namespace {

Response AR(const std::string& name, int64_t n, DataType dtype = DataType::kFloat32) {
  Response r;
  r.op = OpType::kAllreduce;
  r.names = {name};
  r.sizes = {n};
  r.dtype = dtype;
  r.reduce_op = ReduceOp::kAverage;
  return r;
}

Request Req(const std::string& name, int64_t n) {
  Request q;
  q.op = OpType::kAllreduce;
  q.name = name;
  q.shape = {n};
  q.reduce_op = ReduceOp::kAverage;
  return q;
}

TEST(ResponseCache, SaysWhenAGroupIsLargerThanTheCache) {
  Request member;
  member.op = OpType::kAllreduce;
  member.name = "grads.0";
  member.group = "grads";
  member.group_size = 5;
  EXPECT_EQ(ResponseCache(5).GroupTooLarge(member), "");
  EXPECT_EQ(ResponseCache(0).GroupTooLarge(member), "") << "no cache, nothing to miss";
  const std::string why = ResponseCache(4).GroupTooLarge(member);
  EXPECT_EQ(why.find("grouped allreduce 'grads' has 5 tensors, more than KOLO_CACHE_CAPACITY=4"),
            0u)
      << why;
  EXPECT_NE(why.find("Set KOLO_CACHE_CAPACITY to at least 5"), std::string::npos) << why;
}

TEST(ResponseCache, HitMissAndInvalid) {
  ResponseCache cache(4);
  EXPECT_EQ(cache.Find(Req("a", 3), 0).state, ResponseCache::State::kMiss);
  cache.Put(AR("a", 3), std::vector<int64_t>{3});
  auto hit = cache.Find(Req("a", 3), 0);
  EXPECT_EQ(hit.state, ResponseCache::State::kHit);
  EXPECT_EQ(hit.bit, 0);
  EXPECT_EQ(cache.Find(Req("a", 4), 0).state, ResponseCache::State::kInvalid);
  Request other_op = Req("a", 3);
  other_op.reduce_op = ReduceOp::kSum;
  EXPECT_EQ(cache.Find(other_op, 0).state, ResponseCache::State::kInvalid);
}

TEST(ResponseCache, EntryWithoutLocalShapeNeverHits) {
  ResponseCache cache(4);
  cache.Put(AR("a", 3), std::nullopt);  // e.g. this rank had joined
  EXPECT_EQ(cache.Find(Req("a", 3), 0).state, ResponseCache::State::kInvalid);
}

TEST(ResponseCache, GroupMemberHitsOnlyInTheSameGroupOfTheSameSize) {
  ResponseCache cache(4);
  Request member = Req("g.0", 3);
  member.group = "g";
  member.group_size = 2;
  cache.Put(AR("g.0", 3), std::vector<int64_t>{3}, "g", 2);
  EXPECT_EQ(cache.Find(member, 0).state, ResponseCache::State::kHit);
  Request other_group = member;
  other_group.group = "h";
  EXPECT_EQ(cache.Find(other_group, 0).state, ResponseCache::State::kInvalid);
  Request other_size = member;
  other_size.group_size = 3;
  EXPECT_EQ(cache.Find(other_size, 0).state, ResponseCache::State::kInvalid);
  // The same name outside any group is another request too.
  EXPECT_EQ(cache.Find(Req("g.0", 3), 0).state, ResponseCache::State::kInvalid);
  Request other_shape = Req("g.0", 4);
  other_shape.group = "g";
  other_shape.group_size = 2;
  EXPECT_EQ(cache.Find(other_shape, 0).state, ResponseCache::State::kInvalid);
}

TEST(ResponseCache, GroupRequestDoesNotHitAnUngroupedEntry) {
  ResponseCache cache(4);
  cache.Put(AR("a", 3), std::vector<int64_t>{3});
  Request member = Req("a", 3);
  member.group = "a.group";
  member.group_size = 2;
  auto found = cache.Find(member, 0);
  EXPECT_EQ(found.state, ResponseCache::State::kInvalid);
  EXPECT_EQ(found.bit, 0);
}

TEST(ResponseCache, EvictsLeastRecentlyUsedAndReusesBits) {
  ResponseCache cache(2);
  EXPECT_FALSE(cache.Put(AR("a", 1), std::vector<int64_t>{1}));
  EXPECT_FALSE(cache.Put(AR("b", 1), std::vector<int64_t>{1}));
  cache.Touch(0);  // a is now the most recent
  std::optional<int> evicted = cache.Put(AR("c", 1), std::vector<int64_t>{1});
  ASSERT_TRUE(evicted.has_value());
  EXPECT_EQ(*evicted, 1);  // b's bit
  EXPECT_EQ(cache.Find(Req("c", 1), 0).bit, 1);
  EXPECT_EQ(cache.Find(Req("b", 1), 0).state, ResponseCache::State::kMiss);
  EXPECT_EQ(cache.bit_bound(), 2);
}

TEST(ResponseCache, SameOperationsGiveSameBitsOnEveryRank) {
  // Two ranks' caches fed the same sequence agree bit for bit.
  ResponseCache r0(3), r1(3);
  for (ResponseCache* c : {&r0, &r1}) {
    for (const char* n : {"a", "b", "c", "d", "b", "e"}) c->Put(AR(n, 2), std::vector<int64_t>{2});
    c->Erase(c->Find(Req("d", 2), 0).bit);
  }
  for (const char* n : {"a", "b", "c", "d", "e"}) {
    EXPECT_EQ(r0.Find(Req(n, 2), 0).bit, r1.Find(Req(n, 2), 1).bit) << n;
  }
}

TEST(ResponseCache, DisabledAtCapacityZero) {
  ResponseCache cache(0);
  EXPECT_FALSE(cache.enabled());
  cache.Put(AR("a", 1), std::vector<int64_t>{1});
  EXPECT_EQ(cache.Find(Req("a", 1), 0).state, ResponseCache::State::kMiss);
}

TEST(ResponseCache, AllgatherHitsOnlyWithSameFirstDimension) {
  ResponseCache cache(4);
  Response r;
  r.op = OpType::kAllgather;
  r.names = {"g"};
  r.sizes = {2, 5};
  cache.Put(r, std::vector<int64_t>{5, 3});
  Request q;
  q.op = OpType::kAllgather;
  q.name = "g";
  q.shape = {5, 3};
  EXPECT_EQ(cache.Find(q, 1).state, ResponseCache::State::kHit);
  q.shape = {4, 3};
  EXPECT_EQ(cache.Find(q, 1).state, ResponseCache::State::kInvalid);
}

TEST(FusionPlanner, FusesCompatibleUpToThreshold) {
  std::vector<Response> in = {AR("a", 10), AR("b", 10), AR("c", 10)};
  auto plan = FusionPlanner::Plan(in, 80, 1 << 20);  // 40 bytes each
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(plan[0].sizes, (std::vector<int64_t>{10, 10}));
  EXPECT_EQ(plan[1].names, (std::vector<std::string>{"c"}));
}

TEST(FusionPlanner, KeepsIncompatibleApartAndLooksAhead) {
  std::vector<Response> in = {AR("a", 1), AR("h", 1, DataType::kFloat16), AR("b", 1)};
  Response scaled = AR("s", 1);
  scaled.postscale = 2;
  in.push_back(scaled);
  auto plan = FusionPlanner::Plan(in, 1 << 20, 1 << 20);
  ASSERT_EQ(plan.size(), 3u);
  EXPECT_EQ(plan[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(plan[1].names, (std::vector<std::string>{"h"}));
  EXPECT_EQ(plan[2].names, (std::vector<std::string>{"s"}));
}

TEST(FusionPlanner, LargeTensorRunsAloneAndThresholdZeroDisablesFusion) {
  auto plan = FusionPlanner::Plan({AR("big", 1000), AR("a", 1)}, 100, 1 << 20);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].names.size(), 1u);
  plan = FusionPlanner::Plan({AR("a", 1), AR("b", 1)}, 0, 1 << 20);
  EXPECT_EQ(plan.size(), 2u);
}

TEST(FusionPlanner, TensorsAtTheInPlaceThresholdRunAloneWhileSmallOnesFuseAroundThem) {
  // 4-byte elements: "mid" is 400 bytes, at the in-place threshold.
  auto plan =
      FusionPlanner::Plan({AR("a", 10), AR("mid", 100), AR("b", 10), AR("c", 99)}, 1 << 20, 400);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].names, (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(plan[1].names, (std::vector<std::string>{"mid"}));
}

TEST(FusionPlanner, OtherOpsAreNotFused) {
  Response bc;
  bc.op = OpType::kBroadcast;
  bc.names = {"x"};
  auto plan = FusionPlanner::Plan({AR("a", 1), bc, AR("b", 1)}, 1 << 20, 1 << 20);
  ASSERT_EQ(plan.size(), 2u);
  EXPECT_EQ(plan[0].names.size(), 2u);
  EXPECT_EQ(plan[1].op, OpType::kBroadcast);
}

}  // namespace
}  // namespace kolo
