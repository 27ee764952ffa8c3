// The shared-memory allreduce alone (ops/shm_allreduce.h, no runtime, no
// negotiation): float32 sum in place at each size, hot (the same buffer every
// call) and cold (buffers taken in turn from a 256 MiB pool, so that every
// call starts from main memory, as a training step's gradients do), each call
// followed by a memcpy of a buffer of the same size on every rank at once.
// Prints the medians (slowest rank) per size. The path is picked by the
// environment, so that variants alternate job by job:
//
//   SC=1 (single copy for every size) or SC=0 (default: no single copy),
//   PMIN=bytes (the pipelined path's lower bound), PPIECE=bytes (its piece)
//   kolorun -np 2 build/bench/shm_alone 1024,16384,65536 [calls]   # sizes in KiB
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ops/shm_allreduce.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double MedianMicros(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2] * 1e6;
}

int64_t EnvBytes(const char* name, int64_t otherwise) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoll(v) : otherwise;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  kolo::ShmAllreduce::Options options;
  options.single_copy = EnvBytes("SC", 0) != 0;
  options.single_copy_min_bytes = 1;
  options.choose_path = false;
  options.pipelined_min_bytes = EnvBytes("PMIN", options.pipelined_min_bytes);
  options.pipelined_piece_bytes = EnvBytes("PPIECE", options.pipelined_piece_bytes);
  auto shm = kolo::ShmAllreduce::Create(MPI_COMM_WORLD, options);
  if (!shm.ok()) {
    std::fprintf(stderr, "%s\n", shm.status().ToString().c_str());
    return 1;
  }
  const size_t pool = size_t{256} << 20;
  std::vector<char> a(pool, 0), copy(pool, 0);
  const int calls = argc > 2 ? std::atoi(argv[2]) : 20;
  std::vector<size_t> sizes;
  for (char* p = argc > 1 ? argv[1] : nullptr; p != nullptr && *p != '\0';) {
    sizes.push_back(static_cast<size_t>(std::strtoull(p, &p, 10)) << 10);
    if (*p == ',') ++p;
  }
  for (size_t bytes : sizes) {
    for (int cold = 0; cold < 2; ++cold) {
      const size_t buffers = cold ? pool / bytes : 1;
      std::vector<double> allreduce, memcpy_s;
      for (int i = 0; i < calls + 2; ++i) {
        char* x = a.data() + (static_cast<size_t>(i) % buffers) * bytes;
        MPI_Barrier(MPI_COMM_WORLD);
        auto t = Clock::now();
        kolo::Status s = shm.value()->Allreduce(x, static_cast<int64_t>(bytes / 4),
                                                kolo::DataType::kFloat32, kolo::ReduceOp::kSum);
        const double reduce = Seconds(t);
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          return 1;
        }
        const size_t next = (static_cast<size_t>(i + 1) % buffers) * bytes;
        MPI_Barrier(MPI_COMM_WORLD);
        t = Clock::now();
        std::memcpy(copy.data() + next, a.data() + next, bytes);
        if (i >= 2) {  // the first two warm up
          allreduce.push_back(reduce);
          memcpy_s.push_back(Seconds(t));
        }
      }
      double med[2] = {MedianMicros(allreduce), MedianMicros(memcpy_s)};
      MPI_Allreduce(MPI_IN_PLACE, med, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (rank == 0) {
        std::printf("%8zu KiB %s  allreduce %10.1f us  memcpy %9.1f us  ratio %.2f\n", bytes >> 10,
                    cold ? "cold" : "hot ", med[0], med[1], med[0] / med[1]);
      }
    }
  }
  shm.value().reset();
  MPI_Finalize();
  return 0;
}
