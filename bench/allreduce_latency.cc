// Allreduce latency through kolo's C++ API against a raw MPI_Allreduce of the
// same buffer, in the same run (default: one float32, 4 bytes).
//
//   kolorun -np 2 build/bench/allreduce_latency [iterations] [bytes]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kolo/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * (v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 2000;
  const int64_t count = argc > 2 ? std::max<int64_t>(1, std::atoll(argv[2]) / 4) : 1;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  std::vector<double> raw_us, kolo_us;
  int rank = 0, size = 1;
  {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    std::vector<float> x(count, 1.0f);
    for (int i = 0; i < iterations + 100; ++i) {
      auto t = Clock::now();
      MPI_Allreduce(MPI_IN_PLACE, x.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, comm);
      if (i >= 100)
        raw_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    }
    MPI_Comm_free(&comm);
  }
  {
    kolo::InitOptions options;
    options.comm = MPI_COMM_WORLD;
    auto rt = kolo::Runtime::Create(options);
    if (!rt.ok()) {
      std::fprintf(stderr, "%s\n", rt.status().ToString().c_str());
      return 1;
    }
    std::vector<float> x(count, 1.0f);
    kolo::TensorView v{x.data(), kolo::DataType::kFloat32, {count}};
    kolo::AllreduceOptions opts;
    opts.op = kolo::ReduceOp::kSum;
    opts.name = "latency";
    for (int i = 0; i < iterations + 100; ++i) {
      auto t = Clock::now();
      kolo::Status s = rt.value()->Wait(rt.value()->EnqueueAllreduce(v, v, opts).value());
      if (!s.ok()) return 1;
      if (i >= 100)
        kolo_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t).count());
    }
    kolo::Status s = rt.value()->Shutdown();
    (void)s;
  }
  if (rank == 0) {
    std::printf("%lld-byte allreduce, np=%d, %d iterations (us)\n",
                static_cast<long long>(count * 4), size, iterations);
    std::printf("| path | p50 | p99 |\n| --- | --- | --- |\n");
    std::printf("| raw MPI_Allreduce | %.1f | %.1f |\n", Percentile(raw_us, 0.5),
                Percentile(raw_us, 0.99));
    std::printf("| kolo C++ API | %.1f | %.1f |\n", Percentile(kolo_us, 0.5),
                Percentile(kolo_us, 0.99));
  }
  MPI_Finalize();
  return 0;
}
