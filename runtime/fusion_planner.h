// Fuses compatible allreduce responses into fewer, larger ones.
#pragma once

#include <cstdint>
#include <vector>

#include "message.h"

namespace kolo {

class FusionPlanner {
 public:
  // Every rank calls Plan with the same responses and gets the same plan.
  // Allreduce responses that agree on dtype, reduce op, scale factors and
  // device are merged (in order of first appearance) while the merged size
  // stays within `threshold_bytes`. A response of at least `in_place_bytes`
  // (or larger than the threshold) runs alone, in place: copying it would cost
  // more than the call it saves. Other responses keep their position.
  static std::vector<Response> Plan(std::vector<Response> responses, int64_t threshold_bytes,
                                    int64_t in_place_bytes);

  static int64_t Bytes(const Response& response);
};

}  // namespace kolo
