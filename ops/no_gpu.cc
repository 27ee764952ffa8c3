// The GPU interface in a build without CUDA: every call says so.
#include "ops/gpu.h"

namespace kolo {
namespace {

Status NotBuilt() {
  return Status::InvalidArgument(
      "this kolo build has no GPU support (built without CUDA/NCCL); move the tensor to the CPU "
      "or rebuild with KOLO_WITH_CUDA=ON");
}

class NoGpu : public Gpu {
 public:
  int DeviceCount() override { return 0; }
  Status CheckDevice(int, DataType) override { return NotBuilt(); }
  Result<std::shared_ptr<void>> MarkReady(int, void*) override { return NotBuilt(); }
  Status CheckStream(int, void*) override { return NotBuilt(); }
  std::unique_ptr<GpuComms> MakeComms(MPI_Comm) override { return std::make_unique<GpuComms>(); }
  Result<Token> Allreduce(GpuComms&, int, const std::vector<GpuTensor>&, DataType, ReduceOp, double,
                          double) override {
    return NotBuilt();
  }
  Result<Token> Broadcast(GpuComms&, int, const GpuTensor&, int64_t, int) override {
    return NotBuilt();
  }
  Result<Token> Allgatherv(GpuComms&, int, const GpuTensor&, int64_t, const std::vector<int64_t>&,
                           GpuOutput*) override {
    return NotBuilt();
  }
  Result<Token> Alltoallv(GpuComms&, int, const GpuTensor&, const std::vector<int64_t>&,
                          const std::vector<int64_t>&, GpuOutput*) override {
    return NotBuilt();
  }
  Result<Token> ReduceScatter(GpuComms&, int, const GpuTensor&, const std::vector<int64_t>&,
                              DataType, ReduceOp, double, double, GpuOutput*) override {
    return NotBuilt();
  }
  Result<bool> Poll(const Token&) override { return NotBuilt(); }
  Status OrderAfter(const Token&, void*) override { return NotBuilt(); }
};

}  // namespace

std::unique_ptr<Gpu> MakeGpu(const GpuOptions&) { return std::make_unique<NoGpu>(); }

bool NcclBuilt() { return false; }

int NcclVersionCode() { return 0; }

Status CopyDeviceToDevice(void*, const void*, int64_t, int) { return NotBuilt(); }

}  // namespace kolo
