#include "message.h"

#include <charconv>
#include <cstring>

#include "wire_generated.h"

namespace kolo {
namespace {

namespace fb = flatbuffers;

static_assert(FLATBUFFERS_LITTLEENDIAN, "the wire format is read by memcpy on little-endian hosts");

// Copies a vector of scalars byte-wise: flatbuffers 2.0's verifier checks the
// alignment of a vector's length field but not of its 8-byte elements, so a
// corrupt message could otherwise make us read misaligned.
template <typename T>
std::vector<T> ToVector(const fb::Vector<T>* v) {
  if (v == nullptr) return {};
  std::vector<T> out(v->size());
  if (!out.empty()) std::memcpy(out.data(), v->Data(), out.size() * sizeof(T));
  return out;
}

// Messages gathered from several ranks start at arbitrary byte offsets;
// flatbuffers reads scalars in place, so decode from an 8-byte aligned copy.
class AlignedBytes {
 public:
  AlignedBytes(const uint8_t* data, size_t size) : data_(data), size_(size) {
    if (data != nullptr && reinterpret_cast<uintptr_t>(data) % 8 != 0) {
      copy_.resize((size + 7) / 8);
      std::memcpy(copy_.data(), data, size);
      data_ = reinterpret_cast<const uint8_t*>(copy_.data());
    }
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  const uint8_t* data_;
  size_t size_;
  std::vector<uint64_t> copy_;
};

std::string ToString(const fb::String* s) { return s == nullptr ? std::string() : s->str(); }

bool ValidEnums(uint8_t op, uint8_t dtype, uint8_t reduce_op) {
  return op <= static_cast<uint8_t>(OpType::kResync) && dtype < kNumDataTypes &&
         reduce_op < kNumReduceOps;
}

}  // namespace

bool Request::operator==(const Request& o) const {
  return rank == o.rank && op == o.op && name == o.name && dtype == o.dtype && shape == o.shape &&
         reduce_op == o.reduce_op && prescale == o.prescale && postscale == o.postscale &&
         root == o.root && device == o.device && group == o.group && group_size == o.group_size &&
         ranks == o.ranks && process_set == o.process_set && unnamed_epoch == o.unnamed_epoch &&
         unnamed_index == o.unnamed_index && call_site == o.call_site && refusal == o.refusal;
}

bool Response::operator==(const Response& o) const {
  return op == o.op && names == o.names && error == o.error && dtype == o.dtype &&
         reduce_op == o.reduce_op && prescale == o.prescale && postscale == o.postscale &&
         root == o.root && device == o.device && sizes == o.sizes && value == o.value &&
         ranks == o.ranks && unnamed_epoch == o.unnamed_epoch && unnamed_from == o.unnamed_from;
}

std::vector<uint8_t> EncodeRequests(const std::vector<Request>& requests) {
  fb::FlatBufferBuilder b(256 + 128 * requests.size());
  std::vector<fb::Offset<wire::Request>> offsets;
  offsets.reserve(requests.size());
  for (const Request& r : requests) {
    offsets.push_back(wire::CreateRequest(
        b, r.rank, static_cast<uint8_t>(r.op), b.CreateString(r.name),
        static_cast<uint8_t>(r.dtype), b.CreateVector(r.shape), static_cast<uint8_t>(r.reduce_op),
        r.prescale, r.postscale, r.root, r.device, b.CreateString(r.group), r.group_size,
        b.CreateVector(r.ranks), r.process_set,
        r.call_site.empty() ? fb::Offset<fb::String>() : b.CreateString(r.call_site),
        r.unnamed_epoch, r.unnamed_index,
        r.refusal.empty() ? fb::Offset<fb::String>() : b.CreateString(r.refusal)));
  }
  b.Finish(wire::CreateRequestList(b, b.CreateVector(offsets)));
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

std::vector<uint8_t> EncodeResponses(const std::vector<Response>& responses) {
  fb::FlatBufferBuilder b(256 + 128 * responses.size());
  std::vector<fb::Offset<wire::Response>> offsets;
  offsets.reserve(responses.size());
  for (const Response& r : responses) {
    offsets.push_back(wire::CreateResponse(
        b, static_cast<uint8_t>(r.op), b.CreateVectorOfStrings(r.names), b.CreateString(r.error),
        static_cast<uint8_t>(r.dtype), static_cast<uint8_t>(r.reduce_op), r.prescale, r.postscale,
        r.root, r.device, b.CreateVector(r.sizes), r.value, b.CreateVector(r.ranks),
        r.unnamed_epoch, r.unnamed_from));
  }
  b.Finish(wire::CreateResponseList(b, b.CreateVector(offsets)));
  return std::vector<uint8_t>(b.GetBufferPointer(), b.GetBufferPointer() + b.GetSize());
}

namespace {

class Fnv1a {
 public:
  void Bytes(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
  }
  template <typename T>
  void Value(T v) {
    Bytes(&v, sizeof(v));
  }
  // Length first, so that ("ab", "c") and ("a", "bc") differ.
  void String(const std::string& s) {
    Value<uint64_t>(s.size());
    Bytes(s.data(), s.size());
  }
  template <typename T>
  void Values(const std::vector<T>& v) {
    Value<uint64_t>(v.size());
    if (!v.empty()) Bytes(v.data(), v.size() * sizeof(T));
  }
  uint64_t digest() const { return h_; }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

}  // namespace

uint64_t RequestDigest(const Request& r) {
  Fnv1a h;
  h.Value(static_cast<uint8_t>(r.op));
  h.String(r.name);
  h.Value(static_cast<uint8_t>(r.dtype));
  h.Values(r.shape);
  h.Value(static_cast<uint8_t>(r.reduce_op));
  h.Value(r.prescale);
  h.Value(r.postscale);
  h.Value(r.root);
  h.Value(r.device);
  h.String(r.group);
  h.Value(r.group_size);
  h.Values(r.ranks);
  h.Value(r.process_set);
  h.Value(r.unnamed_epoch);
  h.Value(r.unnamed_index);
  h.String(r.call_site);
  h.String(r.refusal);
  return h.digest();
}

std::string PairingKey(const Request& r) {
  if (!r.unnamed()) return r.name;
  // A group's members are "<group>.<i>"; a lone collective pairs like member 0,
  // so that a group and a lone collective of the same number meet (and differ).
  int64_t member = 0;
  if (!r.group.empty() && r.name.size() > r.group.size() + 1) {
    const char* first = r.name.data() + r.group.size() + 1;
    std::from_chars(first, r.name.data() + r.name.size(), member);
  }
  return "\x01" + std::to_string(r.unnamed_epoch) + "." + std::to_string(r.unnamed_index) + "." +
         std::to_string(member);
}

std::vector<uint8_t> EncodeRequestMessage(const RequestMessage& m) {
  const uint64_t header =
      (m.whole_reference ? 1u : 0u) | (static_cast<uint64_t>(m.reference_bits.size()) << 1);
  std::vector<uint8_t> out(8 * (1 + m.reference_bits.size()));
  std::memcpy(out.data(), &header, 8);
  if (!m.reference_bits.empty()) {
    std::memcpy(out.data() + 8, m.reference_bits.data(), 8 * m.reference_bits.size());
  }
  if (!m.requests.empty()) {
    std::vector<uint8_t> requests = EncodeRequests(m.requests);
    out.insert(out.end(), requests.begin(), requests.end());
  }
  return out;
}

Result<RequestMessage> DecodeRequestMessage(const uint8_t* data, size_t size,
                                            size_t reference_size) {
  auto malformed = [&](const std::string& why) {
    return Status::Internal("received a malformed request message (" + std::to_string(size) +
                            " bytes: " + why + "); the ranks may run different kolo versions");
  };
  uint64_t header = 0;
  if (data == nullptr || size < 8) return malformed("no header");
  std::memcpy(&header, data, 8);
  RequestMessage m;
  m.whole_reference = (header & 1u) != 0;
  const uint64_t words = header >> 1;
  if (words != 0 && words != (reference_size + 63) / 64) {
    return malformed(std::to_string(words) + " reference words for a reference of " +
                     std::to_string(reference_size));
  }
  if (words > (size - 8) / 8) return malformed("truncated reference words");
  m.reference_bits.resize(words);
  if (words > 0) std::memcpy(m.reference_bits.data(), data + 8, 8 * words);
  const size_t used = 8 * (1 + words);
  if (used < size) {
    Result<std::vector<Request>> requests = DecodeRequests(data + used, size - used);
    if (!requests.ok()) return requests.status();
    m.requests = std::move(requests).value();
  }
  return m;
}

Result<std::vector<Request>> DecodeRequests(const uint8_t* raw, size_t size) {
  AlignedBytes bytes(raw, size);
  const uint8_t* data = bytes.data();
  fb::Verifier verifier(data, size);
  if (data == nullptr || !verifier.VerifyBuffer<wire::RequestList>(nullptr)) {
    return Status::Internal("received a malformed request list (" + std::to_string(size) +
                            " bytes); the ranks may run different kolo versions");
  }
  const auto* list = fb::GetRoot<wire::RequestList>(data);
  std::vector<Request> out;
  if (list->requests() == nullptr) return out;
  out.reserve(list->requests()->size());
  for (const wire::Request* w : *list->requests()) {
    if (!ValidEnums(w->op(), w->dtype(), w->reduce_op())) {
      return Status::Internal("received a request with an out-of-range enum value");
    }
    Request r;
    r.rank = w->rank();
    r.op = static_cast<OpType>(w->op());
    r.name = ToString(w->name());
    r.dtype = static_cast<DataType>(w->dtype());
    r.shape = ToVector(w->shape());
    r.reduce_op = static_cast<ReduceOp>(w->reduce_op());
    r.prescale = w->prescale();
    r.postscale = w->postscale();
    r.root = w->root();
    r.device = w->device();
    r.group = ToString(w->group());
    r.group_size = w->group_size();
    r.ranks = ToVector(w->ranks());
    r.process_set = w->process_set();
    r.call_site = ToString(w->call_site());
    r.unnamed_epoch = w->unnamed_epoch();
    r.unnamed_index = w->unnamed_index();
    r.refusal = ToString(w->refusal());
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::vector<Response>> DecodeResponses(const uint8_t* raw, size_t size) {
  AlignedBytes bytes(raw, size);
  const uint8_t* data = bytes.data();
  fb::Verifier verifier(data, size);
  if (data == nullptr || !verifier.VerifyBuffer<wire::ResponseList>(nullptr)) {
    return Status::Internal("received a malformed response list (" + std::to_string(size) +
                            " bytes); the ranks may run different kolo versions");
  }
  const auto* list = fb::GetRoot<wire::ResponseList>(data);
  std::vector<Response> out;
  if (list->responses() == nullptr) return out;
  out.reserve(list->responses()->size());
  for (const wire::Response* w : *list->responses()) {
    if (!ValidEnums(w->op(), w->dtype(), w->reduce_op())) {
      return Status::Internal("received a response with an out-of-range enum value");
    }
    Response r;
    r.op = static_cast<OpType>(w->op());
    if (w->names() != nullptr) {
      for (const fb::String* s : *w->names()) r.names.push_back(ToString(s));
    }
    r.error = ToString(w->error());
    r.dtype = static_cast<DataType>(w->dtype());
    r.reduce_op = static_cast<ReduceOp>(w->reduce_op());
    r.prescale = w->prescale();
    r.postscale = w->postscale();
    r.root = w->root();
    r.device = w->device();
    r.sizes = ToVector(w->sizes());
    r.value = w->value();
    r.ranks = ToVector(w->ranks());
    r.unnamed_epoch = w->unnamed_epoch();
    r.unnamed_from = w->unnamed_from();
    out.push_back(std::move(r));
  }
  return out;
}

std::string DescribeTensor(const Request& r) {
  return std::string(OpTypeName(r.op)) + " tensor '" + r.name + "'";
}

const char* OpTypeName(OpType op) {
  switch (op) {
    case OpType::kAllreduce:
      return "allreduce";
    case OpType::kAllgather:
      return "allgather";
    case OpType::kBroadcast:
      return "broadcast";
    case OpType::kAlltoall:
      return "alltoall";
    case OpType::kReducescatter:
      return "reducescatter";
    case OpType::kBarrier:
      return "barrier";
    case OpType::kJoin:
      return "join";
    case OpType::kAddProcessSet:
      return "add_process_set";
    case OpType::kRemoveProcessSet:
      return "remove_process_set";
    case OpType::kError:
      return "error";
    case OpType::kMissing:
      return "missing";
    case OpType::kResync:
      return "resync";
  }
  return "unknown";
}

}  // namespace kolo
