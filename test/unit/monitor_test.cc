// kolorun's monitor as pure logic: snapshots in, Prometheus text, JSON and the
// status line out, on an injected clock.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <mutex>

#include "monitor.h"
#include "monitor_state.h"
#include "progress_line.h"
#include "rendezvous.h"

namespace kolo::launcher {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A line from rank `rank` with these cumulative counts.
std::string Line(int rank, int64_t steps, int64_t collectives, int64_t wait_us,
                 const std::string& token = "tok") {
  RankSnapshot s;
  s.rank = rank;
  s.host = rank < 2 ? "a" : "b";
  s.sample.steps = steps;
  s.sample.ops[0][0] = {collectives, collectives * 1000};
  s.sample.wait_us = wait_us;
  std::string line = EncodeSnapshot(token, s);
  return line.substr(0, line.size() - 1);
}

class MonitorStateTest : public ::testing::Test {
 protected:
  // Four ranks for `periods` seconds: rank 3 arrives late, so the others each
  // wait 20 ms per collective and it waits 1 ms.
  void Train(int periods) {
    for (int p = 0; p < periods; ++p) {
      now += seconds(1);
      ++period;
      for (int r = 0; r < 4; ++r) {
        const int64_t wait_per = r == 3 ? 1000 : 20000;
        EXPECT_EQ(state.Receive(Line(r, 10 * period, 30 * period, wait_per * 30 * period), now),
                  "OK\n");
      }
      state.Tick(now);
    }
  }
  Clock::time_point t0 = Clock::now(), now = t0;
  int period = 0;
  MonitorState state{t0, "tok"};
};

TEST_F(MonitorStateTest, FindsTheStragglerAndTheRates) {
  state.NewJob({"a", "a", "b", "b"}, now);
  Train(3);
  const std::string json = state.Json(now);
  EXPECT_NE(json.find("\"straggler\":{\"rank\":3,\"host\":\"b\",\"lag_ms_per_collective\":19"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("\"steps_per_second\":10,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"bytes_per_second\":30000,"), std::string::npos) << json;
  EXPECT_NE(json.find("rank 3 is the slowest"), std::string::npos) << json;
  const std::string line = state.StatusLine(now);
  EXPECT_EQ(
      line.rfind("kolorun: 10 steps/s | 120.0 kB/s | slowest rank 3 (+19 ms/collective) | ", 0), 0u)
      << line;
  EXPECT_NE(line.find("0:00:03"), std::string::npos) << line;
}

TEST_F(MonitorStateTest, NoStragglerWhenRanksWaitAlike) {
  state.NewJob({"a", "a"}, now);
  for (int p = 1; p <= 3; ++p) {
    now += seconds(1);
    for (int r = 0; r < 2; ++r) state.Receive(Line(r, p, 10 * p, 5000 * 10 * p), now);
    state.Tick(now);
  }
  EXPECT_NE(state.Json(now).find("\"straggler\":null"), std::string::npos);
  EXPECT_EQ(state.StatusLine(now).find("slowest"), std::string::npos);
}

TEST_F(MonitorStateTest, TheLastStragglerStaysWhileNothingCompletes) {
  state.NewJob({"a", "a", "b", "b"}, now);
  Train(3);
  // Stalled: the counts stop moving.
  for (int p = 0; p < 3; ++p) {
    now += seconds(1);
    for (int r = 0; r < 4; ++r) state.Receive(Line(r, 30, 90, r == 3 ? 90000 : 1800000), now);
    state.Tick(now);
  }
  EXPECT_NE(state.Json(now).find("\"straggler\":{\"rank\":3"), std::string::npos);
}

TEST_F(MonitorStateTest, PrometheusTextNamesRanksOpsAndSets) {
  state.NewJob({"a", "a", "b", "b"}, now);
  Train(2);
  const std::string text = state.Prometheus(now);
  for (const char* want :
       {"# TYPE kolo_collectives_total counter\n",
        "kolo_collectives_total{rank=\"3\",host=\"b\",op=\"allreduce\",process_set=\"0\"} 60\n",
        "kolo_collective_bytes_total{rank=\"0\",host=\"a\",op=\"allreduce\",process_set=\"0\"} "
        "60000\n",
        "kolo_steps_total{rank=\"1\",host=\"a\"} 20\n", "kolo_rank_up{rank=\"2\",host=\"b\"} 1\n",
        "kolo_wait_seconds_total{rank=\"3\",host=\"b\"} 0.06\n",
        "kolo_straggler_lag_seconds{rank=\"3\",host=\"b\"} 0.019\n", "kolo_ranks 4\n"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
}

TEST_F(MonitorStateTest, SilentRanksAreShownAndNamedOnce) {
  state.NewJob({"a", "a"}, now);
  state.Receive(Line(0, 1, 1, 0), now);
  state.Receive(Line(1, 1, 1, 0), now);
  for (int i = 0; i < 7; ++i) {
    now += seconds(1);
    state.Receive(Line(0, 2 + i, 2 + i, 0), now);
    state.Tick(now);
  }
  const std::string json = state.Json(now);
  EXPECT_NE(json.find("rank 1 on a stopped reporting"), std::string::npos) << json;
  EXPECT_EQ(json.find("stopped reporting"), json.rfind("stopped reporting")) << "named once";
  EXPECT_NE(state.Prometheus(now).find("kolo_rank_up{rank=\"1\",host=\"a\"} 0"), std::string::npos);
  EXPECT_NE(state.StatusLine(now).find("1/2 ranks reporting"), std::string::npos);
}

TEST_F(MonitorStateTest, StallsComeAndGoAsEvents) {
  state.NewJob({"a", "a"}, now);
  RankSnapshot s;
  s.rank = 0;
  s.host = "a";
  s.sample.stalled.push_back({0, "grad.w", "train.py:57 in step", {1}, 2.0});
  std::string line = EncodeSnapshot("tok", s);
  EXPECT_EQ(state.Receive(line.substr(0, line.size() - 1), now), "OK\n");
  std::string json = state.Json(now);
  EXPECT_NE(json.find("\"stalls\":[{\"reported_by\":0,\"process_set\":0,\"tensor\":\"grad.w\","
                      "\"call_site\":\"train.py:57 in step\",\"missing_ranks\":[1],\"seconds\":2}"),
            std::string::npos)
      << json;
  EXPECT_NE(json.find("stalled: 'grad.w' at train.py:57 in step, missing rank(s) 1"),
            std::string::npos);
  EXPECT_NE(state.Prometheus(now).find("kolo_stalled_tensor_seconds{process_set=\"0\",tensor="
                                       "\"grad.w\",call_site=\"train.py:57 in step\","
                                       "missing_ranks=\"1\"} 2\n"),
            std::string::npos);
  s.sample.stalled.clear();
  line = EncodeSnapshot("tok", s);
  state.Receive(line.substr(0, line.size() - 1), now);
  EXPECT_NE(state.Json(now).find("no longer stalled: 'grad.w'"), std::string::npos);
}

TEST_F(MonitorStateTest, LastArrivalsAddUpOverCoordinatorsAndNeverCountDown) {
  state.NewJob({"a", "a", "b"}, now);
  auto send = [&](int from, std::vector<std::pair<int, int64_t>> last) {
    RankSnapshot s;
    s.rank = from;
    s.host = "a";
    s.sample.last_arrivals = std::move(last);
    std::string line = EncodeSnapshot("tok", s);
    EXPECT_EQ(state.Receive(line.substr(0, line.size() - 1), now), "OK\n");
  };
  send(0, {{2, 5}, {1, 1}});
  send(1, {{2, 3}});  // the coordinator of another set
  send(0, {{2, 6}});  // rank 1 left rank 0's list: its count stays
  const std::string text = state.Prometheus(now);
  EXPECT_NE(text.find("kolo_last_arrivals_total{rank=\"2\",host=\"b\"} 9\n"), std::string::npos)
      << text;
  EXPECT_NE(text.find("kolo_last_arrivals_total{rank=\"1\",host=\"a\"} 1\n"), std::string::npos)
      << text;
  EXPECT_NE(state.Json(now).find("\"rank\":2,\"host\":\"b\""), std::string::npos);
  EXPECT_NE(state.Json(now).find("\"last_arrivals\":9,"), std::string::npos);
}

TEST_F(MonitorStateTest, RefusesAWrongTokenAndRanksOutsideTheJob) {
  state.NewJob({"a", "a"}, now);
  EXPECT_EQ(state.Receive(Line(0, 1, 1, 0, "guess"), now), "ERR wrong job token\n");
  EXPECT_EQ(state.Receive(Line(2, 1, 1, 0), now).rfind("ERR rank 2 is not a rank of this job", 0),
            0u);
  EXPECT_EQ(state.Receive("KOLOM tok 0 a n=x", now).rfind("ERR ", 0), 0u);
  EXPECT_EQ(state.StatusLine(now), "") << "nothing to show before a rank reports";
}

TEST_F(MonitorStateTest, JsonAndLabelsEscapeWhatTheyCarry) {
  state.NewJob({"a\"b<\\/script>", "x"}, now);
  const std::string json = state.Json(now);
  EXPECT_NE(json.find("\"host\":\"a\\\"b\\u003c\\\\/script\\u003e\""), std::string::npos) << json;
  EXPECT_EQ(json.find("</script>"), std::string::npos) << "safe inside the page's <script>";
  EXPECT_NE(state.Prometheus(now).find("host=\"a\\\"b<\\\\/script>\""), std::string::npos);
}

// The state of 1,024 ranks renders in a fraction of the once-a-second budget.
TEST_F(MonitorStateTest, ThousandRanksRender) {
  std::vector<std::string> hosts;
  for (int r = 0; r < 1024; ++r) hosts.push_back("node" + std::to_string(r / 8));
  state.NewJob(hosts, now);
  for (int p = 1; p <= 2; ++p) {
    now += seconds(1);
    for (int r = 0; r < 1024; ++r) {
      RankSnapshot s;
      s.rank = r;
      s.host = hosts[r];
      s.sample.steps = p;
      s.sample.ops[0][0] = {p * 50, p * 5000000};
      s.sample.ops[2][1] = {p, p * 100};
      s.sample.wait_us = p * 50 * (r == 700 ? 100 : 10000);
      std::string line = EncodeSnapshot("tok", s);
      ASSERT_EQ(state.Receive(line.substr(0, line.size() - 1), now), "OK\n");
    }
    state.Tick(now);
  }
  const auto start = Clock::now();
  const std::string json = state.Json(now);
  const std::string text = state.Prometheus(now);
  const std::string page = RenderPage(json);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  // The time is the machine's, so it is printed, not asserted (docs/monitoring.md).
  std::printf("JSON, Prometheus text and page for 1,024 ranks: %.1f ms\n", ms);
  EXPECT_NE(json.find("\"straggler\":{\"rank\":700"), std::string::npos);
  EXPECT_LT(json.size(), 1u << 20);
  EXPECT_NE(page.find("var initial = {\"schema\""), std::string::npos);
}

// The rendezvous hands the ranks' counters to the monitor's sink and tells it
// of the elastic verbs as they come; without a sink, counters are refused.
TEST(RendezvousForTheMonitor, CountersAndElasticEventsReachTheirSinks) {
  RendezvousServer server("tok", 2);
  Result<int> port = server.Start("127.0.0.1");
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  RankSnapshot s;
  s.rank = 1;
  s.host = "a";
  s.sample.steps = 3;
  const std::string line = EncodeSnapshot("tok", s);
  Status refused = Register("127.0.0.1", port.value(), line, 5);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("monitor is off"), std::string::npos) << refused.message();

  MonitorState state(Clock::now(), "tok");
  state.NewJob({"a", "a"}, Clock::now());
  std::mutex mu;
  std::vector<std::string> elastic;
  server.SetMonitorSink([&](const std::string& l) {
    std::lock_guard<std::mutex> lock(mu);
    return state.Receive(l, Clock::now());
  });
  server.SetElasticEventSink([&](const ElasticEvent& e) {
    std::lock_guard<std::mutex> lock(mu);
    elastic.push_back(std::to_string(static_cast<int>(e.request.verb)) + " " +
                      std::to_string(e.request.generation));
  });
  EXPECT_TRUE(Register("127.0.0.1", port.value(), line, 5).ok());
  server.NewIncarnation(0, 2);
  ElasticRequest restart;
  restart.verb = ElasticRequest::Verb::kRestart;
  restart.generation = 0;
  EXPECT_TRUE(Register("127.0.0.1", port.value(), ElasticRequestMessage("tok", restart), 5).ok());
  ElasticRequest check;
  check.verb = ElasticRequest::Verb::kCheck;
  EXPECT_TRUE(Register("127.0.0.1", port.value(), ElasticRequestMessage("tok", check), 5).ok());
  server.Stop();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_NE(state.Json(Clock::now()).find("\"steps\":3"), std::string::npos);
  EXPECT_EQ(elastic, std::vector<std::string>{"1 0"}) << "RESTART only: CHECK is no event";
  EXPECT_EQ(server.TakeElasticEvents().size(), 1u) << "still handed to the elastic loop";
}

TEST(ProgressLineTest, FitsTheTerminal) {
  EXPECT_EQ(FitToWidth("abcdef", 80), "abcdef");
  EXPECT_EQ(FitToWidth("abcdef", 4), "abc") << "the last column stays empty";
  EXPECT_EQ(FitToWidth("abcdef", 0), "");
}

TEST(MonitorAddressTest, LoopbackIsTellable) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.2"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackAddress("10.1.2.3"));
  EXPECT_FALSE(IsLoopbackAddress("not an address"));
}

TEST(MonitorServerTest, ABadAddressIsRefusedWithItsName) {
  Monitor m("tok", "viewer");
  Result<std::string> r = m.Start({"not-an-ip", 0});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--monitor-address 'not-an-ip'"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace kolo::launcher
