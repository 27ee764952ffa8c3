// The hierarchical host mover: allreduce within each host, across hosts, and
// within each host again (host_mover.h: MakeHierarchicalMover, Hierarchy).
#include <memory>
#include <string>
#include <vector>

#include "base/rows.h"
#include "ops/mpi_mover.h"
#include "ops/ulfm.h"

namespace kolo {
namespace {

// Local rank i reduces block i of the host's ranks, the hosts allreduce their
// block i among local ranks i, and each host gathers its blocks. Every element
// is reduced in the same order everywhere, so every rank ends with the same bits.
class HierarchicalMover : public MpiMover {
 public:
  HierarchicalMover(MPI_Comm comm, const MpiOps* ops, int64_t piece_bytes,
                    std::unique_ptr<Hierarchy> hierarchy)
      : MpiMover(comm, ops, piece_bytes), hierarchy_(std::move(hierarchy)) {}

  const char* AllreduceActivity() const override { return "MPI_HIERARCHICAL_ALLREDUCE"; }
  void Abort() override {
    RevokeIfUsable(hierarchy_->local.get());
    RevokeIfUsable(hierarchy_->cross.get());
  }

 protected:
  Status AllreducePiece(char* p, int count, size_t elem, MPI_Datatype type, MPI_Op op) override {
    MPI_Comm local = hierarchy_->local.get();
    const int local_size = hierarchy_->local_size, local_rank = hierarchy_->local_rank;
    std::vector<int> counts(local_size), displs(local_size);
    for (int i = 0; i < local_size; ++i) {
      counts[i] = static_cast<int>(SplitRows(count, local_size, i));
      displs[i] = static_cast<int>(SplitBegin(count, local_size, i));
    }
    block_.resize(static_cast<size_t>(counts[local_rank]) * elem);
    KOLO_RETURN_IF_ERROR(
        MpiStatus(MPI_Reduce_scatter(p, block_.data(), counts.data(), type, op, local),
                  "MPI_Reduce_scatter"));
    KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Allreduce(MPI_IN_PLACE, block_.data(), counts[local_rank],
                                                 type, op, hierarchy_->cross.get()),
                                   "MPI_Allreduce"));
    return MpiStatus(MPI_Allgatherv(block_.data(), counts[local_rank], type, p, counts.data(),
                                    displs.data(), type, local),
                     "MPI_Allgatherv");
  }

 private:
  std::unique_ptr<Hierarchy> hierarchy_;
  std::vector<char> block_;  // this rank's block
};

}  // namespace

std::unique_ptr<HostMover> MakeHierarchicalMover(MPI_Comm comm, const MpiOps* ops,
                                                 int64_t piece_bytes,
                                                 std::unique_ptr<Hierarchy> hierarchy) {
  return std::make_unique<HierarchicalMover>(comm, ops, piece_bytes, std::move(hierarchy));
}

Result<std::unique_ptr<Hierarchy>> Hierarchy::Create(MPI_Comm comm, std::string* why_not) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm raw_local = MPI_COMM_NULL;
  KOLO_RETURN_IF_ERROR(SplitByHost(comm, rank, &raw_local));
  MpiComm local(raw_local);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(local.get(), &local_rank);
  MPI_Comm_size(local.get(), &local_size);
  int sizes[2] = {local_size, -local_size};  // min and max in one call
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Allreduce(MPI_IN_PLACE, sizes, 2, MPI_INT, MPI_MIN, comm), "MPI_Allreduce"));
  if (sizes[0] == size) {
    *why_not = "all ranks run on one host";
    return std::unique_ptr<Hierarchy>();
  }
  if (sizes[0] != -sizes[1]) {
    *why_not = "hosts run different numbers of ranks (" + std::to_string(sizes[0]) + " to " +
               std::to_string(-sizes[1]) + ")";
    return std::unique_ptr<Hierarchy>();
  }
  MPI_Comm raw_cross = MPI_COMM_NULL;
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_split(comm, local_rank, rank, &raw_cross), "MPI_Comm_split"));
  auto h = std::make_unique<Hierarchy>();
  h->local = std::move(local);
  h->cross = MpiComm(raw_cross);
  h->local_rank = local_rank;
  h->local_size = local_size;
  MPI_Comm_set_errhandler(h->local.get(), MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(h->cross.get(), MPI_ERRORS_RETURN);
  return h;
}

}  // namespace kolo
