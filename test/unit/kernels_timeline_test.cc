#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "../../ops/cpu_kernels.h"
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

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
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

TEST(Timeline, UnwritablePathIsAClearError) {
  Timeline t;
  Status s = t.Start("/nonexistent-dir/x.json", false);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-dir/x.json"), std::string::npos);
}

}  // namespace
}  // namespace kolo
