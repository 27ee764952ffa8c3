// Coordinator cost at N = 2 ... 16384 simulated ranks, for a 161-tensor step
// (ResNet-50's parameter count). No processes: the coordinator is a pure
// function of the requests, so one process plays every rank.
//
//   slow path (rank 0 of the set, first step or after a change): decode every
//     rank's gathered request message, AddRequests, ComputeResponses, encode
//     the response list that is broadcast.
//   fast path (every rank, every step once the responses are cached): look the
//     161 requests up in the response cache, build the bit vector, and the
//     log2(N) pairwise ANDs a recursive-doubling MPI_Allreduce performs on it,
//     then read the ready tensors out of the result.
//
//   build/bench/coordinator_cost [max_ranks]     (prints JSON)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../runtime/coordinator.h"
#include "../runtime/message.h"
#include "../runtime/response_cache.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kTensors = 161;

std::vector<kolo::Request> StepRequests(int rank) {
  std::vector<kolo::Request> step;
  for (int i = 0; i < kTensors; ++i) {
    kolo::Request r;
    r.rank = rank;
    r.name = "DistributedOptimizer.Allreduce.layer" + std::to_string(i) + ".weight";
    r.shape = {64 + i, 3, 3};
    r.reduce_op = kolo::ReduceOp::kAverage;
    step.push_back(std::move(r));
  }
  return step;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median seconds of `fn` over enough repeats to take about 0.2 s (at least 3).
template <typename Fn>
double Time(Fn fn) {
  std::vector<double> t;
  auto begin = Clock::now();
  while (t.size() < 3 ||
         (Clock::now() - begin < std::chrono::milliseconds(200) && t.size() < 200)) {
    auto s = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double>(Clock::now() - s).count());
  }
  return Median(t);
}

double SlowPath(int n) {
  // Each rank's message differs only in its rank field; encode once per rank.
  std::vector<std::vector<uint8_t>> messages;
  messages.reserve(n);
  for (int r = 0; r < n; ++r) messages.push_back(kolo::EncodeRequests(StepRequests(r)));
  size_t responses = 0;
  double seconds = Time([&] {
    kolo::Coordinator coordinator(n, kolo::StallSettings{});
    auto now = Clock::now();
    for (int r = 0; r < n; ++r) {
      auto decoded = kolo::DecodeRequests(messages[r].data(), messages[r].size());
      if (!decoded.ok()) std::abort();
      coordinator.AddRequests(r, decoded.value(), now);
    }
    kolo::CoordinatorOutcome out = coordinator.ComputeResponses(now);
    responses = kolo::EncodeResponses(out.responses).size();
  });
  if (responses == 0) std::abort();
  return seconds;
}

double FastPath(int n) {
  kolo::ResponseCache cache(1024);
  std::vector<kolo::Request> step = StepRequests(0);
  for (const kolo::Request& r : step) {
    kolo::Response resp;
    resp.names = {r.name};
    resp.reduce_op = r.reduce_op;
    resp.sizes = {64 * 9};
    cache.Put(resp, r.shape);
  }
  const size_t words = (static_cast<size_t>(cache.bit_bound()) + 63) / 64;
  const int rounds = static_cast<int>(std::ceil(std::log2(std::max(n, 2))));
  std::vector<uint64_t> peer(1 + 2 * words, ~uint64_t{0});
  int ready = 0;
  double seconds = Time([&] {
    std::vector<uint64_t> bits(1 + 2 * words, 0);
    bits[0] = ~uint64_t{0};
    for (const kolo::Request& r : step) {
      kolo::ResponseCache::Lookup found = cache.Find(r, 0);
      if (found.state != kolo::ResponseCache::State::kHit) std::abort();
      bits[1 + found.bit / 64] |= uint64_t{1} << (found.bit % 64);
    }
    for (size_t w = 0; w < words; ++w) bits[1 + words + w] = ~uint64_t{0};
    for (int k = 0; k < rounds; ++k) {
      for (size_t w = 0; w < bits.size(); ++w) bits[w] &= peer[w];
    }
    ready = 0;
    for (int b = 0; b < cache.bit_bound(); ++b) {
      if ((bits[1 + b / 64] >> (b % 64)) & 1u) {
        cache.Touch(b);
        ++ready;
      }
    }
  });
  if (ready != kTensors) std::abort();
  return seconds;
}

}  // namespace

int main(int argc, char** argv) {
  const int max_ranks = argc > 1 ? std::atoi(argv[1]) : 16384;
  std::printf("{\"benchmark\": \"coordinator_cost\", \"tensors\": %d, \"rows\": [", kTensors);
  for (int n = 2; n <= max_ranks; n *= 2) {
    double slow = SlowPath(n), fast = FastPath(n);
    std::printf("%s\n  {\"ranks\": %d, \"slow_path_ms\": %.4f, \"fast_path_us\": %.3f}",
                n == 2 ? "" : ",", n, slow * 1e3, fast * 1e6);
    std::fprintf(stderr, "%6d ranks  slow path %9.3f ms  fast path %7.2f us\n", n, slow * 1e3,
                 fast * 1e6);
  }
  std::printf("\n]}\n");
  return 0;
}
