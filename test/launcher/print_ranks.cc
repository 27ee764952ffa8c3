// Prints the runtime's view of this rank and checks one allreduce, for the
// launcher's end-to-end tests: "rank R size S local L/LS cross C/CS sum X".
// With a file name as its argument, it then holds the job (MPI and its
// connections up) until that file exists, for a test to look at the job.
#include <unistd.h>

#include <cstdio>

#include "kolo/runtime.h"

int main(int argc, char** argv) {
  auto rt = kolo::Runtime::Create({});
  if (!rt.ok()) {
    std::fprintf(stderr, "%s\n", rt.status().ToString().c_str());
    return 1;
  }
  kolo::Runtime& r = *rt.value();
  float x = static_cast<float>(r.rank() + 1);
  kolo::AllreduceOptions opts;
  opts.op = kolo::ReduceOp::kSum;
  kolo::TensorView v{&x, kolo::DataType::kFloat32, {1}};
  kolo::Status s = r.Wait(r.EnqueueAllreduce(v, v, opts).value());
  if (!s.ok()) return 1;
  std::printf("rank %d size %d local %d/%d cross %d/%d sum %g\n", r.rank(), r.size(),
              r.local_rank(), r.local_size(), r.cross_rank(), r.cross_size(), x);
  std::fflush(stdout);
  while (argc > 1 && access(argv[1], F_OK) != 0) usleep(20000);
  return r.Shutdown().ok() ? 0 : 1;
}
