// Size sweep: allreduce of one float32 buffer from 4 B to 256 MiB (powers of
// 4) through kolo's C++ API and through a raw MPI_Allreduce of the same
// buffer, in the same run. The two paths alternate in rounds so that neither
// gets the warmer machine. From 1 MiB on it also times a plain memcpy of the
// buffer on every rank at once: the memory-bandwidth floor of kolo's
// shared-memory allreduce, which reads and writes main memory once per byte
// and rank (copy into the slot, reduce and copy out in cache). Prints one
// JSON object on rank 0.
//
//   kolorun -np 2 build/bench/allreduce_sweep [max_bytes] [seconds_per_size] [max_iterations]
//
// max_iterations (default 3000) raised makes a long loop of one size to profile.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kolo/mpi_handle.h"
#include "kolo/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))];
}

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// Median time for one thread to wake another and be woken back (condition
// variable ping-pong): the two hand-offs every operation of a runtime with a
// background thread pays (caller -> background thread -> caller), measured on
// every rank at once like the collectives.
double HandoffRoundTripMicros() {
  std::mutex m;
  std::condition_variable cv;
  int turn = 0;
  const int n = 5000;
  std::thread peer([&] {
    for (int i = 0; i < n; ++i) {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return turn == 1; });
      turn = 0;
      cv.notify_all();
    }
  });
  std::vector<double> us;
  for (int i = 0; i < n; ++i) {
    auto start = Clock::now();
    std::unique_lock<std::mutex> lock(m);
    turn = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return turn == 0; });
    us.push_back(Seconds(start) * 1e6);
  }
  peer.join();
  return Median(us);
}

// Every rank must run the same number of iterations: rank 0 decides from a
// probe and broadcasts the count.
int AgreeIterations(double seconds_per_call, double budget, double most, MPI_Comm comm) {
  int n = static_cast<int>(std::clamp(budget / std::max(seconds_per_call, 1e-7), 5.0, most));
  MPI_Bcast(&n, 1, MPI_INT, 0, comm);
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_bytes = argc > 1 ? std::atoll(argv[1]) : (int64_t{256} << 20);
  const double budget = argc > 2 ? std::atof(argv[2]) : 0.4;
  const double most_iterations = argc > 3 ? std::atof(argv[3]) : 3000.0;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);

  kolo::InitOptions init;
  init.comm = kolo::HandleOfComm(MPI_COMM_WORLD);
  auto rt = kolo::Runtime::Create(init);
  if (!rt.ok()) {
    std::fprintf(stderr, "%s\n", rt.status().ToString().c_str());
    return 1;
  }
  kolo::Runtime& kolo_rt = *rt.value();

  MPI_Barrier(comm);
  double handoff = HandoffRoundTripMicros();
  MPI_Allreduce(MPI_IN_PLACE, &handoff, 1, MPI_DOUBLE, MPI_MAX, comm);
  char head[160];
  std::snprintf(head, sizeof(head), ", \"handoff_round_trip_us\": %.2f", handoff);
  std::string json = "{\"benchmark\": \"allreduce_sweep\", \"np\": " + std::to_string(size) + head +
                     ", \"rows\": [";
  std::vector<float> x(static_cast<size_t>(max_bytes / 4), 1.0f);
  std::vector<float> copy(x.size(), 0.0f);
  bool first = true;
  for (int64_t bytes = 4; bytes <= max_bytes; bytes *= 4) {
    const int64_t count = bytes / 4;
    kolo::TensorView view{x.data(), kolo::DataType::kFloat32, {count}};
    kolo::AllreduceOptions opts;
    opts.op = kolo::ReduceOp::kSum;
    opts.name = "sweep." + std::to_string(bytes);
    opts.caller_waits = true;  // a blocking allreduce: Wait at once
    auto raw_once = [&] {
      MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
    };
    auto kolo_once = [&] {
      kolo::Status s = kolo_rt.Wait(kolo_rt.EnqueueAllreduce(view, view, opts).value());
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        std::exit(1);
      }
    };
    // Warm up both paths (first touch, MPI's temporaries, kolo's cache).
    auto t = Clock::now();
    for (int i = 0; i < 3; ++i) raw_once();
    const double probe = Seconds(t) / 3;
    for (int i = 0; i < 3; ++i) kolo_once();
    const int iterations = AgreeIterations(probe, budget, most_iterations, comm);
    std::vector<double> raw_us, kolo_us;
    const int rounds = 4;
    for (int round = 0; round < rounds; ++round) {
      const int n = std::max(1, iterations / rounds);
      for (int i = 0; i < n; ++i) {
        t = Clock::now();
        raw_once();
        raw_us.push_back(Seconds(t) * 1e6);
      }
      for (int i = 0; i < n; ++i) {
        t = Clock::now();
        kolo_once();
        kolo_us.push_back(Seconds(t) * 1e6);
      }
    }
    // The floor: every rank copies the buffer once, all at the same time.
    std::vector<double> memcpy_us;
    if (bytes >= (int64_t{1} << 20)) {
      for (int i = 0; i < std::max(3, std::min(iterations, 20)); ++i) {
        MPI_Barrier(comm);
        t = Clock::now();
        std::memcpy(copy.data(), x.data(), static_cast<size_t>(bytes));
        memcpy_us.push_back(Seconds(t) * 1e6);
      }
    }
    // A collective's time is the slowest rank's.
    double med[5] = {Median(raw_us), Median(kolo_us), Percentile(raw_us, 0.99),
                     Percentile(kolo_us, 0.99), memcpy_us.empty() ? 0.0 : Median(memcpy_us)};
    MPI_Allreduce(MPI_IN_PLACE, med, 5, MPI_DOUBLE, MPI_MAX, comm);
    const double factor = 2.0 * (size - 1) / size;
    char row[512];
    std::snprintf(row, sizeof(row),
                  "%s\n  {\"bytes\": %lld, \"iterations\": %zu, \"raw_us\": %.2f, "
                  "\"kolo_us\": %.2f, \"raw_p99_us\": %.2f, \"kolo_p99_us\": %.2f, "
                  "\"raw_busbw_gbs\": %.3f, \"kolo_busbw_gbs\": %.3f, \"memcpy_us\": %.2f}",
                  first ? "" : ",", static_cast<long long>(bytes), raw_us.size(), med[0], med[1],
                  med[2], med[3], bytes * factor / med[0] / 1e3, bytes * factor / med[1] / 1e3,
                  med[4]);
    json += row;
    first = false;
    if (rank == 0) {
      std::fprintf(stderr, "%10lld B  raw %10.1f us  kolo %10.1f us  (kolo/raw %.2f)\n",
                   static_cast<long long>(bytes), med[0], med[1], med[1] / med[0]);
    }
  }
  json += "\n]}\n";
  kolo::Status s = kolo_rt.Shutdown();
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
  if (rank == 0) std::fputs(json.c_str(), stdout);
  MPI_Comm_free(&comm);
  MPI_Finalize();
  return 0;
}
