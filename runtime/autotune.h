// Autotuning (KOLO_AUTOTUNE), the pure parts, tested without MPI:
//   SampleMeter - when a sample of training steps ends, and its score;
//   Autotuner   - the search over fusion threshold, cycle time and piece size;
//   the result file that a later job reads (KOLO_AUTOTUNE_FILE), and the
//   message in which rank 0 sends new settings to every rank.
// runtime_autotune.cc runs them on the global set's rank 0 and applies what
// they choose on every rank at the same cycle.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "config.h"
#include "message.h"

namespace kolo {

// The settings autotune changes while a job runs.
struct TunedParams {
  int64_t fusion_threshold_bytes = 0;
  double cycle_time_ms = 0;
  int64_t piece_bytes = 0;

  static TunedParams From(const Config& config);
  // "fusion threshold 64 MiB, cycle time 0.5 ms, piece size 2 MiB"
  std::string ToString() const;
};
bool operator==(const TunedParams& a, const TunedParams& b);
inline bool operator!=(const TunedParams& a, const TunedParams& b) { return !(a == b); }

// Decides when a sample ends and scores it: bytes of data responses per
// second of wall time. A sample spans whole training steps: it ends when some
// tensor runs `steps` more times after its first run in the sample, and is
// measured between those two runs (so what the job does between steps, and
// where in a step the sample began, count the same for every sample). Jobs
// whose names never repeat (unnamed collectives) end a sample after
// kMaxSeconds instead.
class SampleMeter {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kMinSeconds = 0.005;  // shorter spans are clock noise
  static constexpr double kMaxSeconds = 5.0;

  explicit SampleMeter(int64_t steps) : steps_(steps) {}

  // Begins a sample at `now`.
  void Start(Clock::time_point now);
  // A cycle at `now` that is about to run `responses`. Returns the score of
  // the sample when it ended at this cycle (before its responses, which the
  // next sample may count), else nothing.
  std::optional<double> Cycle(Clock::time_point now, const std::vector<Response>& responses);

 private:
  struct FirstRun {
    int64_t runs = 0;
    Clock::time_point at;
    int64_t bytes_before = 0;  // bytes_ when it first ran
  };
  int64_t steps_;
  Clock::time_point start_;
  int64_t bytes_ = 0;  // data bytes since Start
  std::unordered_map<std::string, FirstRun> seen_;
};

// The values tried for each setting; a setting with one value is held.
struct AutotuneSearch {
  std::vector<int64_t> fusion_thresholds;
  std::vector<double> cycle_times_ms;
  std::vector<int64_t> piece_sizes;
  int64_t warmup_samples = 3;
  // Each value is measured this many times, the values taking turns (rounds
  // of one sample each) so that a slow drift of the machine hits them alike;
  // a value's score is the median of its samples.
  int64_t samples_per_value = 5;
  // A value replaces the one the setting had (the incumbent) only when it
  // scored higher than the incumbent in at least 4/5 of the rounds (a round's
  // samples are taken within a second or two, so this pairs them against the
  // machine's drift, and one outlier sample cannot decide) and its median
  // beats the incumbent's by this fraction: noise must not move a setting
  // away from a good default.
  double margin = 0.03;

  // kolo's candidates around `initial` (which is always one of them), holding
  // the settings the user gave (`hold_*`). Piece sizes are never larger than
  // `initial.piece_bytes`, the size the shared-memory slots were made for.
  static AutotuneSearch Around(const TunedParams& initial, bool hold_fusion, bool hold_cycle,
                               bool hold_piece);
  // The number of samples the search takes, warm-up included.
  int64_t TotalSamples() const;
};

// A coordinate search: the settings one after the other (fusion threshold,
// cycle time, piece size), each over its values with the others fixed at
// their chosen values; then it stops and keeps the best.
class Autotuner {
 public:
  Autotuner(const TunedParams& initial, AutotuneSearch search);

  // The settings the next sample measures (the chosen ones once done()).
  const TunedParams& current() const { return current_; }
  bool done() const { return done_; }
  // What the next sample is for: "warmup", "fusion_threshold", "cycle_time",
  // "piece_size", or "done".
  const char* phase() const;
  int64_t samples() const { return samples_; }
  // The median score of the chosen settings in their last phase (0 before).
  double best_score() const { return best_score_; }
  // The median score of the initial settings in the first phase (0 before).
  double initial_score() const { return initial_score_; }

  // Records the score of a sample of current(); returns true when current()
  // changed.
  bool Record(double score);

 private:
  struct Coordinate {
    const char* name;
    std::vector<double> values;
    size_t incumbent = 0;  // the value the setting had when its turn came
    void (*apply)(TunedParams*, double);
  };
  void Begin(size_t coordinate);
  void Decide();

  AutotuneSearch search_;
  TunedParams current_;
  std::vector<Coordinate> coordinates_;  // those with more than one value
  size_t coordinate_ = 0;
  int64_t warmup_left_;
  int64_t trial_ = 0;                        // within the coordinate
  std::vector<std::vector<double>> scores_;  // per value of the coordinate
  int64_t samples_ = 0;
  double best_score_ = 0, initial_score_ = 0;
  bool done_ = false;
};

// Rank 0's side of a tuning run: measures samples, steps the search, logs
// every sample (KOLO_AUTOTUNE_LOG, CSV) and, once every rank applied the
// final settings, logs the choice and writes the result file.
class TuningRun {
 public:
  using Clock = SampleMeter::Clock;
  // `log_path`, `result_path`: "" for none; `ranks` only goes into the file.
  TuningRun(const TunedParams& initial, AutotuneSearch search, int64_t steps_per_sample,
            const std::string& log_path, std::string result_path, int ranks);

  // Called after every negotiation round of the global set, before its
  // responses run. `applied`: every rank applied settings that this run
  // published, at this round. Returns settings to publish (EncodeTunedParams),
  // which every rank must apply at one later round, the same on all of them.
  std::optional<std::vector<uint8_t>> Round(Clock::time_point now,
                                            const std::vector<Response>& responses, bool applied);
  const Autotuner& search() const { return search_; }
  // The final settings were applied everywhere; nothing more to do.
  bool finished() const { return finished_; }

 private:
  void LogSample(const char* phase, const TunedParams& measured, double score);
  void Finish();

  Autotuner search_;
  SampleMeter meter_;
  std::ofstream log_;
  std::string result_path_;
  int ranks_;
  bool started_ = false;
  bool measuring_ = false;  // false while settings travel to the ranks
  bool finished_ = false;
};

// The result file: "# ..." comments, blank lines, and KOLO_NAME=value lines
// of the tuned settings. `path` only names the file in messages.
// `ranks`: the job size it was tuned for, recorded as "# tuned for: ranks=N"
// (a comment, so older readers take the file as before); 0 records none.
std::string FormatAutotuneFile(const TunedParams& params, const std::string& comment,
                               int ranks = 0);
// The job size a result file records it was tuned for, or nullopt (a file
// written before kolo recorded it, or by hand).
std::optional<int> AutotuneFileRanks(const std::string& text);
// The settings a result file holds, each checked by its setting's parser; an
// error names `path` and the line.
Result<std::vector<std::pair<std::string, std::string>>> ParseAutotuneFile(const std::string& text,
                                                                           const std::string& path);

// Writes `text` to `path` whole (aside, then renamed).
Status WriteAutotuneFile(const std::string& path, const std::string& text);

// Rank 0's message to every rank: new settings, and whether tuning ended.
std::vector<uint8_t> EncodeTunedParams(const TunedParams& params, bool final);
Result<std::pair<TunedParams, bool>> DecodeTunedParams(const std::vector<uint8_t>& bytes);

}  // namespace kolo
