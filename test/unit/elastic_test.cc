// Elastic mode's pure logic (launcher/elastic_policy.h) and the rendezvous
// verbs' parsing (launcher/rendezvous.h): no processes.
#include <gtest/gtest.h>

#include "elastic_policy.h"
#include "expect_error.h"
#include "hosts.h"
#include "rendezvous.h"

namespace kolo::launcher {
namespace {

using H = std::vector<HostSlots>;

TEST(ElasticSettings, DefaultsFollowHorovod) {
  Result<ElasticSettings> s = MakeElasticSettings(4, 0, 0, -1, {}, 600);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s.value().np, 4);
  EXPECT_EQ(s.value().min_np, 4) << "min-np defaults to -np";
  EXPECT_EQ(s.value().max_np, 0) << "max-np unbounded";
  EXPECT_EQ(s.value().reset_limit, -1);
  EXPECT_FALSE(s.value().cooldown.has_value()) << "blacklisted for the rest of the job";
  // -np from --min-np when only that is given.
  EXPECT_EQ(MakeElasticSettings(0, 2, 8, -1, {}, 600).value().np, 2);
  Result<ElasticSettings> c = MakeElasticSettings(4, 2, 8, 3, {10, 100}, 5);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c.value().cooldown->min_seconds, 10);
  EXPECT_EQ(c.value().cooldown->max_seconds, 100);
  EXPECT_EQ(c.value().timeout_seconds, 5);
}

TEST(ElasticSettings, BadCombinationsNameTheFlags) {
  ExpectError(MakeElasticSettings(0, 0, 4, -1, {}, 600).status(), "needs -np");
  ExpectError(MakeElasticSettings(2, 4, 0, -1, {}, 600).status(), "--min-np 4 is more than -np 2");
  ExpectError(MakeElasticSettings(4, 0, 2, -1, {}, 600).status(), "--max-np 2 is less than -np 4");
  ExpectError(MakeElasticSettings(2, 0, 0, -1, {0, 10}, 600).status(),
              "--blacklist-cooldown-range 0 10");
  ExpectError(MakeElasticSettings(2, 0, 0, -1, {10, 3601}, 600).status(), "within 1 and 3600");
  ExpectError(MakeElasticSettings(2, 0, 0, -1, {10, 5}, 600).status(), "MIN <= MAX");
}

TEST(Discovery, HorovodsFormat) {
  Result<H> h = ParseDiscoveryOutput("host-1:4\nhost-2\n\n  127.0.0.2:2  \nhost-1:4\n", 3);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h.value(), (H{{"host-1", 4}, {"host-2", 3}, {"127.0.0.2", 2}}));
  // Nothing listed: no hosts now (the job waits), not an error.
  EXPECT_TRUE(ParseDiscoveryOutput("", 1).value().empty());
  EXPECT_TRUE(ParseDiscoveryOutput("\n  \n", 1).value().empty());
}

TEST(Discovery, BadLinesAreNamed) {
  ExpectError(ParseDiscoveryOutput("a:2\nnot a host\n", 1).status(),
              "line 2 'not a host' is not 'host' or 'host:slots'");
  ExpectError(ParseDiscoveryOutput("a:x\n", 1).status(), "line 1 'a:x'");
  ExpectError(ParseDiscoveryOutput("a:0\n", 1).status(), "line 1 'a:0'");
  ExpectError(ParseDiscoveryOutput("a:2:3\n", 1).status(), "line 1");
  ExpectError(ParseDiscoveryOutput(":2\n", 1).status(), "line 1 ':2'");
  ExpectError(ParseDiscoveryOutput("a:2\nb:1\na:3\n", 1).status(),
              "line 3 'a:3' gives host a 3 slots after an earlier line gave 2");
}

TEST(HostPool, KeepsRankOrderAndAppendsNewHosts) {
  HostPool pool(std::nullopt);
  EXPECT_TRUE(pool.Update({{"a", 2}, {"b", 2}}));
  EXPECT_EQ(pool.Available(0), (H{{"a", 2}, {"b", 2}}));
  EXPECT_FALSE(pool.Update({{"a", 2}, {"b", 2}})) << "the same list is no change";
  // Discovery lists them in another order: the old hosts keep their ranks.
  pool.Update({{"c", 1}, {"b", 2}, {"a", 2}});
  EXPECT_EQ(pool.Available(0), (H{{"a", 2}, {"b", 2}, {"c", 1}}));
  // A host gone, then back: it keeps its place while it is listed.
  pool.Update({{"b", 4}, {"c", 1}});
  EXPECT_EQ(pool.Available(0), (H{{"b", 4}, {"c", 1}}));
}

TEST(HostPool, BlacklistForTheRestOfTheJob) {
  HostPool pool(std::nullopt);
  pool.Update({{"a", 2}, {"b", 2}});
  EXPECT_EQ(pool.Blacklist("b", 0, 0.5), -1);
  EXPECT_EQ(pool.Available(1e9), (H{{"a", 2}}));
  EXPECT_EQ(pool.Blacklisted(1e9), (std::vector<std::string>{"b"}));
}

TEST(HostPool, HorovodsCooldownGrowsAndIsBounded) {
  // MIN * 2^n + r * MIN, kept within [MIN, MAX], for the n-th blacklisting.
  HostPool pool(CooldownRange{10, 100});
  pool.Update({{"a", 2}, {"b", 2}});
  EXPECT_DOUBLE_EQ(pool.Blacklist("b", 0, 0.5), 25.0);  // 10 * 2 + 5
  EXPECT_EQ(pool.Available(24.9), (H{{"a", 2}}));
  EXPECT_EQ(pool.Blacklisted(24.9), (std::vector<std::string>{"b"}));
  // Blacklisted again while cooling down: the cooldown is not restarted.
  EXPECT_DOUBLE_EQ(pool.Blacklist("b", 20, 0.9), 5.0);
  // Back after it, at the end of the rank order.
  EXPECT_EQ(pool.Available(25), (H{{"a", 2}, {"b", 2}}));
  EXPECT_TRUE(pool.Blacklisted(25).empty());
  EXPECT_DOUBLE_EQ(pool.Blacklist("b", 30, 0.0), 40.0);    // 10 * 4
  EXPECT_DOUBLE_EQ(pool.Blacklist("b", 80, 0.0), 80.0);    // 10 * 8
  EXPECT_DOUBLE_EQ(pool.Blacklist("b", 200, 0.0), 100.0);  // 160, bounded by MAX
  // A host back from the blacklist joins after the others.
  HostPool order(CooldownRange{1, 10});
  order.Update({{"a", 1}, {"b", 1}, {"c", 1}});
  EXPECT_EQ(order.Available(0), (H{{"a", 1}, {"b", 1}, {"c", 1}}));
  order.Blacklist("a", 0, 0);
  EXPECT_EQ(order.Available(1), (H{{"b", 1}, {"c", 1}}));
  EXPECT_EQ(order.Available(3), (H{{"b", 1}, {"c", 1}, {"a", 1}}));
}

TEST(HostPool, IncarnationSizeIsMinOfMaxNpAndSlots) {
  const H available = {{"a", 2}, {"b", 2}, {"c", 4}};
  EXPECT_EQ(ChooseIncarnationHosts(available, 0), available) << "no max-np: every slot";
  EXPECT_EQ(ChooseIncarnationHosts(available, 3), (H{{"a", 2}, {"b", 1}}));
  EXPECT_EQ(ChooseIncarnationHosts(available, 4), (H{{"a", 2}, {"b", 2}}));
  EXPECT_EQ(ChooseIncarnationHosts(available, 100), available);
  EXPECT_TRUE(ChooseIncarnationHosts({}, 4).empty());
}

TEST(Check, AddedRemovedBoth) {
  const H running = {{"a", 2}, {"b", 2}};
  EXPECT_EQ(CompareHosts(running, {{"a", 2}, {"b", 2}}, 0), HostUpdate::kSame);
  EXPECT_EQ(CompareHosts(running, {{"b", 2}, {"a", 2}}, 0), HostUpdate::kSame);
  EXPECT_EQ(CompareHosts(running, {{"a", 2}, {"b", 2}, {"c", 2}}, 0), HostUpdate::kAdded);
  EXPECT_EQ(CompareHosts(running, {{"a", 2}, {"b", 3}}, 0), HostUpdate::kAdded);
  // At max-np already: more hosts change nothing.
  EXPECT_EQ(CompareHosts(running, {{"a", 2}, {"b", 2}, {"c", 2}}, 4), HostUpdate::kSame);
  EXPECT_EQ(CompareHosts(running, {{"a", 2}, {"b", 2}, {"c", 2}}, 5), HostUpdate::kAdded);
  EXPECT_EQ(CompareHosts(running, {{"a", 2}}, 0), HostUpdate::kRemoved);
  EXPECT_EQ(CompareHosts(running, {{"a", 2}, {"b", 1}}, 0), HostUpdate::kRemoved);
  EXPECT_EQ(CompareHosts(running, {{"a", 2}, {"c", 4}}, 0), HostUpdate::kBoth);
  // The incarnation ran on part of a host's slots (max-np): not removed.
  EXPECT_EQ(CompareHosts({{"a", 2}, {"b", 1}}, {{"a", 2}, {"b", 2}}, 3), HostUpdate::kSame);
  EXPECT_EQ(CheckReply(HostUpdate::kSame), "SAME");
  EXPECT_EQ(CheckReply(HostUpdate::kAdded), "UPDATED added");
  EXPECT_EQ(CheckReply(HostUpdate::kRemoved), "UPDATED removed");
  EXPECT_EQ(CheckReply(HostUpdate::kBoth), "UPDATED both");
}

TEST(Compare, GrowthInPlaceOffersTheFreeSlots) {
  const H allocated = {{"a", 2}, {"b", 2}};
  // A rank lost on each host: one slot free on each.
  EXPECT_EQ(GrowthInPlace({{"a", 1}, {"b", 1}}, allocated, 0, allocated, {}, true), "a:1,b:1");
  // A host that discovery added: PRRTE must add it ("+").
  EXPECT_EQ(GrowthInPlace(allocated, {{"a", 2}, {"b", 2}, {"c", 2}}, 0, allocated, {}, true),
            "+c:2");
  // Up to --max-np only, in the pool's order.
  EXPECT_EQ(GrowthInPlace(allocated, {{"a", 2}, {"b", 2}, {"c", 2}}, 5, allocated, {}, true),
            "+c:1");
  EXPECT_EQ(GrowthInPlace(allocated, {{"a", 2}, {"b", 2}, {"c", 2}}, 4, allocated, {}, true), "");
  // Hosts whose new processes did not join are not offered again.
  EXPECT_EQ(GrowthInPlace({{"a", 1}, {"b", 1}}, allocated, 0, allocated, {"b"}, true), "a:1");
  EXPECT_EQ(GrowthInPlace(allocated, allocated, 0, allocated, {}, true), "");
  // A job on this machine alone grows onto another host through a restart only.
  EXPECT_EQ(GrowthInPlace({{"a", 1}}, {{"a", 2}, {"c", 2}}, 0, {{"a", 2}}, {}, false), "a:1");
}

TEST(Decide, WhatFollowsAnIncarnation) {
  const H running = {{"a", 2}, {"b", 2}};
  IncarnationEnd done;
  done.mpirun_ok = true;
  EXPECT_EQ(DecideNext(done, running, 0, -1), NextStep::kFinish);

  IncarnationEnd restart = done;
  restart.restart_requested = true;
  EXPECT_EQ(DecideNext(restart, running, 0, -1), NextStep::kRestart);
  // Horovod counts a change of hosts as a reset too.
  EXPECT_EQ(DecideNext(restart, running, 2, 2), NextStep::kResetLimitReached);
  EXPECT_EQ(DecideNext(restart, running, 1, 2), NextStep::kRestart);

  IncarnationEnd failed;
  failed.failed_hosts = {"b"};
  EXPECT_EQ(DecideNext(failed, running, 0, -1), NextStep::kRestartAfterFailure);
  EXPECT_EQ(DecideNext(failed, running, 0, 1), NextStep::kRestartAfterFailure);
  EXPECT_EQ(DecideNext(failed, running, 1, 1), NextStep::kResetLimitReached);
  EXPECT_EQ(DecideNext(failed, running, 0, 0), NextStep::kResetLimitReached)
      << "--reset-limit 0: no restart at all";
  // A rank failed after rank 0 asked for a restart: a failure all the same.
  IncarnationEnd both = failed;
  both.restart_requested = true;
  EXPECT_EQ(DecideNext(both, running, 0, -1), NextStep::kRestartAfterFailure);

  IncarnationEnd everyone;
  everyone.failed_hosts = {"a", "b"};
  EXPECT_EQ(DecideNext(everyone, running, 0, -1), NextStep::kEveryHostFailed);

  // mpirun failed and no host is known to blame: the ordinary report.
  IncarnationEnd unknown;
  EXPECT_EQ(DecideNext(unknown, running, 0, -1), NextStep::kFinish);
  // kolorun was stopped (a signal, a rank that never started): no restart.
  IncarnationEnd stopped = failed;
  stopped.stopped = true;
  EXPECT_EQ(DecideNext(stopped, running, 0, -1), NextStep::kFinish);
}

TEST(ElasticVerbs, ParseAndFormat) {
  const std::string token = "0123456789abcdef0123456789abcdef";
  Result<ElasticRequest> check = ParseElasticRequest("KOLOE " + token + " CHECK 3", token);
  ASSERT_TRUE(check.ok()) << check.status().ToString();
  EXPECT_EQ(check.value().verb, ElasticRequest::Verb::kCheck);
  EXPECT_EQ(check.value().generation, 3);
  Result<ElasticRequest> restart = ParseElasticRequest("KOLOE " + token + " RESTART 0 7", token);
  ASSERT_TRUE(restart.ok()) << restart.status().ToString();
  EXPECT_EQ(restart.value().verb, ElasticRequest::Verb::kRestart);
  EXPECT_EQ(restart.value().commit, 7);
  Result<ElasticRequest> resumed = ParseElasticRequest("KOLOE " + token + " RESUMED 1 -1 2", token);
  ASSERT_TRUE(resumed.ok()) << resumed.status().ToString();
  EXPECT_EQ(resumed.value().verb, ElasticRequest::Verb::kResumed);
  EXPECT_EQ(resumed.value().generation, 1);
  EXPECT_EQ(resumed.value().commit, -1);
  EXPECT_EQ(resumed.value().size, 2);
  Result<ElasticRequest> shrunk = ParseElasticRequest("KOLOE " + token + " SHRUNK 0 2", token);
  ASSERT_TRUE(shrunk.ok()) << shrunk.status().ToString();
  EXPECT_EQ(shrunk.value().verb, ElasticRequest::Verb::kShrunk);
  EXPECT_EQ(shrunk.value().generation, 0);
  EXPECT_EQ(shrunk.value().size, 2);
  Result<ElasticRequest> grew = ParseElasticRequest("KOLOE " + token + " GREW 1 4 a:1,b:1", token);
  ASSERT_TRUE(grew.ok()) << grew.status().ToString();
  EXPECT_EQ(grew.value().verb, ElasticRequest::Verb::kGrew);
  EXPECT_EQ(grew.value().size, 4);
  EXPECT_EQ(grew.value().slots, "a:1,b:1");
  Result<ElasticRequest> not_joined =
      ParseElasticRequest("KOLOE " + token + " NOTJOINED 1 b:2", token);
  ASSERT_TRUE(not_joined.ok()) << not_joined.status().ToString();
  EXPECT_EQ(not_joined.value().verb, ElasticRequest::Verb::kNotJoined);
  EXPECT_EQ(not_joined.value().slots, "b:2");
  for (const ElasticRequest& r : {check.value(), restart.value(), resumed.value(), shrunk.value(),
                                  grew.value(), not_joined.value()}) {
    std::string line = ElasticRequestMessage(token, r);
    ASSERT_EQ(line.back(), '\n');
    line.pop_back();
    Result<ElasticRequest> again = ParseElasticRequest(line, token);
    ASSERT_TRUE(again.ok()) << line;
    EXPECT_EQ(again.value().verb, r.verb) << line;
    EXPECT_EQ(again.value().generation, r.generation) << line;
    EXPECT_EQ(again.value().commit, r.commit) << line;
    EXPECT_EQ(again.value().size, r.size) << line;
    EXPECT_EQ(again.value().slots, r.slots) << line;
  }
}

TEST(ElasticVerbs, BadRequestsSayWhatIsWrong) {
  const std::string t = "tok";
  ExpectError(ParseElasticRequest("KOLOE bad CHECK 0", t).status(), "wrong job token");
  ExpectError(ParseElasticRequest("KOLOE tok", t).status(), "malformed elastic request");
  ExpectError(ParseElasticRequest("KOLO1 tok CHECK 0", t).status(), "malformed elastic request");
  ExpectError(ParseElasticRequest("KOLOE tok STOP 0", t).status(), "unknown elastic verb 'STOP'");
  ExpectError(ParseElasticRequest("KOLOE tok CHECK 0 1", t).status(),
              "CHECK expects 1 value(s) after the verb");
  ExpectError(ParseElasticRequest("KOLOE tok RESTART 0", t).status(), "RESTART expects 2");
  ExpectError(ParseElasticRequest("KOLOE tok RESUMED 0 1", t).status(), "RESUMED expects 3");
  ExpectError(ParseElasticRequest("KOLOE tok CHECK -1", t).status(), "generation '-1'");
  ExpectError(ParseElasticRequest("KOLOE tok CHECK x", t).status(),
              "generation 'x' is not a number");
  ExpectError(ParseElasticRequest("KOLOE tok RESTART 0 -2", t).status(), "commit '-2'");
  ExpectError(ParseElasticRequest("KOLOE tok RESUMED 0 3 0", t).status(),
              "size must be at least 1");
  ExpectError(ParseElasticRequest("KOLOE tok SHRUNK 0", t).status(), "SHRUNK expects 2");
  ExpectError(ParseElasticRequest("KOLOE tok SHRUNK 0 0", t).status(), "size must be at least 1");
  ExpectError(ParseElasticRequest("KOLOE tok GREW 0 4", t).status(), "GREW expects 3");
  ExpectError(ParseElasticRequest("KOLOE tok NOTJOINED 0", t).status(), "NOTJOINED expects 2");
}

}  // namespace
}  // namespace kolo::launcher
