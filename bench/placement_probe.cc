// Which placement a virtual machine's two vCPUs are in right now
// (docs/performance.md, "Machine and method"): two threads, pinned to CPUs 0
// and 1, pass a cache line back and forth; the fastest batch's round trip
// (anything else on the machine only ever adds time) says whether the two
// vCPUs sit on cores that share a cache ("near") or on different dies
// ("far"); docs/performance.md has the round trip of each. Run before each standalone benchmark job
// (bench/standalone_jobs.py), so that every figure carries its placement.
// Prints one JSON object.
//
//   build/bench/placement_probe [round_trips]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

// Between the round trips of the two placements (docs/performance.md);
// anything else (a machine with more than two CPUs, a busy one) still gets a
// figure and a label.
constexpr double kFarAboveNs = 150;

bool PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

struct alignas(64) Line {
  std::atomic<int64_t> value{0};
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t trips = argc > 1 ? std::atoll(argv[1]) : 2000;
  const int batches = 20;
  if (std::thread::hardware_concurrency() < 2) {
    std::printf("{\"placement\": \"one-cpu\", \"round_trip_ns\": null}\n");
    return 0;
  }
  Line line;
  std::atomic<bool> pinned_ok{true};
  // The peer answers every odd value with the next even one.
  std::thread peer([&] {
    if (!PinTo(1)) pinned_ok = false;
    for (int64_t expect = 1; expect < 2 * trips * batches; expect += 2) {
      while (line.value.load(std::memory_order_acquire) != expect) {
      }
      line.value.store(expect + 1, std::memory_order_release);
    }
  });
  if (!PinTo(0)) pinned_ok = false;
  std::vector<double> ns;
  int64_t v = 0;
  for (int b = 0; b < batches; ++b) {
    auto start = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < trips; ++i) {
      line.value.store(++v, std::memory_order_release);
      ++v;
      while (line.value.load(std::memory_order_acquire) != v) {
      }
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ns.push_back(seconds * 1e9 / static_cast<double>(trips));
  }
  peer.join();
  std::sort(ns.begin(), ns.end());
  const double fastest = ns.front();
  double load = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  std::printf(
      "{\"placement\": \"%s\", \"round_trip_ns\": %.1f, \"median_batch_ns\": %.1f, "
      "\"load_1min\": %.2f, \"pinned\": %s}\n",
      fastest > kFarAboveNs ? "far" : "near", fastest, ns[ns.size() / 2], load,
      pinned_ok ? "true" : "false");
  return 0;
}
