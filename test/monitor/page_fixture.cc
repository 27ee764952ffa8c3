// Writes the monitor's page as kolorun serves it for a job of N ranks (argv[2],
// default 1024) on N/8 hosts, two snapshots a second apart, rank N*2/3 slowed
// and one tensor stalled, to argv[1]: the page a browser is timed on
// (test_monitor.py).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "monitor.h"
#include "monitor_state.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PAGE.html [RANKS]\n", argv[0]);
    return 2;
  }
  const int n = argc > 2 ? std::atoi(argv[2]) : 1024;
  using kolo::launcher::MonitorState;
  const auto t0 = MonitorState::Clock::now();
  MonitorState state(t0, "tok");
  std::vector<std::string> hosts;
  for (int r = 0; r < n; ++r) hosts.push_back("node" + std::to_string(r / 8));
  state.NewJob(hosts, t0);
  auto now = t0;
  for (int p = 1; p <= 3; ++p) {
    now += std::chrono::seconds(1);
    for (int r = 0; r < n; ++r) {
      kolo::RankSnapshot s;
      s.rank = r;
      s.host = hosts[r];
      s.sample.steps = 10 * p;
      s.sample.ops[0][0] = {p * 500, p * 100000000LL};
      s.sample.wait_us = p * 500 * (r == n * 2 / 3 ? 100 : 20000);
      if (r == 0 && p == 3)
        s.sample.stalled.push_back({0, "grad.fc", "train.py:88 in step", {5}, 3});
      std::string line = kolo::EncodeSnapshot("tok", s);
      std::string reply = state.Receive(line.substr(0, line.size() - 1), now);
      if (reply != "OK\n") {
        std::fprintf(stderr, "rank %d: %s", r, reply.c_str());
        return 1;
      }
    }
    state.Tick(now);
  }
  std::ofstream(argv[1]) << kolo::launcher::RenderPage(state.Json(now));
  return 0;
}
