// What kolorun's monitor knows about the running job: each rank's latest
// counters (runtime/metrics_snapshot.h) and the one before, the job's step
// rate over time, the straggler, the stalls and the job's events; and the
// three ways it is shown: Prometheus' text format (/metrics), JSON
// (/api/v1/state) and the terminal's status line. Pure: values in, text out,
// the clock passed in; the HTTP server (monitor.h) and kolorun's loop hold the
// lock around it.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "metrics_snapshot.h"

namespace kolo::launcher {

class MonitorState {
 public:
  using Clock = std::chrono::steady_clock;

  MonitorState(Clock::time_point start, std::string token);

  // A new job (or elastic incarnation) of `rank_hosts.size()` ranks: forgets
  // the ranks' counters, keeps the history and the events.
  void NewJob(const std::vector<std::string>& rank_hosts, Clock::time_point now);
  // One "KOLOM" line from the rendezvous: the reply for the rank.
  std::string Receive(const std::string& line, Clock::time_point now);
  // Something that happened to the job ("exit", "elastic", ...), shown as it comes.
  void AddEvent(const std::string& kind, const std::string& text, Clock::time_point now);
  // Advances the step-rate history (once a second) and notices ranks that
  // stopped reporting; call it often.
  void Tick(Clock::time_point now);

  std::string Prometheus(Clock::time_point now) const;
  std::string Json(Clock::time_point now) const;
  // "kolorun: 12.5 steps/s | slowest rank 3 (+48 ms/collective) | 1.2 GB/s | 0:42";
  // empty until a rank has reported.
  std::string StatusLine(Clock::time_point now) const;

  // A rank that sent nothing for this long is shown as not reporting.
  static constexpr double kSilentSeconds = 5.0;

 private:
  struct Rank {
    std::string host;  // from the plan; the rank's own name once it reports
    bool seen = false;
    bool silent_noted = false;
    RankSnapshot last, previous;
    Clock::time_point last_at, previous_at;
  };
  // The rates of one rank over its last two snapshots.
  struct Rates {
    double steps = 0, collectives = 0, bytes = 0;
    double wait_ms_per_collective = 0;
    bool known = false;
  };
  struct Straggler {
    int rank = -1;
    double lag_ms = 0;  // how much longer the others wait per collective
    double at = 0;      // seconds since the start when it was last found
  };

  Rates RatesOf(const Rank& r) const;
  // The straggler over the ranks' last two snapshots; `known` false when too
  // few ranks completed collectives to tell (the job idles or is stalled).
  Straggler FindStraggler(bool* known) const;
  bool Reporting(const Rank& r, Clock::time_point now) const;
  double Seconds(Clock::time_point t) const;
  void NoteStalls(const RankSnapshot& s, const RankSnapshot& before, Clock::time_point now);

  Clock::time_point start_;
  std::string token_;
  std::vector<Rank> ranks_;
  struct Event {
    double t;
    std::string kind, text;
  };
  // How often each rank came last to a collective its coordinator decided:
  // (reporting coordinator, rank) -> count (the highest count seen, so that a
  // rank that leaves a coordinator's top list never counts down).
  std::map<std::pair<int, int>, int64_t> last_arrivals_;
  std::map<int, int64_t> LastArrivals() const;     // rank -> count, over coordinators
  std::deque<Event> events_;                       // the latest kMaxEvents
  std::deque<std::pair<double, double>> history_;  // (seconds since start, steps/s)
  Clock::time_point last_tick_;
  // The latest straggler found (Tick): kept while the ranks complete no
  // collectives, so that a stalled job still shows who was slowest before.
  Straggler straggler_;
};

// Escapes `text` for a JSON string (without the quotes).
std::string JsonEscape(const std::string& text);

}  // namespace kolo::launcher
