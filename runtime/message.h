// The negotiation protocol's messages: what a rank asks for (Request) and
// what the coordinator decides (Response), with their wire encoding.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kolo/status.h"
#include "kolo/types.h"

namespace kolo {

// The collective a request asks for. Join, barrier and the process-set
// operations are negotiated like tensors so that every rank sees them in the
// same order.
enum class OpType : uint8_t {
  kAllreduce = 0,
  kAllgather = 1,
  kBroadcast = 2,
  kAlltoall = 3,
  kReducescatter = 4,
  kBarrier = 5,
  kJoin = 6,
  kAddProcessSet = 7,
  kRemoveProcessSet = 8,
  kError = 9,     // responses only
  kMissing = 10,  // responses only: the coordinator asks the ranks missing a tensor
  kResync = 11,   // responses only: ranks whose unnamed collectives are out of step drop some
};
const char* OpTypeName(OpType op);

struct Request {
  int32_t rank = 0;  // rank within the process set
  OpType op = OpType::kAllreduce;
  std::string name;
  DataType dtype = DataType::kFloat32;
  std::vector<int64_t> shape;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = -1;  // broadcast
  int32_t device = kCpuDevice;
  std::string group;           // grouped allreduce: the group's name; empty when not grouped
  int32_t group_size = 0;      // grouped allreduce: number of members
  std::vector<int32_t> ranks;  // add_process_set: the ranks; remove: {id}
  // The process set the rank submitted the tensor on. A request naming another
  // set than the one it travels on says "I have this tensor, but on that set".
  int32_t process_set = 0;
  // Unnamed collectives: the naming epoch their automatic name was counted in
  // (a completed barrier or join starts a new one) and their number in it, in
  // the rank's call order; -1 for a collective the caller named.
  int64_t unnamed_epoch = -1;
  int64_t unnamed_index = -1;
  // Where the caller made the call ("train.py:57 in step"), if it said; for an
  // unnamed collective it tells ranks that are out of step from a plain mismatch.
  std::string call_site;
  // Non-empty: this rank refused the collective on its calling thread (a bad
  // input: an unsupported dtype, a non-contiguous tensor, bad splits, ...), and
  // this says why. Only op, name, group, process set, unnamed number and call
  // site are meaningful; the coordinator fails the collective on every rank
  // once all ranks have sent it or refused it. Travels in full, never as a
  // digest bit: the refusing rank holds no entry for it.
  std::string refusal;

  bool unnamed() const { return unnamed_epoch >= 0; }
  bool operator==(const Request& o) const;
};

// How error texts name a request's tensor: "allreduce tensor 'x'".
std::string DescribeTensor(const Request& r);

// How the error of a tensor that ranks submitted on different process sets
// begins (ranks that held it on another set remember it, see
// RuntimeImpl::HeldElsewhere).
inline constexpr char kProcessSetMismatch[] = "Mismatched process sets for ";

struct Response {
  OpType op = OpType::kAllreduce;  // kError for a failed negotiation
  std::vector<std::string> names;
  std::string error;  // kError: the message every rank raises
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t root = -1;
  int32_t device = kCpuDevice;
  // allreduce: elements per tensor (joined ranks reduce zeros of this size);
  // allgather: dim 0 of every rank.
  std::vector<int64_t> sizes;
  int32_t value = -1;          // join: last rank to join
  std::vector<int32_t> ranks;  // add/remove process set; missing: the ranks missing it
  // kResync: the ranks in `ranks` fail (with `error`) their pending unnamed
  // collectives of epoch `unnamed_epoch` numbered `unnamed_from` or later, and
  // number their next one `unnamed_from` again.
  int64_t unnamed_epoch = -1;
  int64_t unnamed_from = -1;
  // kError for a collective some ranks refused (Request::refusal): `ranks`
  // are the refusing ranks, which hold no entry for it (a refusing rank may
  // already have started the name again: that entry is not this one's).

  bool operator==(const Response& o) const;
};

// What pairs an unnamed request with other ranks' requests: its epoch, its
// number and its place in a group, whatever its collective ("\x01e.n.i", which
// no name a caller gives can equal). Its name for a named request.
std::string PairingKey(const Request& request);

// A digest of everything in a request but its rank: two requests with equal
// digests ask for the same collective (FNV-1a over the fields, 64 bits; the
// same on every host).
uint64_t RequestDigest(const Request& request);

// What a rank sends the coordinator in a slow-path round. The set's rank 0
// first broadcasts the digests of its own pending requests (the reference);
// a rank answers with which of them it holds too, as one flag when it holds
// them all, and sends in full only the requests that are not among them. At
// scale this lets rank 0 count identical requests a word of ranks at a time
// instead of decoding every rank's list.
struct RequestMessage {
  bool whole_reference = false;          // holds every request of the reference
  std::vector<uint64_t> reference_bits;  // otherwise: bit i = holds reference request i
  std::vector<Request> requests;         // in full: the new ones not in the reference
};

std::vector<uint8_t> EncodeRequests(const std::vector<Request>& requests);
// Layout: one little-endian word (bit 0: whole reference; bits 1..: the
// number of reference words that follow), the words, then EncodeRequests'
// bytes when there are requests.
std::vector<uint8_t> EncodeRequestMessage(const RequestMessage& message);
std::vector<uint8_t> EncodeResponses(const std::vector<Response>& responses);
// Reject bytes that are not a well-formed message (a corrupt or truncated
// buffer never causes an out-of-bounds read) and values out of range.
Result<std::vector<Request>> DecodeRequests(const uint8_t* data, size_t size);
Result<std::vector<Response>> DecodeResponses(const uint8_t* data, size_t size);
// `reference_size`: the number of requests in the reference the message
// answers; a message with another number of reference words is rejected.
Result<RequestMessage> DecodeRequestMessage(const uint8_t* data, size_t size,
                                            size_t reference_size);

}  // namespace kolo
