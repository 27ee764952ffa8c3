// Autotune in the runtime: the result file at init, and the settings that
// rank 0's tuner publishes, applied on every rank at the same round.
//
// Why the same round: every rank plans fusion (FusionPlanner::Plan with the
// fusion threshold) and cuts allreduces into pieces locally, from the same
// responses; ranks that used different values would run mismatched
// collectives. The global set's negotiation is a round that every rank runs
// in the same order, so rank 0 raises a flag in that round's bit vector and
// broadcasts the settings after it (ProcessSet::Publish), and every rank
// applies them before that round's responses run.
#include <sys/stat.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "kolo/env_names.h"
#include "logging.h"
#include "runtime_impl.h"

namespace kolo {
namespace {

// What rank 0 found at KOLO_AUTOTUNE_FILE.
enum FileState : int64_t { kNoFile = 0, kFile = 1, kUnreadable = 2 };

// Rank 0 reads the file; every rank gets its state and text.
Status ShareAutotuneFile(const std::string& path, int rank, MPI_Comm comm, int64_t* state,
                         std::string* text) {
  *state = kNoFile;
  struct stat info;
  if (rank == 0 && !path.empty()) {
    if (stat(path.c_str(), &info) != 0) {
      if (errno != ENOENT && errno != ENOTDIR) *state = kUnreadable;
    } else {
      std::ifstream in(path);
      std::ostringstream contents;
      if (in && !S_ISDIR(info.st_mode)) contents << in.rdbuf();
      *state = in && !S_ISDIR(info.st_mode) && !in.bad() ? kFile : kUnreadable;
      *text = contents.str();
    }
  }
  int64_t header[2] = {*state, static_cast<int64_t>(text->size())};
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Bcast(header, 2, MPI_INT64_T, 0, comm), "MPI_Bcast"));
  *state = header[0];
  text->resize(static_cast<size_t>(header[1]));
  return MpiStatus(MPI_Bcast(text->data(), static_cast<int>(header[1]), MPI_CHAR, 0, comm),
                   "MPI_Bcast");
}

// Applies the file's settings to `config`, except those the user gave.
Status ApplyAutotuneFile(const std::string& text, const std::string& path, const ConfigNotes& notes,
                         bool root, Config* config) {
  KOLO_ASSIGN_OR_RETURN(auto settings, ParseAutotuneFile(text, path));
  std::string used, held;
  for (const auto& [name, value] : settings) {
    if (notes.Given(name)) {  // the user's explicit setting wins
      held += (held.empty() ? "" : ", ") + name;
      continue;
    }
    // ParseAutotuneFile returns only the names of settings autotune writes.
    KOLO_RETURN_IF_ERROR(FindSetting(name)->field.parse(value, config));
    used += (used.empty() ? "" : ", ") + name + "=" + value;
  }
  if (root) {
    KOLO_LOG(kInfo) << "autotune: using KOLO_AUTOTUNE_FILE '" << path
                    << "': " << (used.empty() ? "nothing" : used)
                    << (held.empty() ? "" : "; given in the environment, and kept: " + held)
                    << (config->autotune ? "; not tuning again" : "");
  }
  return Status::OK();
}

}  // namespace

Status RuntimeImpl::InitAutotune(const ConfigNotes& notes) {
  const bool root = placement_.rank == 0;
  const std::string& path = config_.autotune_file;
  int64_t state = kNoFile;
  std::string text;
  KOLO_RETURN_IF_ERROR(ShareAutotuneFile(path, placement_.rank, global_comm_.get(), &state, &text));
  if (state == kUnreadable) {
    return Status::InvalidArgument("KOLO_AUTOTUNE_FILE '" + path +
                                   "' cannot be read on rank 0; fix its permissions or name "
                                   "another file");
  }
  bool from_file = state == kFile;
  if (from_file) {
    // Settings tuned for another number of ranks would be applied without a
    // word: every rank reads the same text, so all of them skip it alike.
    std::optional<int> tuned_for = AutotuneFileRanks(text);
    if (tuned_for && *tuned_for != placement_.size) {
      from_file = false;
      if (root) {
        KOLO_LOG(kWarning) << "KOLO_AUTOTUNE_FILE '" << path << "' was tuned for " << *tuned_for
                           << " ranks and this job has " << placement_.size
                           << ": ignored, running with the configured settings"
                           << (config_.autotune ? " and tuning them (the file will be replaced)"
                                                : " (KOLO_AUTOTUNE=1 tunes this job)");
      }
    }
  }
  if (from_file) {
    KOLO_RETURN_IF_ERROR(ApplyAutotuneFile(text, path, notes, root, &config_));
  } else if (!path.empty() && !config_.autotune && root) {
    KOLO_LOG(kWarning) << "KOLO_AUTOTUNE_FILE '" << path
                       << "' does not exist: running with the configured settings (set "
                          "KOLO_AUTOTUNE=1 to tune them and write the file)";
  }
  piece_bytes_now_ = config_.piece_bytes;
  const TunedParams initial = TunedParams::From(config_);
  AutotuneSearch search =
      AutotuneSearch::Around(initial, notes.Given(env::kFusionThreshold),
                             notes.Given(env::kCycleTime), notes.Given(env::kPieceSize));
  search.warmup_samples = config_.autotune_warmup_samples;
  const bool tune = config_.autotune && !from_file && search.TotalSamples() > search.warmup_samples;
  if (config_.autotune && !from_file && !tune && root) {
    KOLO_LOG(kWarning) << "KOLO_AUTOTUNE=1 has nothing to tune: KOLO_FUSION_THRESHOLD, "
                          "KOLO_CYCLE_TIME and KOLO_PIECE_SIZE are all given";
  }
  if (tune && root) {
    KOLO_LOG(kInfo) << "autotune: tuning from " << initial.ToString() << ": "
                    << search.fusion_thresholds.size() << " fusion thresholds, "
                    << search.cycle_times_ms.size() << " cycle times, " << search.piece_sizes.size()
                    << " piece sizes, " << search.TotalSamples() << " samples of "
                    << config_.autotune_steps_per_sample << " steps";
    tuning_ = std::make_unique<TuningRun>(initial, search, config_.autotune_steps_per_sample,
                                          config_.autotune_log, path, placement_.size);
  }
  MutexLock lock(&tuned_mutex_);
  tuned_.fusion_threshold_bytes = initial.fusion_threshold_bytes;
  tuned_.cycle_time_ms = initial.cycle_time_ms;
  tuned_.piece_bytes = initial.piece_bytes;
  tuned_.tuning = tune;
  tuned_.from_file = from_file;
  return Status::OK();
}

void RuntimeImpl::AutotuneRound(ProcessSet& global, const NegotiationOutcome& outcome,
                                Clock::time_point now) {
  const bool applied = !outcome.published.empty();
  if (applied) {
    Result<std::pair<TunedParams, bool>> got = DecodeTunedParams(outcome.published);
    if (got.ok()) {
      ApplyTuned(got.value().first, got.value().second);
    } else {  // cannot happen between ranks of one build
      KOLO_LOG(kError) << got.status().message();
    }
  }
  if (!tuning_) return;
  if (std::optional<std::vector<uint8_t>> publish =
          tuning_->Round(now, outcome.responses, applied)) {
    global.Publish(std::move(*publish));
  }
  if (tuning_->finished()) tuning_.reset();
}

void RuntimeImpl::ApplyTuned(const TunedParams& params, bool final) {
  config_.fusion_threshold_bytes = params.fusion_threshold_bytes;
  config_.cycle_time_ms = params.cycle_time_ms;
  {
    MutexLock lock(&queue_mutex_);
    start_delay_ = FromMilliseconds(params.cycle_time_ms);
  }
  if (params.piece_bytes != piece_bytes_now_) {
    piece_bytes_now_ = params.piece_bytes;
    for (auto& [id, set] : sets_) set->movers().host->SetPieceBytes(piece_bytes_now_);
  }
  MutexLock lock(&tuned_mutex_);
  tuned_.fusion_threshold_bytes = params.fusion_threshold_bytes;
  tuned_.cycle_time_ms = params.cycle_time_ms;
  tuned_.piece_bytes = params.piece_bytes;
  tuned_.tuning = !final;
  ++tuned_.changes;
}

TunedSettings RuntimeImpl::tuned_settings() const {
  MutexLock lock(&tuned_mutex_);
  return tuned_;
}

}  // namespace kolo
