// Coordinator cost at N = 2 ... 16384 simulated ranks, for a 161-tensor step
// (ResNet-50's parameter count). No processes: the coordinator is a pure
// function of the requests, so one process plays every rank.
//
//   slow path (rank 0 of the set, first step or after a change): decode every
//     rank's gathered answer to rank 0's reference (RequestMessage), add what
//     each holds, ComputeResponses, encode the response list that is
//     broadcast. Three cases: every rank in step with rank 0 (one flag per
//     rank), out of step (a bit per rank and reference request), and the
//     worst case, every rank's 161 requests in full (no reference).
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
#include <unordered_set>
#include <utility>
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

// How the other ranks answer rank 0's reference in a slow-path round.
enum class Answer {
  kWhole,    // in step with rank 0: every rank holds all 161 (one flag each)
  kPartial,  // out of step: rank r holds the first 161 - (r % 17) (a bit each)
  kFull,     // no reference (rank 0 had nothing yet): all 161 in full
};

// Rank 0's work in one slow-path round: decode every rank's message, add
// what they hold, decide, encode the broadcast reply.
double SlowPath(int n, Answer answer) {
  const std::vector<kolo::Request> reference = StepRequests(0);
  std::vector<std::vector<uint8_t>> messages;
  messages.reserve(n);
  kolo::RequestMessage own;
  own.requests = reference;
  messages.push_back(kolo::EncodeRequestMessage(own));
  for (int r = 1; r < n; ++r) {
    kolo::RequestMessage m;
    if (answer == Answer::kWhole) {
      m.whole_reference = true;
    } else if (answer == Answer::kPartial) {
      m.reference_bits.assign((kTensors + 63) / 64, 0);
      for (int i = 0; i < kTensors - r % 17; ++i)
        m.reference_bits[i / 64] |= uint64_t{1} << (i % 64);
    } else {
      m.requests = StepRequests(r);
    }
    messages.push_back(kolo::EncodeRequestMessage(m));
  }
  const size_t reference_size = answer == Answer::kFull ? 0 : reference.size();
  size_t responses = 0;
  double seconds = Time([&] {
    kolo::Coordinator coordinator(n, kolo::StallSettings{});
    auto now = Clock::now();
    kolo::RankBits whole(n);
    std::vector<std::pair<int, std::vector<uint64_t>>> partial;
    for (int r = 0; r < n; ++r) {
      auto decoded =
          kolo::DecodeRequestMessage(messages[r].data(), messages[r].size(), reference_size);
      if (!decoded.ok()) std::abort();
      kolo::RequestMessage& m = decoded.value();
      if (!m.requests.empty()) coordinator.AddRequests(r, m.requests, now);
      if (m.whole_reference) {
        whole.Set(r);
      } else if (!m.reference_bits.empty()) {
        partial.emplace_back(r, std::move(m.reference_bits));
      }
    }
    if (reference_size > 0) coordinator.AddReference(reference, whole, partial, now);
    kolo::CoordinatorOutcome out = coordinator.ComputeResponses(now);
    responses = kolo::EncodeResponses(out.responses).size();
  });
  if (responses == 0) std::abort();
  return seconds;
}

// One rank's own work in a slow-path round: digest its pending requests and
// answer the reference (ProcessSet::AnswerReference).
double RankSide() {
  const std::vector<kolo::Request> mine = StepRequests(1);
  std::vector<uint64_t> reference;
  for (const kolo::Request& r : StepRequests(0)) reference.push_back(kolo::RequestDigest(r));
  size_t bytes = 0;
  double seconds = Time([&] {
    std::unordered_set<uint64_t> held;
    for (const kolo::Request& r : mine) held.insert(kolo::RequestDigest(r));
    kolo::RequestMessage m;
    m.whole_reference = true;
    for (uint64_t d : reference) m.whole_reference &= held.count(d) > 0;
    bytes = kolo::EncodeRequestMessage(m).size();
  });
  if (bytes != 8) std::abort();
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
  const double rank_side = RankSide();
  std::printf(
      "{\"benchmark\": \"coordinator_cost\", \"tensors\": %d, \"rank_side_us\": %.3f, "
      "\"rows\": [",
      kTensors, rank_side * 1e6);
  std::fprintf(stderr, "every rank's own slow-path work: %.1f us\n", rank_side * 1e6);
  for (int n = 2; n <= max_ranks; n *= 2) {
    double slow = SlowPath(n, Answer::kWhole), partial = SlowPath(n, Answer::kPartial),
           full = SlowPath(n, Answer::kFull), fast = FastPath(n);
    std::printf(
        "%s\n  {\"ranks\": %d, \"slow_path_ms\": %.4f, \"slow_path_partial_ms\": %.4f, "
        "\"slow_path_full_ms\": %.4f, \"fast_path_us\": %.3f}",
        n == 2 ? "" : ",", n, slow * 1e3, partial * 1e3, full * 1e3, fast * 1e6);
    std::fprintf(stderr,
                 "%6d ranks  slow path: in step %8.3f ms, out of step %8.3f ms, all in full "
                 "%9.3f ms  fast path %7.2f us\n",
                 n, slow * 1e3, partial * 1e3, full * 1e3, fast * 1e6);
  }
  std::printf("\n]}\n");
  return 0;
}
