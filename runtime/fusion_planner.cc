#include "fusion_planner.h"

namespace kolo {
namespace {

bool Compatible(const Response& a, const Response& b) {
  return a.op == OpType::kAllreduce && b.op == OpType::kAllreduce && a.dtype == b.dtype &&
         a.reduce_op == b.reduce_op && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.device == b.device;
}

}  // namespace

int64_t FusionPlanner::Bytes(const Response& response) {
  int64_t elements = 0;
  for (int64_t s : response.sizes) elements += s;
  return elements * static_cast<int64_t>(DataTypeSize(response.dtype));
}

std::vector<Response> FusionPlanner::Plan(std::vector<Response> responses, int64_t threshold_bytes,
                                          int64_t in_place_bytes) {
  auto fusible = [&](int64_t bytes) { return bytes < threshold_bytes && bytes < in_place_bytes; };
  std::vector<Response> plan;
  plan.reserve(responses.size());
  std::vector<bool> taken(responses.size(), false);
  for (size_t i = 0; i < responses.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    Response fused = std::move(responses[i]);
    int64_t bytes = Bytes(fused);
    if (fused.op == OpType::kAllreduce && fusible(bytes)) {
      for (size_t j = i + 1; j < responses.size(); ++j) {
        if (taken[j] || !Compatible(fused, responses[j])) continue;
        int64_t more = Bytes(responses[j]);
        if (!fusible(more) || bytes + more > threshold_bytes) continue;
        taken[j] = true;
        bytes += more;
        for (auto& n : responses[j].names) fused.names.push_back(std::move(n));
        fused.sizes.insert(fused.sizes.end(), responses[j].sizes.begin(), responses[j].sizes.end());
      }
    }
    plan.push_back(std::move(fused));
  }
  return plan;
}

}  // namespace kolo
