#include "message.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace kolo {
namespace {

Request SampleRequest() {
  Request r;
  r.rank = 3;
  r.op = OpType::kAllreduce;
  r.name = "grad.layer1.weight";
  r.dtype = DataType::kBFloat16;
  r.shape = {17, 4, 0};
  r.reduce_op = ReduceOp::kMax;
  r.prescale = 0.5;
  r.postscale = 2.0;
  r.root = 1;
  r.group = "g";
  r.group_size = 2;
  r.ranks = {0, 2};
  r.process_set = 3;
  r.unnamed_epoch = 2;
  r.call_site = "train.py:57 in step";
  return r;
}

TEST(Message, RequestsRoundTrip) {
  std::vector<Request> in = {SampleRequest(), Request()};
  std::vector<uint8_t> bytes = EncodeRequests(in);
  Result<std::vector<Request>> out = DecodeRequests(bytes.data(), bytes.size());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out.value().size(), 2u);
  EXPECT_TRUE(out.value()[0] == in[0]);
  EXPECT_TRUE(out.value()[1] == in[1]);
}

TEST(Message, EmptyListRoundTrips) {
  std::vector<uint8_t> bytes = EncodeRequests({});
  Result<std::vector<Request>> out = DecodeRequests(bytes.data(), bytes.size());
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out.value().empty());
}

TEST(Message, ResponsesRoundTrip) {
  Response r;
  r.op = OpType::kAllgather;
  r.names = {"a", "b"};
  r.error = "none";
  r.dtype = DataType::kInt64;
  r.sizes = {1, 2, 3};
  r.value = 7;
  r.ranks = {4};
  r.cancel_unnamed_epoch = 3;
  std::vector<uint8_t> bytes = EncodeResponses({r});
  Result<std::vector<Response>> out = DecodeResponses(bytes.data(), bytes.size());
  ASSERT_TRUE(out.ok());
  ASSERT_EQ(out.value().size(), 1u);
  EXPECT_TRUE(out.value()[0] == r);
}

TEST(Message, TruncatedBytesAreRejected) {
  std::vector<uint8_t> bytes = EncodeRequests({SampleRequest()});
  for (size_t n = 0; n < bytes.size(); n += 3) {
    Result<std::vector<Request>> out = DecodeRequests(bytes.data(), n);
    EXPECT_FALSE(out.ok()) << "accepted a message truncated to " << n << " bytes";
  }
}

TEST(Message, CorruptedBytesNeverCrash) {
  std::vector<uint8_t> good = EncodeRequests({SampleRequest(), SampleRequest()});
  std::mt19937 gen(42);
  int rejected = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::vector<uint8_t> bad = good;
    for (int k = 0; k < 4; ++k) bad[gen() % bad.size()] = static_cast<uint8_t>(gen());
    Result<std::vector<Request>> out = DecodeRequests(bad.data(), bad.size());
    if (!out.ok()) {
      ++rejected;
      const std::string& m = out.status().message();
      EXPECT_TRUE(m.find("malformed") != std::string::npos ||
                  m.find("out-of-range") != std::string::npos)
          << m;
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(Message, GarbageIsRejected) {
  std::vector<uint8_t> garbage(64, 0xff);
  EXPECT_FALSE(DecodeResponses(garbage.data(), garbage.size()).ok());
  EXPECT_FALSE(DecodeResponses(nullptr, 0).ok());
}

}  // namespace
}  // namespace kolo

namespace kolo {
namespace {

TEST(Message, DecodesFromAnUnalignedOffset) {
  // A gathered buffer holds each rank's message at an arbitrary byte offset.
  std::vector<uint8_t> bytes = EncodeRequests({SampleRequest()});
  std::vector<uint8_t> shifted(bytes.size() + 3);
  std::memcpy(shifted.data() + 3, bytes.data(), bytes.size());
  Result<std::vector<Request>> out = DecodeRequests(shifted.data() + 3, bytes.size());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out.value()[0] == SampleRequest());
}

}  // namespace
}  // namespace kolo
