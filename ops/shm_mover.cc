// The shared-memory host mover: the flat mover with its allreduce through
// a ShmAllreduce segment (host_mover.h: MakeShmMover).
#include <memory>
#include <vector>

#include "ops/mpi_mover.h"
#include "ops/shm_allreduce.h"

namespace kolo {

namespace {

// Allreduce through the shared-memory segment (which pieces by itself).
class ShmMover : public MpiMover {
 public:
  ShmMover(MPI_Comm comm, const MpiOps* ops, std::unique_ptr<ShmAllreduce> shm)
      : MpiMover(comm, ops, 0), shm_(std::move(shm)) {}

  Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) override {
    return shm_->Allreduce(buffer, count, dtype, op);
  }
  Status AllreduceInto(const void* in, void* out, int64_t count, DataType dtype,
                       ReduceOp op) override {
    return shm_->Allreduce(in, out, count, dtype, op);
  }
  bool TakesParts(int64_t bytes) const override { return shm_->TakesParts(bytes); }
  Status AllreduceParts(const std::vector<Part>& parts, DataType dtype, ReduceOp op) override {
    std::vector<ShmAllreduce::Part> shm_parts;
    shm_parts.reserve(parts.size());
    for (const Part& p : parts) shm_parts.push_back({p.in, p.out, p.count});
    return shm_->AllreduceParts(shm_parts, dtype, op);
  }
  void SetPieceBytes(int64_t piece_bytes) override { shm_->SetPieceBytes(piece_bytes); }
  const char* AllreduceActivity() const override { return "SHM_ALLREDUCE"; }
  void Abort() override { shm_->Abort(); }

 private:
  std::unique_ptr<ShmAllreduce> shm_;
};

}  // namespace

std::unique_ptr<HostMover> MakeShmMover(MPI_Comm comm, const MpiOps* ops,
                                        std::unique_ptr<ShmAllreduce> shm) {
  return std::make_unique<ShmMover>(comm, ops, std::move(shm));
}

}  // namespace kolo
