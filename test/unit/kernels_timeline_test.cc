#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "../../ops/cpu_kernels.h"
#include "../../ops/shm_allreduce.h"
#include "timeline.h"

namespace kolo {
namespace {

TEST(Half, RoundTripsRepresentableValues) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.9604645e-08f, 1025.0f}) {
    EXPECT_EQ(HalfToFloat(FloatToHalf(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 1.0f / 4096)), 1.0f);  // rounds to even
}

TEST(Half, EveryHalfBitPatternRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToHalf(f), h) << "pattern " << h;
  }
}

TEST(BFloat16, RoundTripsAndRounds) {
  for (float f : {0.0f, 1.0f, -3.0f, 256.0f, std::ldexp(1.0f, 100)}) {
    EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(f)), f) << f;
  }
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 1.0f / 512)), 1.0f);
}

TEST(Kernels, ScaleAndReduce) {
  std::vector<int32_t> ints = {7, -7, 3};
  ScaleBuffer(ints.data(), 3, DataType::kInt32, 0.5);
  EXPECT_EQ(ints, (std::vector<int32_t>{3, -3, 1}));  // truncated toward zero
  std::vector<uint16_t> h = {FloatToHalf(2), FloatToHalf(-4)},
                        in = {FloatToHalf(1), FloatToHalf(5)};
  ScaleBuffer(h.data(), 2, DataType::kFloat16, 0.5);
  EXPECT_EQ(HalfToFloat(h[0]), 1.0f);
  ReduceHalf(in.data(), h.data(), 2, ReduceOp::kMax, false);
  EXPECT_EQ(HalfToFloat(h[0]), 1.0f);
  EXPECT_EQ(HalfToFloat(h[1]), 5.0f);
}

TEST(Kernels, AnAverageIsTheQuotientOneProcessGets) {
  // x / 3 rounded once (x * float(1/3) differs for a third of these).
  std::vector<float> x(10000), want(10000);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 2.0f * (static_cast<float>(i) * 0.37f - 1000.0f);
    want[i] = x[i] / 3.0f;
  }
  DivideBuffer(x.data(), static_cast<int64_t>(x.size()), DataType::kFloat32, 3);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(x[i], want[i]) << "element " << i;
  std::vector<int64_t> ints = {7, -7, 9};
  DivideBuffer(ints.data(), 3, DataType::kInt64, 3);
  EXPECT_EQ(ints, (std::vector<int64_t>{2, -2, 3}));  // truncated toward zero
  std::vector<double> d = {1.0, -2.0};
  DivideBuffer(d.data(), 2, DataType::kFloat64, 3);
  EXPECT_EQ(d[0], 1.0 / 3.0);
  EXPECT_EQ(d[1], -2.0 / 3.0);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Kernels, StreamingCopyCopiesEveryByteAtAnyAlignment) {
  std::vector<uint8_t> src(4096 + 64), dst(4096 + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  for (size_t from : {0, 1, 15, 16, 63}) {
    for (size_t to : {0, 3, 16, 48}) {
      for (size_t n : {0, 1, 15, 64, 65, 200, 4000}) {
        std::fill(dst.begin(), dst.end(), 0);
        StreamingCopy(dst.data() + to, src.data() + from, n);
        for (size_t i = 0; i < dst.size(); ++i) {
          const uint8_t want = i >= to && i < to + n ? src[from + i - to] : 0;
          ASSERT_EQ(dst[i], want) << "from " << from << " to " << to << " n " << n << " at " << i;
        }
      }
    }
  }
}

// Feeds a chooser pieces whose time per byte depends on the method and the
// phase of the "machine"; returns how many of `pieces` it streamed.
int StreamedPieces(CopyChooser& chooser, int pieces, double plain_ns, double streaming_ns) {
  const int64_t bytes = 1 << 20;
  int streamed = 0;
  for (int i = 0; i < pieces; ++i) {
    const bool s = chooser.Streaming(bytes);
    streamed += s;
    chooser.Record(s, bytes, (s ? streaming_ns : plain_ns) * 1e-9 * bytes);
  }
  return streamed;
}

TEST(CopyChooser, FollowsTheFasterMethodAsTheMachineChanges) {
  CopyChooser chooser;
  const int n = 64 * CopyChooser::kExploreEvery;
  // Cores that share a cache: plain is faster; streaming only when exploring.
  EXPECT_LE(StreamedPieces(chooser, n, 0.07, 0.09), n / CopyChooser::kExploreEvery + 2);
  // Cores far apart: a plain copy is 3 x slower, streaming takes over.
  EXPECT_GE(StreamedPieces(chooser, n, 0.30, 0.09), n - n / CopyChooser::kExploreEvery - 3 * 16);
  // And back.
  EXPECT_LE(StreamedPieces(chooser, n, 0.07, 0.09),
            n / CopyChooser::kExploreEvery + 2 * CopyChooser::kExploreEvery);
}

TEST(CopyChooser, IgnoresNoiseBelowTheMarginAndSmallPieces) {
  CopyChooser chooser;
  // Streaming measures 10 % faster: not worth leaving plain for.
  EXPECT_LE(StreamedPieces(chooser, 4096, 0.10, 0.091), 4096 / CopyChooser::kExploreEvery + 2);
  // Pieces below the timed size are always copied plainly.
  EXPECT_FALSE(chooser.Streaming(CopyChooser::kMinTimedBytes - 1));
  StreamedPieces(chooser, 4096, 0.30, 0.09);
  EXPECT_FALSE(chooser.Streaming(CopyChooser::kMinTimedBytes - 1));
  EXPECT_TRUE(chooser.Streaming(CopyChooser::kMinTimedBytes));
}

// Feeds a path chooser `calls` calls of `bytes` whose time per byte depends
// on the path; returns how many went through the single copy.
int SingleCopyCalls(PathChooser& chooser, int calls, int64_t bytes, double pipelined_ns,
                    double single_copy_ns) {
  int single = 0;
  for (int i = 0; i < calls; ++i) {
    const bool s = chooser.SingleCopy(bytes);
    single += s;
    chooser.Record(bytes, s, (s ? single_copy_ns : pipelined_ns) * 1e-9 * bytes);
  }
  return single;
}

TEST(PathChooser, TriesBothThenKeepsTheFasterAndTriesTheOtherLessAndLessOften) {
  PathChooser chooser;
  const int64_t mib = 1 << 20;
  EXPECT_FALSE(chooser.SingleCopy(mib)) << "the first call is pipelined";
  chooser.Record(mib, false, 0.1e-9 * mib);
  EXPECT_TRUE(chooser.SingleCopy(mib)) << "the second tries the single copy";
  chooser.Record(mib, true, 0.3e-9 * mib);
  EXPECT_FALSE(chooser.SingleCopy(mib));
  // The single copy 3 x slower: tried after 16, 32, 64, ... calls, at most
  // every 1024th.
  const int n = 4000;
  const int tried = SingleCopyCalls(chooser, n, mib, 0.1, 0.3);
  EXPECT_GE(tried, 3);
  EXPECT_LE(tried, 10);
  EXPECT_GE(SingleCopyCalls(chooser, 2 * PathChooser::kExploreMost, mib, 0.1, 0.3), 1)
      << "never tried again";
  // The machine changes: the single copy is now 2 x faster; it takes over
  // within the exploration interval and the window.
  SingleCopyCalls(chooser, static_cast<int>(PathChooser::kExploreMost) + 8, mib, 0.2, 0.1);
  EXPECT_GE(SingleCopyCalls(chooser, 1000, mib, 0.2, 0.1), 1000 - 1000 / 16 - 2);
}

TEST(PathChooser, EachSizeClassChoosesForItselfAndTheMaskCarriesEveryChoice) {
  PathChooser chooser;
  const int64_t small = 1 << 20, large = 64 << 20;
  SingleCopyCalls(chooser, 200, small, 0.1, 0.05);  // single copy faster at 1 MiB
  SingleCopyCalls(chooser, 200, large, 0.1, 0.3);   // pipelined faster at 64 MiB
  // Next calls: 1 MiB single copy, 64 MiB pipelined (unless exploring).
  PathChooser peer;
  peer.set_mask(chooser.mask());
  for (int64_t bytes : {small, small + 1, 2 * small - 1, large, large + 12345}) {
    EXPECT_EQ(peer.SingleCopy(bytes), chooser.SingleCopy(bytes)) << bytes;
  }
  EXPECT_EQ(SingleCopyCalls(chooser, 100, small, 0.1, 0.05) >= 90, true);
  EXPECT_LE(SingleCopyCalls(chooser, 100, large, 0.1, 0.3), 2);
}

TEST(Timeline, FileIsAValidArrayAfterEveryFlush) {
  std::string path = ::testing::TempDir() + "/kolo_timeline_test.json";
  Timeline t;
  ASSERT_TRUE(t.Start(path, true).ok());
  EXPECT_EQ(ReadFile(path), "[\n]\n");
  auto now = Timeline::Clock::now();
  t.Span("grad \"w\"", "ALLREDUCE", now, now + std::chrono::microseconds(5));
  t.Instant("CYCLE_START", now);
  t.Flush();
  std::string text = ReadFile(path);
  EXPECT_EQ(text.substr(text.size() - 3), "\n]\n");
  EXPECT_NE(text.find(R"("name":"thread_name")"), std::string::npos);
  EXPECT_NE(text.find(R"(grad \"w\")"), std::string::npos);  // escaped
  EXPECT_NE(text.find(R"("ph":"X")"), std::string::npos);
  EXPECT_NE(text.find(R"("dur":5)"), std::string::npos);
  t.Span("b", "ALLREDUCE", now, now);
  t.Stop();
  text = ReadFile(path);
  EXPECT_EQ(text.substr(text.size() - 3), "\n]\n");
  EXPECT_EQ(std::count(text.begin(), text.end(), '{'), std::count(text.begin(), text.end(), '}'));
}

TEST(Timeline, HorovodsRowsAndPhases) {
  Request named;
  named.op = OpType::kAllreduce;
  named.name = "test_allreduce";
  EXPECT_EQ(TimelineRow(named), "allreduce.test_allreduce");
  Request unnamed;
  unnamed.op = OpType::kBroadcast;
  unnamed.name = "broadcast.noname.3";
  unnamed.unnamed_epoch = 0;
  unnamed.unnamed_index = 3;
  EXPECT_EQ(TimelineRow(unnamed), "broadcast.noname.3");
  Request barrier;
  barrier.op = OpType::kBarrier;
  barrier.name = "barrier";
  EXPECT_EQ(TimelineRow(barrier), "barrier");
  EXPECT_EQ(NegotiatePhase(OpType::kAllreduce), "NEGOTIATE_ALLREDUCE");
  EXPECT_EQ(NegotiatePhase(OpType::kReducescatter), "NEGOTIATE_REDUCESCATTER");
  EXPECT_EQ(ExecutePhase(OpType::kAllgather), "ALLGATHER");
}

TEST(Timeline, UnwritablePathIsAClearError) {
  Timeline t;
  Status s = t.Start("/nonexistent-dir/x.json", false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/x.json"), std::string::npos);
}

}  // namespace
}  // namespace kolo
