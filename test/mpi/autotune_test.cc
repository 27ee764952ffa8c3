// Autotune across ranks: while rank 0's tuner changes the fusion threshold,
// the cycle time and the piece size, every step's results stay exact (ranks
// that fused or cut pieces differently would hang or mix up data); every rank
// ends with the same settings; the result file is written, and a second
// runtime started with it uses it without tuning.
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "test_util.h"

// Under the sanitizers every byte a collective touches costs many times more,
// and the search runs ~200 steps: the tensors shrink by kScale there (the
// search and the checks stay the same; the 1 MiB threshold then does not split
// them).
#ifdef KOLO_SANITIZED
constexpr int64_t kScale = 8;
#else
constexpr int64_t kScale = 1;
#endif

namespace kolo::test {
namespace {

using Settings = std::vector<std::pair<std::string, std::string>>;

// A path under /tmp named by rank 0, the same on every rank.
std::string SharedPath(const std::string& name) {
  char path[256] = {};
  std::snprintf(path, sizeof path, "/tmp/kolo-autotune-test-%d-%s", static_cast<int>(getpid()),
                name.c_str());
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  return path;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::unique_ptr<Runtime> Start(const Settings& settings, bool with_pair_set) {
  InitOptions options;
  options.comm = HandleOfComm(MPI_COMM_WORLD);
  options.settings = settings;
  if (with_pair_set) options.process_sets = {{0, 1}};
  auto rt = Runtime::Create(options);
  EXPECT_TRUE(rt.ok()) << rt.status().ToString();
  return rt.ok() ? std::move(rt).value() : nullptr;
}

// One training step: small tensors that fuse (1.6 MB of them, so a 1 MiB
// threshold splits them), tensors reduced in place, one above every piece
// size, other dtypes; on ranks 0 and 1 also one on process set 1. Every
// result is checked.
class Step {
 public:
  explicit Step(int size) : size_(size) {
    for (int i = 0; i < 8; ++i)
      tensors_.push_back({"small." + std::to_string(i), DataType::kFloat32, 50000 / kScale});
    tensors_.push_back({"tiny", DataType::kFloat32, 7});
    tensors_.push_back({"ints", DataType::kInt32, 5000});
    tensors_.push_back({"doubles", DataType::kFloat64, 3000});
    tensors_.push_back({"in_place", DataType::kFloat32, 70000 / kScale});
    tensors_.push_back({"big", DataType::kFloat32, 600000 / kScale});
    for (const Tensor& t : tensors_) buffers_.emplace_back(t.dtype, t.count);
  }

  // Runs step `step` on `rt`; an error names the step, the tensor and the element.
  void Run(Runtime& rt, int step) {
    const int rank = rt.rank();
    std::vector<Handle> handles;
    for (size_t k = 0; k < tensors_.size(); ++k) {
      for (int64_t i = 0; i < tensors_[k].count; ++i) buffers_[k].Set(i, Value(rank, step, k, i));
      AllreduceOptions opts;
      opts.op = ReduceOp::kSum;
      opts.name = tensors_[k].name;
      auto h = rt.EnqueueAllreduce(buffers_[k].View(), buffers_[k].View(), opts);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      handles.push_back(h.value());
    }
    Buffer pair(DataType::kFloat32, 600000 / kScale);
    if (rank < 2 && size_ >= 2) {
      for (int64_t i = 0; i < pair.size(); ++i) pair.Set(i, rank + 1 + i % 3);
      AllreduceOptions opts;
      opts.op = ReduceOp::kSum;
      opts.name = "pair";
      opts.process_set = 1;
      auto h = rt.EnqueueAllreduce(pair.View(), pair.View(), opts);
      ASSERT_TRUE(h.ok()) << h.status().ToString();
      handles.push_back(h.value());
    }
    for (Handle h : handles) {
      Status s = rt.Wait(h);
      ASSERT_TRUE(s.ok()) << "step " << step << ": " << s.ToString();
    }
    for (size_t k = 0; k < tensors_.size(); ++k) {
      for (int64_t i = 0; i < tensors_[k].count; ++i) {
        // Value(r, ...) is (r + 1) times Value(0, ...): the sum over ranks in one product.
        const double want = Value(0, step, k, i) * size_ * (size_ + 1) / 2;
        ASSERT_EQ(buffers_[k].Get(i), want) << "rank " << rank << " step " << step << " tensor "
                                            << tensors_[k].name << " elem " << i;
      }
    }
    if (rank < 2 && size_ >= 2) {
      for (int64_t i = 0; i < pair.size(); ++i) {
        ASSERT_EQ(pair.Get(i), 3 + 2 * (i % 3))
            << "rank " << rank << " step " << step << " pair elem " << i;
      }
    }
  }

 private:
  struct Tensor {
    std::string name;
    DataType dtype;
    int64_t count;
  };
  // Small integers: exact in every dtype and in any order of summation.
  static double Value(int rank, int step, size_t k, int64_t i) {
    return (rank + 1) * ((i + static_cast<int64_t>(k)) % 7 + step % 5);
  }
  int size_;
  std::vector<Tensor> tensors_;
  std::vector<Buffer> buffers_;
};

// Every rank's value equals rank 0's.
template <typename T>
void ExpectSameOnEveryRank(T value, MPI_Datatype type, const char* what) {
  T root = value;
  MPI_Bcast(&root, 1, type, 0, MPI_COMM_WORLD);
  int same = root == value ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  EXPECT_TRUE(same) << what << " differs between ranks (this rank: " << value << ")";
}

// Whether every rank's runtime says tuning ended (so all leave the loop at
// the same step), through kolo itself.
bool TuningEndedEverywhere(Runtime& rt) {
  int32_t tuning = rt.CurrentTunedSettings().tuning ? 1 : 0;
  AllreduceOptions opts;
  opts.op = ReduceOp::kMax;
  opts.name = "still_tuning";
  TensorView t{&tuning, DataType::kInt32, {1}};
  auto h = rt.EnqueueAllreduce(t, t, opts);
  EXPECT_TRUE(h.ok() && rt.Wait(h.value()).ok());
  return tuning == 0;
}

// Ranks 2 and 3 have no "pair" tensor on set 1, so they can finish a step
// while ranks 0 and 1 still wait for theirs; a shutdown then would abort it.
// A barrier first, as a training script ends.
void ShutdownTogether(Runtime& rt) {
  Result<Handle> barrier = rt.EnqueueBarrier({});
  ASSERT_TRUE(barrier.ok()) << barrier.status().ToString();
  ASSERT_TRUE(rt.Wait(barrier.value()).ok());
  ASSERT_TRUE(rt.Shutdown().ok());
}

TEST(Autotune, SettingsChangeTogetherResultsStayExactAndTheFileIsReused) {
  const std::string result = SharedPath("result.env"), log = SharedPath("log.csv");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) std::remove(result.c_str());
  MPI_Barrier(MPI_COMM_WORLD);

  Step step(size);
  TunedSettings chosen;
  {
    std::unique_ptr<Runtime> rt = Start({{"KOLO_AUTOTUNE", "1"},
                                         {"KOLO_AUTOTUNE_WARMUP_SAMPLES", "1"},
                                         {"KOLO_AUTOTUNE_STEPS_PER_SAMPLE", "3"},
                                         {"KOLO_AUTOTUNE_LOG", log},
                                         {"KOLO_AUTOTUNE_FILE", result}},
                                        true);
    ASSERT_TRUE(rt);
    const TunedSettings initial = rt->CurrentTunedSettings();
    EXPECT_TRUE(initial.tuning);
    EXPECT_FALSE(initial.from_file);
    int n = 0;
    bool ended = false;
    for (; n < 3000 && !ended; ++n) {
      ASSERT_NO_FATAL_FAILURE(step.Run(*rt, n));
      if (n % 10 == 9) ended = TuningEndedEverywhere(*rt);
    }
    ASSERT_TRUE(ended) << "tuning did not end within " << n << " steps";
    chosen = rt->CurrentTunedSettings();
    if (rank == 0)
      std::printf("autotune test: tuning ended after %d steps, %lld changes\n", n,
                  static_cast<long long>(chosen.changes));
    EXPECT_GT(chosen.changes, 3);  // the search tried several settings
    // A few steps with the chosen settings.
    for (int k = 0; k < 5; ++k) ASSERT_NO_FATAL_FAILURE(step.Run(*rt, n + k));
    ASSERT_NO_FATAL_FAILURE(ShutdownTogether(*rt));
  }
  // Raw MPI only once kolo's thread is gone: a test thread inside MPI may
  // progress the background thread's nonblocking calls, which the sanitizer
  // (Open MPI is not instrumented) reports as races on kolo's buffers.
  ExpectSameOnEveryRank<int64_t>(chosen.fusion_threshold_bytes, MPI_INT64_T, "fusion threshold");
  ExpectSameOnEveryRank<double>(chosen.cycle_time_ms, MPI_DOUBLE, "cycle time");
  ExpectSameOnEveryRank<int64_t>(chosen.piece_bytes, MPI_INT64_T, "piece size");
  ExpectSameOnEveryRank<int64_t>(chosen.changes, MPI_INT64_T, "number of changes");

  if (rank == 0) {
    const std::string file = ReadFile(result);
    std::ostringstream cycle;
    cycle << chosen.cycle_time_ms;
    EXPECT_NE(file.find("\nKOLO_FUSION_THRESHOLD=" + std::to_string(chosen.fusion_threshold_bytes) +
                        "\n"),
              std::string::npos)
        << file;
    EXPECT_NE(file.find("\nKOLO_CYCLE_TIME=" + cycle.str() + "\n"), std::string::npos) << file;
    EXPECT_NE(file.find("\nKOLO_PIECE_SIZE=" + std::to_string(chosen.piece_bytes) + "\n"),
              std::string::npos)
        << file;
    EXPECT_NE(file.find("\n# tuned for: ranks=" + std::to_string(size) + "\n"), std::string::npos)
        << file;
    const std::string csv = ReadFile(log);
    EXPECT_EQ(csv.rfind("sample,phase,fusion_threshold_bytes,cycle_time_ms,piece_bytes,"
                        "score_mb_per_s\n1,warmup,",
                        0),
              0u)
        << csv;
    EXPECT_NE(csv.find("\nbest,chosen,"), std::string::npos) << csv;
  }

  // A later job with the same file: uses it without tuning; a setting given
  // explicitly wins over the file.
  {
    std::unique_ptr<Runtime> rt =
        Start({{"KOLO_AUTOTUNE", "1"}, {"KOLO_AUTOTUNE_FILE", result}, {"KOLO_CYCLE_TIME", "0.75"}},
              true);
    ASSERT_TRUE(rt);
    const TunedSettings s = rt->CurrentTunedSettings();
    EXPECT_TRUE(s.from_file);
    EXPECT_FALSE(s.tuning);
    EXPECT_EQ(s.fusion_threshold_bytes, chosen.fusion_threshold_bytes);
    EXPECT_EQ(s.piece_bytes, chosen.piece_bytes);
    EXPECT_EQ(s.cycle_time_ms, 0.75);
    for (int k = 0; k < 20; ++k) ASSERT_NO_FATAL_FAILURE(step.Run(*rt, k));
    EXPECT_EQ(rt->CurrentTunedSettings().changes, 0);
    ASSERT_NO_FATAL_FAILURE(ShutdownTogether(*rt));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::remove(result.c_str());
    std::remove(log.c_str());
  }
}

TEST(Autotune, AFileTunedForAnotherJobSizeIsIgnoredWithAWarning) {
  const std::string path = SharedPath("other_size.env");
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) {
    std::ofstream(path) << "# tuned for: ranks=" << size + 1
                        << "\nKOLO_FUSION_THRESHOLD=1048576\nKOLO_CYCLE_TIME=1.5\n";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  ::testing::internal::CaptureStderr();
  std::unique_ptr<Runtime> rt = Start({{"KOLO_AUTOTUNE_FILE", path}}, false);
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(rt);
  const TunedSettings s = rt->CurrentTunedSettings();
  EXPECT_FALSE(s.from_file) << "rank " << rank;
  EXPECT_NE(s.fusion_threshold_bytes, 1048576) << "rank " << rank << ": the file's value";
  EXPECT_NE(s.cycle_time_ms, 1.5) << "rank " << rank << ": the file's value";
  const std::string line = "KOLO_AUTOTUNE_FILE '" + path + "' was tuned for " +
                           std::to_string(size + 1) + " ranks and this job has " +
                           std::to_string(size) + ": ignored";
  EXPECT_EQ(err.find(line) != std::string::npos, rank == 0) << "rank " << rank << ":\n" << err;
  ASSERT_NO_FATAL_FAILURE(ShutdownTogether(*rt));
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::remove(path.c_str());
}

TEST(Autotune, AMalformedFileFailsInitOnEveryRankNamingTheLine) {
  const std::string path = SharedPath("bad.env");
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) std::ofstream(path) << "# tuned\nKOLO_FUSION_THRESHOLD=4M\nKOLO_CYCLE_TIME=fast\n";
  MPI_Barrier(MPI_COMM_WORLD);
  InitOptions options;
  options.comm = HandleOfComm(MPI_COMM_WORLD);
  options.settings = {{"KOLO_AUTOTUNE_FILE", path}};
  auto rt = Runtime::Create(options);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("KOLO_AUTOTUNE_FILE '" + path +
                                       "', line 3: KOLO_CYCLE_TIME='fast' is not a number"),
            std::string::npos)
      << rt.status().message();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) std::remove(path.c_str());
}

}  // namespace
}  // namespace kolo::test
