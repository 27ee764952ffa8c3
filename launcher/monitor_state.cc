#include "monitor_state.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace kolo::launcher {
namespace {

constexpr size_t kMaxEvents = 200;
constexpr size_t kMaxHistory = 600;  // seconds of step rate

std::string Number(double v) {
  if (!std::isfinite(v)) return "0";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

// A Prometheus label value: backslash, quote and newline escaped.
std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string Quoted(const std::string& v) { return "\"" + JsonEscape(v) + "\""; }

std::string Bytes(double b) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

std::string SetLabel(int slot) {
  return slot == kSetSlots - 1 ? std::to_string(slot) + "+" : std::to_string(slot);
}

int64_t Collectives(const MetricsSample& m) {
  int64_t n = 0;
  for (const auto& op : m.ops) {
    for (const auto& c : op) n += c.count;
  }
  return n;
}

int64_t TotalBytes(const MetricsSample& m) {
  int64_t n = 0;
  for (const auto& op : m.ops) {
    for (const auto& c : op) n += c.bytes;
  }
  return n;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += (out.empty() ? "" : ", ") + std::to_string(r);
  return out;
}

}  // namespace

std::string JsonEscape(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        if (c < 0x20 || c == '<' || c == '>' || c == '&') {  // also safe inside <script>
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

MonitorState::MonitorState(Clock::time_point start, std::string token)
    : start_(start), token_(std::move(token)), last_tick_(start) {}

double MonitorState::Seconds(Clock::time_point t) const {
  return std::chrono::duration<double>(t - start_).count();
}

void MonitorState::NewJob(const std::vector<std::string>& rank_hosts, Clock::time_point now) {
  ranks_.assign(rank_hosts.size(), Rank());
  straggler_ = Straggler();
  last_arrivals_.clear();
  std::set<std::string> hosts(rank_hosts.begin(), rank_hosts.end());
  for (size_t r = 0; r < rank_hosts.size(); ++r) ranks_[r].host = rank_hosts[r];
  AddEvent("start",
           "job started: " + std::to_string(rank_hosts.size()) + " rank(s) on " +
               std::to_string(hosts.size()) + " host(s)",
           now);
}

std::string MonitorState::Receive(const std::string& line, Clock::time_point now) {
  Result<RankSnapshot> parsed = ParseSnapshot(line, token_);
  if (!parsed.ok()) return "ERR " + parsed.status().message() + "\n";
  RankSnapshot& s = parsed.value();
  if (s.rank < 0 || s.rank >= static_cast<int>(ranks_.size())) {
    return "ERR rank " + std::to_string(s.rank) + " is not a rank of this job (" +
           std::to_string(ranks_.size()) + " ranks)\n";
  }
  Rank& r = ranks_[s.rank];
  if (!r.seen) {
    AddEvent("rank", "rank " + std::to_string(s.rank) + " reporting from " + s.host, now);
  } else if (r.silent_noted) {
    AddEvent("rank", "rank " + std::to_string(s.rank) + " reporting again", now);
  }
  NoteStalls(s, r.last, now);
  for (const auto& [rank, count] : s.sample.last_arrivals) {
    int64_t& seen = last_arrivals_[{s.rank, rank}];
    seen = std::max(seen, count);
  }
  r.previous = std::move(r.last);
  r.previous_at = r.last_at;
  r.host = s.host;
  r.last = std::move(s);
  r.last_at = now;
  r.seen = true;
  r.silent_noted = false;
  return "OK\n";
}

void MonitorState::NoteStalls(const RankSnapshot& s, const RankSnapshot& before,
                              Clock::time_point now) {
  auto key = [](const StalledTensor& t) { return std::to_string(t.process_set) + "/" + t.name; };
  std::set<std::string> old;
  for (const StalledTensor& t : before.sample.stalled) old.insert(key(t));
  std::set<std::string> current;
  for (const StalledTensor& t : s.sample.stalled) {
    current.insert(key(t));
    if (old.count(key(t))) continue;
    AddEvent("stall",
             "stalled: '" + t.name + "'" + (t.call_site.empty() ? "" : " at " + t.call_site) +
                 ", missing rank(s) " + RankList(t.missing),
             now);
  }
  for (const StalledTensor& t : before.sample.stalled) {
    if (!current.count(key(t))) AddEvent("stall", "no longer stalled: '" + t.name + "'", now);
  }
}

void MonitorState::AddEvent(const std::string& kind, const std::string& text,
                            Clock::time_point now) {
  events_.push_back({Seconds(now), kind, text});
  while (events_.size() > kMaxEvents) events_.pop_front();
}

std::map<int, int64_t> MonitorState::LastArrivals() const {
  std::map<int, int64_t> total;
  for (const auto& [key, count] : last_arrivals_) total[key.second] += count;
  return total;
}

bool MonitorState::Reporting(const Rank& r, Clock::time_point now) const {
  return r.seen && std::chrono::duration<double>(now - r.last_at).count() < kSilentSeconds;
}

MonitorState::Rates MonitorState::RatesOf(const Rank& r) const {
  Rates rates;
  if (r.previous.rank < 0) return rates;
  const double dt = std::chrono::duration<double>(r.last_at - r.previous_at).count();
  if (dt <= 0) return rates;
  const MetricsSample &a = r.previous.sample, &b = r.last.sample;
  const double collectives = static_cast<double>(Collectives(b) - Collectives(a));
  rates.steps = static_cast<double>(b.steps - a.steps) / dt;
  rates.collectives = collectives / dt;
  rates.bytes = static_cast<double>(TotalBytes(b) - TotalBytes(a)) / dt;
  rates.wait_ms_per_collective =
      collectives > 0 ? static_cast<double>(b.wait_us - a.wait_us) / 1000.0 / collectives : 0;
  rates.known = collectives > 0;
  return rates;
}

// The rank the others wait for: it waits least per collective (its tensors
// find the others' ready), by a clear margin. Its lag: the others' median wait
// minus its own.
MonitorState::Straggler MonitorState::FindStraggler(bool* known) const {
  std::vector<std::pair<double, int>> waits;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    Rates rates = RatesOf(ranks_[r]);
    if (rates.known) waits.emplace_back(rates.wait_ms_per_collective, static_cast<int>(r));
  }
  Straggler s;
  *known = waits.size() >= 2;
  if (!*known) return s;
  std::sort(waits.begin(), waits.end());
  const double median = waits[waits.size() / 2].first;
  const double lowest = waits.front().first;
  if (median - lowest >= 1.0 && lowest <= 0.5 * median) {
    s.rank = waits.front().second;
    s.lag_ms = median - lowest;
  }
  return s;
}

void MonitorState::Tick(Clock::time_point now) {
  if (now - last_tick_ < std::chrono::seconds(1)) return;
  last_tick_ = now;
  double steps = 0;
  int counted = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    if (rank.seen && !Reporting(rank, now) && !rank.silent_noted) {
      rank.silent_noted = true;
      AddEvent("rank", "rank " + std::to_string(r) + " on " + rank.host + " stopped reporting",
               now);
    }
    if (!Reporting(rank, now)) continue;
    Rates rates = RatesOf(rank);
    if (rates.known || rates.steps > 0) {
      steps += rates.steps;
      ++counted;
    }
  }
  if (counted > 0) {
    history_.emplace_back(Seconds(now), steps / counted);
    while (history_.size() > kMaxHistory) history_.pop_front();
  }
  bool known = false;
  Straggler s = FindStraggler(&known);
  if (!known) return;  // idle or stalled: the last one found stays
  if (s.rank >= 0 && s.rank != straggler_.rank) {
    AddEvent("straggler",
             "rank " + std::to_string(s.rank) + " is the slowest: the others wait " +
                 Number(std::round(s.lag_ms * 10) / 10) + " ms per collective for it",
             now);
  }
  s.at = Seconds(now);
  straggler_ = s;
}

std::string MonitorState::Prometheus(Clock::time_point now) const {
  std::string out;
  auto family = [&out](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  auto rank_labels = [this](size_t r) {
    return "rank=\"" + std::to_string(r) + "\",host=\"" + Label(ranks_[r].host) + "\"";
  };
  family("kolo_ranks", "gauge", "Ranks of the running job.");
  out += "kolo_ranks " + std::to_string(ranks_.size()) + "\n";
  family("kolo_rank_up", "gauge", "1 while the rank reports its counters (every second).");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    out += "kolo_rank_up{" + rank_labels(r) + "} " + (Reporting(ranks_[r], now) ? "1" : "0") + "\n";
  }
  family("kolo_collectives_total", "counter",
         "Collectives completed, per rank, operation and process set (3+: sets 3 and higher).");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const MetricsSample& m = ranks_[r].last.sample;
    for (int o = 0; o < kCountedOps; ++o) {
      for (int k = 0; k < kSetSlots; ++k) {
        if (m.ops[o][k].count == 0) continue;
        out += "kolo_collectives_total{" + rank_labels(r) + ",op=\"" + CountedOpName(o) +
               "\",process_set=\"" + SetLabel(k) + "\"} " + std::to_string(m.ops[o][k].count) +
               "\n";
      }
    }
  }
  family("kolo_collective_bytes_total", "counter",
         "Bytes of this rank's input to the collectives, per operation and process set.");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const MetricsSample& m = ranks_[r].last.sample;
    for (int o = 0; o < kCountedOps; ++o) {
      for (int k = 0; k < kSetSlots; ++k) {
        if (m.ops[o][k].count == 0) continue;
        out += "kolo_collective_bytes_total{" + rank_labels(r) + ",op=\"" + CountedOpName(o) +
               "\",process_set=\"" + SetLabel(k) + "\"} " + std::to_string(m.ops[o][k].bytes) +
               "\n";
      }
    }
  }
  struct TimeCounter {
    const char* name;
    const char* help;
    int64_t MetricsSample::*field;
  };
  const TimeCounter seconds[] = {
      {"kolo_negotiation_seconds_total", "Time in negotiation rounds.",
       &MetricsSample::negotiate_us},
      {"kolo_data_movement_seconds_total", "Time moving the collectives' data.",
       &MetricsSample::move_us},
      {"kolo_wait_seconds_total",
       "Time tensors waited from their submission until every rank had submitted them, summed "
       "over tensors.",
       &MetricsSample::wait_us}};
  for (const TimeCounter& s : seconds) {
    family(s.name, "counter", s.help);
    for (size_t r = 0; r < ranks_.size(); ++r) {
      out += std::string(s.name) + "{" + rank_labels(r) + "} " +
             Number(static_cast<double>(ranks_[r].last.sample.*s.field) / 1e6) + "\n";
    }
  }
  family("kolo_last_arrivals_total", "counter",
         "Collectives decided by a coordinator that this rank reached last, its ranks having "
         "come in different negotiation rounds.");
  for (const auto& [rank, count] : LastArrivals()) {
    if (rank < 0 || rank >= static_cast<int>(ranks_.size())) continue;
    out += "kolo_last_arrivals_total{" + rank_labels(rank) + "} " + std::to_string(count) + "\n";
  }
  family("kolo_steps_total", "counter", "Training steps the binding counted (optimizer steps).");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    out += "kolo_steps_total{" + rank_labels(r) + "} " +
           std::to_string(ranks_[r].last.sample.steps) + "\n";
  }
  const Straggler& straggler = straggler_;
  family("kolo_straggler_lag_seconds", "gauge",
         "How much longer the other ranks wait per collective than the slowest rank; only the "
         "slowest rank has this series.");
  if (straggler.rank >= 0) {
    out += "kolo_straggler_lag_seconds{" + rank_labels(straggler.rank) + "} " +
           Number(straggler.lag_ms / 1000) + "\n";
  }
  family("kolo_stalled_tensor_seconds", "gauge",
         "Tensors some ranks submitted and others have not, past the stall check time.");
  for (size_t r = 0; r < ranks_.size(); ++r) {
    for (const StalledTensor& t : ranks_[r].last.sample.stalled) {
      out += "kolo_stalled_tensor_seconds{process_set=\"" + std::to_string(t.process_set) +
             "\",tensor=\"" + Label(t.name) + "\",call_site=\"" + Label(t.call_site) +
             "\",missing_ranks=\"" + Label(RankList(t.missing)) + "\"} " + Number(t.seconds) + "\n";
    }
  }
  return out;
}

std::string MonitorState::Json(Clock::time_point now) const {
  const Straggler& straggler = straggler_;
  const std::map<int, int64_t> last_arrivals = LastArrivals();
  std::string ranks, stalls;
  struct HostView {
    std::vector<int> ranks;
    double steps = 0, bytes = 0;
    int reporting = 0;
  };
  std::map<std::string, HostView> hosts;
  double job_steps = 0, job_bytes = 0;
  int with_rates = 0;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const Rank& rank = ranks_[r];
    const MetricsSample& m = rank.last.sample;
    const Rates rates = RatesOf(rank);
    const bool up = Reporting(rank, now);
    if (up && rates.known) {
      job_steps += rates.steps;
      job_bytes += rates.bytes;
      ++with_rates;
    }
    HostView& h = hosts[rank.host];
    h.ranks.push_back(static_cast<int>(r));
    h.reporting += up ? 1 : 0;
    if (up) {
      h.steps += rates.steps;
      h.bytes += rates.bytes;
    }
    std::string collectives;
    for (int o = 0; o < kCountedOps; ++o) {
      for (int k = 0; k < kSetSlots; ++k) {
        if (m.ops[o][k].count == 0) continue;
        collectives += std::string(collectives.empty() ? "" : ",") + "{\"op\":\"" +
                       CountedOpName(o) + "\",\"process_set\":\"" + SetLabel(k) +
                       "\",\"count\":" + std::to_string(m.ops[o][k].count) +
                       ",\"bytes\":" + std::to_string(m.ops[o][k].bytes) + "}";
      }
    }
    ranks +=
        std::string(ranks.empty() ? "" : ",") + "{\"rank\":" + std::to_string(r) +
        ",\"host\":" + Quoted(rank.host) + ",\"reporting\":" + (up ? "true" : "false") +
        ",\"last_report_seconds_ago\":" +
        (rank.seen ? Number(std::chrono::duration<double>(now - rank.last_at).count()) : "null") +
        ",\"steps\":" + std::to_string(m.steps) + ",\"steps_per_second\":" + Number(rates.steps) +
        ",\"collectives_per_second\":" + Number(rates.collectives) +
        ",\"bytes_per_second\":" + Number(rates.bytes) +
        ",\"wait_ms_per_collective\":" + Number(rates.wait_ms_per_collective) +
        ",\"negotiation_seconds\":" + Number(static_cast<double>(m.negotiate_us) / 1e6) +
        ",\"data_movement_seconds\":" + Number(static_cast<double>(m.move_us) / 1e6) +
        ",\"wait_seconds\":" + Number(static_cast<double>(m.wait_us) / 1e6) +
        ",\"last_arrivals\":" +
        std::to_string(
            last_arrivals.count(static_cast<int>(r)) ? last_arrivals.at(static_cast<int>(r)) : 0) +
        ",\"straggler\":" + (straggler.rank == static_cast<int>(r) ? "true" : "false") +
        ",\"collectives\":[" + collectives + "]}";
    for (const StalledTensor& t : m.stalled) {
      std::string missing;
      for (int x : t.missing) missing += (missing.empty() ? "" : ",") + std::to_string(x);
      stalls += std::string(stalls.empty() ? "" : ",") + "{\"reported_by\":" + std::to_string(r) +
                ",\"process_set\":" + std::to_string(t.process_set) +
                ",\"tensor\":" + Quoted(t.name) + ",\"call_site\":" + Quoted(t.call_site) +
                ",\"missing_ranks\":[" + missing + "],\"seconds\":" + Number(t.seconds) + "}";
    }
  }
  std::string host_list;
  for (const auto& [name, h] : hosts) {
    std::string list;
    for (int r : h.ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
    host_list += std::string(host_list.empty() ? "" : ",") + "{\"host\":" + Quoted(name) +
                 ",\"ranks\":[" + list + "],\"reporting\":" + std::to_string(h.reporting) +
                 ",\"steps_per_second\":" + Number(h.steps / std::max<size_t>(1, h.ranks.size())) +
                 ",\"bytes_per_second\":" + Number(h.bytes) + "}";
  }
  std::string history;
  for (const auto& [t, rate] : history_) {
    history += (history.empty() ? "[" : ",[") + Number(t) + "," + Number(rate) + "]";
  }
  std::string events;
  for (const Event& e : events_) {
    events += std::string(events.empty() ? "" : ",") + "{\"seconds\":" + Number(e.t) +
              ",\"kind\":" + Quoted(e.kind) + ",\"text\":" + Quoted(e.text) + "}";
  }
  std::string straggler_json = "null";
  if (straggler.rank >= 0) {
    straggler_json = "{\"rank\":" + std::to_string(straggler.rank) +
                     ",\"host\":" + Quoted(ranks_[straggler.rank].host) +
                     ",\"lag_ms_per_collective\":" + Number(straggler.lag_ms) +
                     ",\"found_at_seconds\":" + Number(straggler.at) + "}";
  }
  return "{\"schema\":\"kolo.monitor.v1\",\"elapsed_seconds\":" + Number(Seconds(now)) +
         ",\"np\":" + std::to_string(ranks_.size()) +
         ",\"job\":{\"steps_per_second\":" + Number(with_rates ? job_steps / with_rates : 0) +
         ",\"bytes_per_second\":" + Number(job_bytes) + "},\"straggler\":" + straggler_json +
         ",\"ranks\":[" + ranks + "],\"hosts\":[" + host_list + "],\"stalls\":[" + stalls +
         "],\"step_rate_history\":[" + history + "],\"events\":[" + events + "]}";
}

std::string MonitorState::StatusLine(Clock::time_point now) const {
  double steps = 0, bytes = 0;
  int counted = 0, up = 0;
  size_t stalled = 0;
  for (const Rank& r : ranks_) {
    if (!Reporting(r, now)) continue;
    ++up;
    stalled += r.last.sample.stalled.size();
    Rates rates = RatesOf(r);
    if (!rates.known && rates.steps == 0) continue;
    steps += rates.steps;
    bytes += rates.bytes;
    ++counted;
  }
  if (up == 0) return "";
  const int elapsed = static_cast<int>(Seconds(now));
  char clock[32];
  std::snprintf(clock, sizeof clock, "%d:%02d:%02d", elapsed / 3600, elapsed / 60 % 60,
                elapsed % 60);
  std::string line = "kolorun: " + Number(std::round((counted ? steps / counted : 0) * 10) / 10) +
                     " steps/s | " + Bytes(bytes) + "/s | ";
  const Straggler& s = straggler_;
  if (s.rank >= 0) {
    line += "slowest rank " + std::to_string(s.rank) + " (+" +
            Number(std::round(s.lag_ms * 10) / 10) + " ms/collective) | ";
  }
  if (stalled > 0) line += std::to_string(stalled) + " stalled | ";
  if (up < static_cast<int>(ranks_.size())) {
    line += std::to_string(up) + "/" + std::to_string(ranks_.size()) + " ranks reporting | ";
  }
  return line + clock;
}

}  // namespace kolo::launcher
