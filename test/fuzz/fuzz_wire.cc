// Wire messages from another rank: a corrupt or truncated buffer must be
// rejected with an error, never read out of bounds; what decodes must
// re-encode to something that decodes to the same messages.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "message.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto requests = kolo::DecodeRequests(data, size);
  if (requests.ok()) {
    std::vector<uint8_t> again = kolo::EncodeRequests(requests.value());
    auto round = kolo::DecodeRequests(again.data(), again.size());
    if (!round.ok() || round.value().size() != requests.value().size()) std::abort();
    for (size_t i = 0; i < round.value().size(); ++i) {
      if (!(round.value()[i] == requests.value()[i])) std::abort();
    }
  }
  // A slow-path answer to a reference of the size the first byte says.
  auto message = kolo::DecodeRequestMessage(data, size, size > 0 ? data[0] : 0);
  if (message.ok()) {
    std::vector<uint8_t> again = kolo::EncodeRequestMessage(message.value());
    auto round = kolo::DecodeRequestMessage(again.data(), again.size(), size > 0 ? data[0] : 0);
    if (!round.ok() || round.value().reference_bits != message.value().reference_bits ||
        round.value().whole_reference != message.value().whole_reference ||
        round.value().requests.size() != message.value().requests.size()) {
      std::abort();
    }
  }
  auto responses = kolo::DecodeResponses(data, size);
  if (responses.ok()) {
    std::vector<uint8_t> again = kolo::EncodeResponses(responses.value());
    auto round = kolo::DecodeResponses(again.data(), again.size());
    if (!round.ok() || round.value().size() != responses.value().size()) std::abort();
  }
  return 0;
}
