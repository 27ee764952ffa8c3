#include "autotune.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "fusion_planner.h"
#include "kolo/env_names.h"
#include "logging.h"

namespace kolo {
namespace {

double Seconds(SampleMeter::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool IsData(OpType op) {
  return op == OpType::kAllreduce || op == OpType::kAllgather || op == OpType::kBroadcast ||
         op == OpType::kAlltoall || op == OpType::kReducescatter;
}

// "64 MiB", "512 KiB", "1000 bytes".
std::string Size(int64_t bytes) {
  if (bytes > 0 && bytes % (1 << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes > 0 && bytes % (1 << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " bytes";
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The values sorted, without repeats.
template <typename T>
std::vector<T> Sorted(std::vector<T> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

std::vector<double> Doubles(const std::vector<int64_t>& v) {
  return std::vector<double>(v.begin(), v.end());
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// The settings autotune writes, in the order of the file.
const char* const kTunedNames[] = {env::kFusionThreshold, env::kCycleTime, env::kPieceSize};

}  // namespace

TunedParams TunedParams::From(const Config& config) {
  return {config.fusion_threshold_bytes, config.cycle_time_ms, config.piece_bytes};
}

std::string TunedParams::ToString() const {
  std::ostringstream os;
  os << "fusion threshold " << Size(fusion_threshold_bytes) << ", cycle time " << cycle_time_ms
     << " ms, piece size " << Size(piece_bytes);
  return os.str();
}

bool operator==(const TunedParams& a, const TunedParams& b) {
  return a.fusion_threshold_bytes == b.fusion_threshold_bytes &&
         a.cycle_time_ms == b.cycle_time_ms && a.piece_bytes == b.piece_bytes;
}

void SampleMeter::Start(Clock::time_point now) {
  start_ = now;
  bytes_ = 0;
  seen_.clear();
}

std::optional<double> SampleMeter::Cycle(Clock::time_point now,
                                         const std::vector<Response>& responses) {
  int64_t cycle_bytes = 0;
  for (const Response& r : responses) {
    if (!IsData(r.op)) continue;
    cycle_bytes += FusionPlanner::Bytes(r);
    for (const std::string& name : r.names) {
      auto [it, first] = seen_.try_emplace(name);
      FirstRun& f = it->second;
      if (first) {
        f.at = now;
        f.bytes_before = bytes_;
      }
      // Between a tensor's first run and its (steps + 1)-th lie `steps` whole
      // periods of the training loop, whatever else it does.
      const double span = Seconds(now - f.at);
      if (++f.runs > steps_ && span >= kMinSeconds && bytes_ > f.bytes_before) {
        return static_cast<double>(bytes_ - f.bytes_before) / span;
      }
    }
  }
  const double since_start = Seconds(now - start_);
  if (since_start >= kMaxSeconds && bytes_ > 0) return static_cast<double>(bytes_) / since_start;
  bytes_ += cycle_bytes;
  return std::nullopt;
}

AutotuneSearch AutotuneSearch::Around(const TunedParams& initial, bool hold_fusion, bool hold_cycle,
                                      bool hold_piece) {
  AutotuneSearch s;
  s.fusion_thresholds = {initial.fusion_threshold_bytes};
  if (!hold_fusion) {
    // Only tensors below KOLO_IN_PLACE_THRESHOLD are fused: the threshold
    // bounds how many of them share one call.
    for (int64_t mib : {1, 4, 16, 64}) s.fusion_thresholds.push_back(mib << 20);
  }
  s.cycle_times_ms = {initial.cycle_time_ms};
  if (!hold_cycle) {
    for (double ms : {0.1, 0.25, 0.5, 1.0, 2.0}) s.cycle_times_ms.push_back(ms);
  }
  s.piece_sizes = {initial.piece_bytes};
  // 0 (one call per buffer) is the user's choice, and the shared-memory slots
  // hold at most initial.piece_bytes: only smaller pieces are tried.
  if (!hold_piece && initial.piece_bytes > 0) {
    for (int64_t part : {2, 4}) {
      const int64_t piece = initial.piece_bytes / part / 64 * 64;
      if (piece >= (64 << 10)) s.piece_sizes.push_back(piece);
    }
  }
  s.fusion_thresholds = Sorted(s.fusion_thresholds);
  s.cycle_times_ms = Sorted(s.cycle_times_ms);
  s.piece_sizes = Sorted(s.piece_sizes);
  return s;
}

int64_t AutotuneSearch::TotalSamples() const {
  int64_t total = warmup_samples;
  for (size_t n : {fusion_thresholds.size(), cycle_times_ms.size(), piece_sizes.size()}) {
    if (n > 1) total += static_cast<int64_t>(n) * std::max<int64_t>(samples_per_value, 1);
  }
  return total;
}

Autotuner::Autotuner(const TunedParams& initial, AutotuneSearch search)
    : search_(std::move(search)), current_(initial), warmup_left_(search_.warmup_samples) {
  search_.samples_per_value = std::max<int64_t>(search_.samples_per_value, 1);
  auto add = [this](const char* name, std::vector<double> values, double now,
                    void (*apply)(TunedParams*, double)) {
    values = Sorted(values);
    if (values.size() < 2) return;
    size_t incumbent = std::find(values.begin(), values.end(), now) - values.begin();
    if (incumbent == values.size()) {  // the setting's value is always a candidate
      values.push_back(now);
    }
    coordinates_.push_back({name, values, incumbent, apply});
  };
  add("fusion_threshold", Doubles(search_.fusion_thresholds),
      static_cast<double>(initial.fusion_threshold_bytes),
      [](TunedParams* p, double v) { p->fusion_threshold_bytes = static_cast<int64_t>(v); });
  add("cycle_time", search_.cycle_times_ms, initial.cycle_time_ms,
      [](TunedParams* p, double v) { p->cycle_time_ms = v; });
  add("piece_size", Doubles(search_.piece_sizes), static_cast<double>(initial.piece_bytes),
      [](TunedParams* p, double v) { p->piece_bytes = static_cast<int64_t>(v); });
  done_ = coordinates_.empty();
  if (!done_) Begin(0);
}

const char* Autotuner::phase() const {
  if (done_) return "done";
  if (warmup_left_ > 0) return "warmup";
  return coordinates_[coordinate_].name;
}

void Autotuner::Begin(size_t coordinate) {
  coordinate_ = coordinate;
  trial_ = 0;
  scores_.assign(coordinates_[coordinate].values.size(), {});
}

bool Autotuner::Record(double score) {
  if (done_) return false;
  ++samples_;
  if (warmup_left_ > 0) {
    --warmup_left_;
    return false;
  }
  const TunedParams before = current_;
  const Coordinate& c = coordinates_[coordinate_];
  const int64_t m = static_cast<int64_t>(c.values.size());
  // The values take turns, starting with the incumbent.
  scores_[(c.incumbent + trial_) % m].push_back(score);
  if (++trial_ < m * search_.samples_per_value) {
    c.apply(&current_, c.values[(c.incumbent + trial_) % m]);
  } else {
    Decide();
  }
  return current_ != before;
}

void Autotuner::Decide() {
  const Coordinate& c = coordinates_[coordinate_];
  const std::vector<double>& held = scores_[c.incumbent];  // one sample per round
  std::vector<double> medians;
  for (const std::vector<double>& s : scores_) medians.push_back(Median(s));
  size_t best = c.incumbent;
  for (size_t v = 0; v < scores_.size(); ++v) {
    size_t won = 0;
    for (size_t round = 0; round < held.size(); ++round) won += scores_[v][round] > held[round];
    if (won * 5 >= held.size() * 4 && medians[v] > medians[c.incumbent] * (1 + search_.margin) &&
        medians[v] > medians[best]) {
      best = v;
    }
  }
  c.apply(&current_, c.values[best]);
  best_score_ = medians[best];
  if (coordinate_ == 0) initial_score_ = medians[c.incumbent];
  if (coordinate_ + 1 == coordinates_.size()) {
    done_ = true;
  } else {
    Begin(coordinate_ + 1);
  }
}

TuningRun::TuningRun(const TunedParams& initial, AutotuneSearch search, int64_t steps_per_sample,
                     const std::string& log_path, std::string result_path, int ranks)
    : search_(initial, std::move(search)),
      meter_(steps_per_sample),
      result_path_(std::move(result_path)),
      ranks_(ranks) {
  if (log_path.empty()) return;
  log_.open(log_path, std::ios::out | std::ios::trunc);
  if (!log_) {
    KOLO_LOG(kWarning) << "autotune: cannot write KOLO_AUTOTUNE_LOG '" << log_path << "' ("
                       << std::strerror(errno) << "); tuning goes on without the log";
    return;
  }
  log_ << "sample,phase,fusion_threshold_bytes,cycle_time_ms,piece_bytes,score_mb_per_s\n";
}

std::optional<std::vector<uint8_t>> TuningRun::Round(Clock::time_point now,
                                                     const std::vector<Response>& responses,
                                                     bool applied) {
  if (finished_) return std::nullopt;
  if (applied && search_.done()) {
    Finish();
    return std::nullopt;
  }
  if (applied || !started_) {
    started_ = measuring_ = true;
    meter_.Start(now);
  }
  if (!measuring_) return std::nullopt;
  std::optional<double> score = meter_.Cycle(now, responses);
  if (!score) return std::nullopt;
  const TunedParams measured = search_.current();
  const char* phase = search_.phase();
  const bool changed = search_.Record(*score);
  LogSample(phase, measured, *score);
  if (changed || search_.done()) {
    measuring_ = false;
    return EncodeTunedParams(search_.current(), search_.done());
  }
  // Same settings: this round's responses open the next sample.
  meter_.Start(now);
  (void)meter_.Cycle(now, responses);
  return std::nullopt;
}

void TuningRun::LogSample(const char* phase, const TunedParams& measured, double score) {
  KOLO_LOG(kDebug) << "autotune: sample " << search_.samples() << " (" << phase
                   << "): " << measured.ToString() << ": " << score / 1e6 << " MB/s";
  if (!log_.is_open()) return;
  log_ << search_.samples() << "," << phase << "," << measured.fusion_threshold_bytes << ","
       << measured.cycle_time_ms << "," << measured.piece_bytes << "," << score / 1e6 << "\n";
  log_.flush();
}

void TuningRun::Finish() {
  finished_ = true;
  const TunedParams& best = search_.current();
  std::ostringstream summary;
  summary << best.ToString() << " after " << search_.samples() << " samples on " << ranks_
          << " ranks: " << search_.best_score() / 1e6
          << " MB/s (the initial settings: " << search_.initial_score() / 1e6 << " MB/s)";
  if (log_.is_open()) {
    log_ << "best,chosen," << best.fusion_threshold_bytes << "," << best.cycle_time_ms << ","
         << best.piece_bytes << "," << search_.best_score() / 1e6 << "\n";
    log_.close();
  }
  std::string written;
  if (!result_path_.empty()) {
    Status s = WriteAutotuneFile(result_path_, FormatAutotuneFile(best, summary.str(), ranks_));
    if (s.ok()) {
      written = "; written to KOLO_AUTOTUNE_FILE '" + result_path_ + "'";
    } else {
      KOLO_LOG(kWarning) << "autotune: " << s.message();
    }
  }
  KOLO_LOG(kInfo) << "autotune chose " << summary.str() << written;
}

Status WriteAutotuneFile(const std::string& path, const std::string& text) {
  // Written aside and renamed, so that a job never reads half a file.
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::out | std::ios::trunc);
    out << text;
    out.close();
    if (!out) {
      return Status::Internal("cannot write KOLO_AUTOTUNE_FILE '" + path + "' (" +
                              std::strerror(errno) + ")");
    }
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temporary.c_str());
    return Status::Internal("cannot write KOLO_AUTOTUNE_FILE '" + path + "' (" + why + ")");
  }
  return Status::OK();
}

namespace {
constexpr const char kTunedFor[] = "# tuned for: ranks=";
}  // namespace

std::optional<int> AutotuneFileRanks(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    const std::string t = Trim(line);
    if (t.rfind(kTunedFor, 0) != 0) continue;
    const std::string digits = Trim(t.substr(sizeof(kTunedFor) - 1));
    if (digits.empty() || digits.size() > 9 ||
        !std::all_of(digits.begin(), digits.end(),
                     [](unsigned char ch) { return std::isdigit(ch); })) {
      return std::nullopt;
    }
    return std::stoi(digits);
  }
  return std::nullopt;
}

std::string FormatAutotuneFile(const TunedParams& params, const std::string& comment, int ranks) {
  Config config;
  config.fusion_threshold_bytes = params.fusion_threshold_bytes;
  config.cycle_time_ms = params.cycle_time_ms;
  config.piece_bytes = params.piece_bytes;
  std::string out =
      "# kolo autotune result (KOLO_AUTOTUNE_FILE). A job started with this file\n"
      "# present uses these settings and does not tune; settings given in the\n"
      "# environment win.\n";
  if (ranks > 0) out += kTunedFor + std::to_string(ranks) + "\n";
  if (!comment.empty()) out += "# " + comment + "\n";
  for (const char* name : kTunedNames) {
    out += std::string(name) + "=" + FindSetting(name)->field.format(config) + "\n";
  }
  return out;
}

Result<std::vector<std::pair<std::string, std::string>>> ParseAutotuneFile(
    const std::string& text, const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    auto fail = [&](const std::string& what) {
      return Status::InvalidArgument("KOLO_AUTOTUNE_FILE '" + path + "', line " +
                                     std::to_string(number) + ": " + what +
                                     "; fix or delete the file (a job with KOLO_AUTOTUNE=1 "
                                     "writes it again)");
    };
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#') continue;
    const size_t eq = t.find('=');
    if (eq == std::string::npos) return fail("expected KOLO_NAME=value, got '" + t + "'");
    const std::string name = Trim(t.substr(0, eq)), value = Trim(t.substr(eq + 1));
    if (std::none_of(std::begin(kTunedNames), std::end(kTunedNames),
                     [&](const char* n) { return name == n; })) {
      return fail("'" + name +
                  "' is not a setting that autotune writes (KOLO_FUSION_THRESHOLD, "
                  "KOLO_CYCLE_TIME, KOLO_PIECE_SIZE)");
    }
    for (const auto& earlier : out) {
      if (earlier.first == name) return fail(name + " is given twice");
    }
    Config scratch;
    Status s = FindSetting(name)->field.parse(value, &scratch);
    if (!s.ok()) return fail(name + "='" + value + "' " + s.message());
    out.emplace_back(name, value);
  }
  if (out.empty()) {
    return Status::InvalidArgument("KOLO_AUTOTUNE_FILE '" + path +
                                   "' holds no settings; fix or delete the file (a job with "
                                   "KOLO_AUTOTUNE=1 writes it again)");
  }
  return out;
}

std::vector<uint8_t> EncodeTunedParams(const TunedParams& params, bool final) {
  const int64_t words[4] = {params.fusion_threshold_bytes, 0, params.piece_bytes, final ? 1 : 0};
  std::vector<uint8_t> out(sizeof words);
  std::memcpy(out.data(), words, sizeof words);
  std::memcpy(out.data() + 8, &params.cycle_time_ms, 8);
  return out;
}

Result<std::pair<TunedParams, bool>> DecodeTunedParams(const std::vector<uint8_t>& bytes) {
  int64_t words[4];
  if (bytes.size() != sizeof words) {
    return Status::Internal("autotune: rank 0 sent " + std::to_string(bytes.size()) +
                            " bytes of settings instead of " + std::to_string(sizeof words));
  }
  std::memcpy(words, bytes.data(), sizeof words);
  TunedParams p;
  p.fusion_threshold_bytes = words[0];
  std::memcpy(&p.cycle_time_ms, bytes.data() + 8, 8);
  p.piece_bytes = words[2];
  return std::make_pair(p, words[3] != 0);
}

}  // namespace kolo
