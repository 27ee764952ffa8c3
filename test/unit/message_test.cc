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
  r.unnamed_index = 5;
  r.call_site = "train.py:57 in step";
  return r;
}

TEST(Message, RequestsRoundTrip) {
  Request refusal = SampleRequest();
  refusal.refusal = "allreduce input is not contiguous";
  std::vector<Request> in = {SampleRequest(), Request(), refusal};
  std::vector<uint8_t> bytes = EncodeRequests(in);
  Result<std::vector<Request>> out = DecodeRequests(bytes.data(), bytes.size());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ASSERT_EQ(out.value().size(), 3u);
  EXPECT_TRUE(out.value()[0] == in[0]);
  EXPECT_TRUE(out.value()[1] == in[1]);
  EXPECT_TRUE(out.value()[2] == in[2]);
  EXPECT_EQ(out.value()[2].refusal, "allreduce input is not contiguous");
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
  r.unnamed_epoch = 3;
  r.unnamed_from = 9;
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

TEST(Message, DigestIgnoresTheRankAndSeesEveryOtherField) {
  const Request base = SampleRequest();
  Request other_rank = base;
  other_rank.rank = 0;
  EXPECT_EQ(RequestDigest(base), RequestDigest(other_rank));
  std::vector<Request> changed(15, base);
  changed[0].op = OpType::kBroadcast;
  changed[1].name += "x";
  changed[2].dtype = DataType::kFloat32;
  changed[3].shape = {17, 4, 1};
  changed[4].reduce_op = ReduceOp::kMin;
  changed[5].prescale = 0.25;
  changed[6].postscale = 1.0;
  changed[7].root = 0;
  changed[8].device = 1;
  changed[9].group = "h";
  changed[10].group_size = 3;
  changed[11].ranks = {0, 3};
  changed[12].process_set = 0;
  changed[13].call_site = "train.py:58 in step";
  changed[14].refusal = "refused";
  for (size_t i = 0; i < changed.size(); ++i) {
    EXPECT_NE(RequestDigest(changed[i]), RequestDigest(base)) << "field " << i;
  }
  Request epoch = base;
  epoch.unnamed_epoch = 3;
  EXPECT_NE(RequestDigest(epoch), RequestDigest(base));
  Request index = base;
  index.unnamed_index = 6;
  EXPECT_NE(RequestDigest(index), RequestDigest(base));
  // Field boundaries count: ("ab", "c") is not ("a", "bc").
  Request a = base, b = base;
  a.name = "ab";
  a.group = "c";
  b.name = "a";
  b.group = "bc";
  EXPECT_NE(RequestDigest(a), RequestDigest(b));
}

TEST(Message, RequestMessageRoundTrips) {
  RequestMessage m;
  m.reference_bits = {0x5, 0x1};
  m.requests = {SampleRequest()};
  std::vector<uint8_t> bytes = EncodeRequestMessage(m);
  Result<RequestMessage> out = DecodeRequestMessage(bytes.data(), bytes.size(), 70);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_FALSE(out.value().whole_reference);
  EXPECT_EQ(out.value().reference_bits, m.reference_bits);
  ASSERT_EQ(out.value().requests.size(), 1u);
  EXPECT_TRUE(out.value().requests[0] == SampleRequest());

  RequestMessage whole;
  whole.whole_reference = true;
  bytes = EncodeRequestMessage(whole);
  EXPECT_EQ(bytes.size(), 8u);  // what most ranks send at scale
  out = DecodeRequestMessage(bytes.data(), bytes.size(), 70);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_TRUE(out.value().whole_reference);
  EXPECT_TRUE(out.value().reference_bits.empty());
  EXPECT_TRUE(out.value().requests.empty());
}

TEST(Message, MalformedRequestMessagesAreRejected) {
  RequestMessage m;
  m.reference_bits = {0x5, 0x1};
  m.requests = {SampleRequest()};
  std::vector<uint8_t> bytes = EncodeRequestMessage(m);
  // The reference has another size than the words say.
  Result<RequestMessage> out = DecodeRequestMessage(bytes.data(), bytes.size(), 200);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("reference words"), std::string::npos)
      << out.status().message();
  // Shorter than its header, or than the words it announces.
  EXPECT_FALSE(DecodeRequestMessage(bytes.data(), 7, 70).ok());
  EXPECT_FALSE(DecodeRequestMessage(bytes.data(), 16, 70).ok());
  // Requests cut short.
  EXPECT_FALSE(DecodeRequestMessage(bytes.data(), bytes.size() - 5, 70).ok());
  EXPECT_FALSE(DecodeRequestMessage(nullptr, 0, 0).ok());
}

TEST(Message, UnnamedRequestsPairByNumberWhateverTheirCollective) {
  Request named;
  named.name = "allreduce.noname.3";  // a caller's name, however it looks
  EXPECT_EQ(PairingKey(named), "allreduce.noname.3");
  Request lone = named;
  lone.unnamed_epoch = 1;
  lone.unnamed_index = 3;
  Request other = lone;
  other.op = OpType::kAllgather;
  other.name = "allgather.noname.e1.3";
  EXPECT_EQ(PairingKey(lone), PairingKey(other));
  EXPECT_NE(PairingKey(lone), PairingKey(named));
  // A group's member 0 meets a lone collective of the same number; member 1 does not.
  Request member = lone;
  member.group = "grouped_allreduce.noname.e1.3";
  member.name = member.group + ".0";
  EXPECT_EQ(PairingKey(member), PairingKey(lone));
  member.name = member.group + ".1";
  EXPECT_NE(PairingKey(member), PairingKey(lone));
  Request later = lone;
  later.unnamed_index = 4;
  EXPECT_NE(PairingKey(later), PairingKey(lone));
}

}  // namespace
}  // namespace kolo
