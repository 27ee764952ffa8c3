// GPU allreduce sweep: one float32 device buffer from 4 B to 1 GiB (powers
// of 4, then 1 GiB) through kolo's C++ API and through a direct ncclAllReduce
// on the same buffer and a communicator of the same ranks, in the same run,
// alternating in rounds. Both are timed as a caller sees them: host clock from
// the call until the result is on the device (kolo: Enqueue + Wait +
// cudaStreamSynchronize of the caller's stream, which with
// KOLO_ENABLE_ASYNC_COMPLETION=1 is where the result is ordered; NCCL: the
// call + cudaStreamSynchronize). With `tensors` > 1 each size is split into
// that many tensors: kolo's grouped allreduce (the fusion buffer, or one NCCL
// group with KOLO_NCCL_GROUP_MIN_BYTES) against that many ncclAllReduce in
// one ncclGroupStart/End. Prints one JSON object on rank 0; progress on
// stderr. Built with CUDA only; run by scripts/gpu_check.sh (step speed).
// Exits 77 (skipped) where no CUDA device answers.
//
//   mpirun -np 1 build/bench/gpu_allreduce [max_bytes] [seconds_per_size] [tensors] > out.json
// (under kolorun every line of the JSON would carry its rank's tag)
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kolo/mpi_handle.h"
#include "kolo/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "gpu_allreduce: %s\n", what.c_str());
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) Die(std::string(what) + ": " + cudaGetErrorString(e));
}

void Check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) Die(std::string(what) + ": " + ncclGetErrorString(r));
}

// "NAME": "value" (null where unset), for the JSON's record of kolo's settings.
std::string Setting(const char* name) {
  const char* v = std::getenv(name);
  return std::string("\"") + name + "\": " + (v ? "\"" + std::string(v) + "\"" : "null");
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_bytes = argc > 1 ? std::atoll(argv[1]) : (int64_t{1} << 30);
  const double budget = argc > 2 ? std::atof(argv[2]) : 0.5;
  const int tensors = argc > 3 ? std::max(1, std::atoi(argv[3])) : 1;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0, size = 1, devices = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    if (rank == 0) std::fprintf(stderr, "gpu_allreduce: SKIPPED: no CUDA device on this machine\n");
    MPI_Finalize();
    return 77;
  }
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  Check(cudaSetDevice((local ? std::atoi(local) : 0) % devices), "cudaSetDevice");

  ncclUniqueId id;
  if (rank == 0) Check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t nccl;
  Check(ncclCommInitRank(&nccl, size, id, rank), "ncclCommInitRank");
  cudaStream_t stream;
  Check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");

  kolo::InitOptions init;
  init.comm = kolo::HandleOfComm(MPI_COMM_WORLD);
  auto rt = kolo::Runtime::Create(init);
  if (!rt.ok()) Die(rt.status().ToString());
  kolo::Runtime& kolo_rt = *rt.value();

  float* buf = nullptr;
  Check(cudaMalloc(&buf, static_cast<size_t>(max_bytes)), "cudaMalloc");
  Check(cudaMemset(buf, 0, static_cast<size_t>(max_bytes)), "cudaMemset");
  cudaDeviceProp prop;
  Check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, nccl_version = 0;
  cudaDriverGetVersion(&driver);
  ncclGetVersion(&nccl_version);

  std::string json =
      "{\"benchmark\": \"gpu_allreduce\", \"np\": " + std::to_string(size) + ", \"gpu\": \"" +
      prop.name + "\", \"cuda_driver\": " + std::to_string(driver) +
      ", \"nccl\": " + std::to_string(nccl_version) + ", \"tensors\": " + std::to_string(tensors) +
      ", \"settings\": {" + Setting("KOLO_ENABLE_ASYNC_COMPLETION") + ", " +
      Setting("KOLO_NCCL_GROUP_MIN_BYTES") + "}, \"rows\": [";
  std::vector<int64_t> sizes;
  for (int64_t b = 4 * tensors; b < max_bytes; b *= 4) sizes.push_back(b);
  sizes.push_back(max_bytes);
  bool first = true;
  for (int64_t bytes : sizes) {
    const int64_t count = bytes / 4 / tensors;  // per tensor
    std::vector<kolo::TensorView> views;
    for (int k = 0; k < tensors; ++k) {
      views.push_back({buf + k * count, kolo::DataType::kFloat32, {count}, 0});
    }
    kolo::AllreduceOptions opts;
    opts.op = kolo::ReduceOp::kSum;
    opts.name = "gpu_sweep." + std::to_string(bytes);
    opts.cuda_stream = stream;
    auto nccl_once = [&] {
      if (tensors > 1) Check(ncclGroupStart(), "ncclGroupStart");
      for (int k = 0; k < tensors; ++k) {
        float* part = buf + k * count;
        Check(ncclAllReduce(part, part, static_cast<size_t>(count), ncclFloat32, ncclSum, nccl,
                            stream),
              "ncclAllReduce");
      }
      if (tensors > 1) Check(ncclGroupEnd(), "ncclGroupEnd");
      Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    };
    auto kolo_once = [&] {
      auto h = tensors > 1 ? kolo_rt.EnqueueGroupedAllreduce(views, views, opts)
                           : kolo_rt.EnqueueAllreduce(views[0], views[0], opts);
      if (!h.ok()) Die(h.status().ToString());
      kolo::Status s = kolo_rt.Wait(h.value());
      if (!s.ok()) Die(s.ToString());
      Check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    };
    auto t = Clock::now();
    for (int i = 0; i < 3; ++i) nccl_once();
    double probe = Seconds(t) / 3;
    for (int i = 0; i < 3; ++i) kolo_once();
    MPI_Allreduce(MPI_IN_PLACE, &probe, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const int iterations = std::clamp(static_cast<int>(budget / 2 / probe), 8, 20000);
    std::vector<double> nccl_us, kolo_us;
    const int rounds = 4;
    for (int round = 0; round < rounds; ++round) {
      for (int i = 0; i < iterations / rounds; ++i) {
        t = Clock::now();
        nccl_once();
        nccl_us.push_back(Seconds(t) * 1e6);
      }
      for (int i = 0; i < iterations / rounds; ++i) {
        t = Clock::now();
        kolo_once();
        kolo_us.push_back(Seconds(t) * 1e6);
      }
    }
    double med[2] = {Median(nccl_us), Median(kolo_us)};
    MPI_Allreduce(MPI_IN_PLACE, med, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    char row[256];
    std::snprintf(row, sizeof(row),
                  "%s\n  {\"bytes\": %lld, \"iterations\": %zu, \"nccl_us\": %.2f, "
                  "\"kolo_us\": %.2f, \"nccl_over_kolo\": %.3f}",
                  first ? "" : ",", static_cast<long long>(bytes), kolo_us.size(), med[0], med[1],
                  med[0] / med[1]);
    json += row;
    first = false;
    if (rank == 0) {
      std::fprintf(stderr, "%11lld B  nccl %10.1f us  kolo %10.1f us  (nccl/kolo %.3f)\n",
                   static_cast<long long>(bytes), med[0], med[1], med[0] / med[1]);
    }
  }
  json += "\n]}\n";
  kolo::Status s = kolo_rt.Shutdown();
  if (!s.ok()) std::fprintf(stderr, "%s\n", s.ToString().c_str());
  ncclCommDestroy(nccl);
  cudaFree(buf);
  if (rank == 0) std::fputs(json.c_str(), stdout);
  MPI_Finalize();
  return 0;
}
