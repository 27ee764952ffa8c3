// The flat and hierarchical host movers, and MakeHostMover: the one place that
// picks a set's host mover (the shared-memory mover lives in shm_allreduce.cc).
#include <algorithm>
#include <climits>
#include <string>

#include "base/rows.h"
#include "ops/adasum.h"
#include "ops/mpi_mover.h"
#include "ops/shm_allreduce.h"

namespace kolo {
namespace {

// MPI counts are ints: large buffers go in pieces of at most this many elements.
constexpr int64_t kMaxPieceElements = 1 << 30;

Status CheckIntCount(int64_t n, const char* what) {
  if (n > INT_MAX) {
    return Status::Unimplemented(std::string(what) + " of more than 2 GiB per rank is not " +
                                 "supported on the MPI backend yet");
  }
  return Status::OK();
}

std::vector<int> ToInts(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

std::vector<int> Displacements(const std::vector<int64_t>& counts) {
  std::vector<int> d(counts.size(), 0);
  int64_t off = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    d[i] = static_cast<int>(off);
    off += counts[i];
  }
  return d;
}

// Elements per allreduce piece of `dtype` for `piece_bytes` (0: as large as MPI allows).
int64_t PieceElements(int64_t piece_bytes, DataType dtype) {
  if (piece_bytes <= 0) return kMaxPieceElements;
  return std::clamp<int64_t>(piece_bytes / static_cast<int64_t>(DataTypeSize(dtype)), 1,
                             kMaxPieceElements);
}

// Local rank i reduces block i of the host's ranks, the hosts allreduce their
// block i among local ranks i, and each host gathers its blocks. Every element
// is reduced in the same order everywhere, so every rank ends with the same bits.
class HierarchicalMover : public MpiMover {
 public:
  HierarchicalMover(MPI_Comm comm, const MpiOps* ops, int64_t piece_bytes,
                    std::unique_ptr<Hierarchy> hierarchy)
      : MpiMover(comm, ops, piece_bytes), hierarchy_(std::move(hierarchy)) {}

  const char* AllreduceActivity() const override { return "MPI_HIERARCHICAL_ALLREDUCE"; }

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

Status MpiMover::Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) {
  MPI_Datatype type = ops_->Datatype(dtype);
  MPI_Op mpi_op = ops_->Op(dtype, op);
  auto* p = static_cast<char*>(buffer);
  const size_t elem = DataTypeSize(dtype);
  const int64_t piece = PieceElements(piece_bytes_, dtype);
  for (int64_t done = 0; done < count;) {
    int n = static_cast<int>(std::min(count - done, piece));
    KOLO_RETURN_IF_ERROR(AllreducePiece(p + done * elem, n, elem, type, mpi_op));
    done += n;
  }
  return Status::OK();
}

Status MpiMover::Allgatherv(const void* send, int64_t send_bytes, void* recv,
                            const std::vector<int64_t>& recv_bytes) {
  int64_t total = 0;
  for (int64_t b : recv_bytes) total += b;
  KOLO_RETURN_IF_ERROR(CheckIntCount(total, "allgather"));
  std::vector<int> counts = ToInts(recv_bytes);
  std::vector<int> displs = Displacements(recv_bytes);
  return MpiStatus(MPI_Allgatherv(send, static_cast<int>(send_bytes), MPI_BYTE, recv, counts.data(),
                                  displs.data(), MPI_BYTE, comm_),
                   "MPI_Allgatherv");
}

Status MpiMover::Broadcast(void* buffer, int64_t bytes, int root) {
  auto* p = static_cast<char*>(buffer);
  for (int64_t done = 0; done < bytes;) {
    int n = static_cast<int>(std::min(bytes - done, kMaxPieceElements));
    KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Bcast(p + done, n, MPI_BYTE, root, comm_), "MPI_Bcast"));
    done += n;
  }
  return Status::OK();
}

Status MpiMover::Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                           const std::vector<int64_t>& recv_bytes) {
  int64_t total_send = 0, total_recv = 0;
  for (int64_t b : send_bytes) total_send += b;
  for (int64_t b : recv_bytes) total_recv += b;
  KOLO_RETURN_IF_ERROR(CheckIntCount(std::max(total_send, total_recv), "alltoall"));
  std::vector<int> sc = ToInts(send_bytes), rc = ToInts(recv_bytes);
  std::vector<int> sd = Displacements(send_bytes), rd = Displacements(recv_bytes);
  return MpiStatus(MPI_Alltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(),
                                 MPI_BYTE, comm_),
                   "MPI_Alltoallv");
}

Status MpiMover::AlltoallCounts(const std::vector<int64_t>& send, std::vector<int64_t>* recv) {
  recv->assign(send.size(), 0);
  return MpiStatus(MPI_Alltoall(send.data(), 1, MPI_INT64_T, recv->data(), 1, MPI_INT64_T, comm_),
                   "MPI_Alltoall");
}

Status MpiMover::ReduceScatter(const void* send, void* recv,
                               const std::vector<int64_t>& recv_counts, DataType dtype,
                               ReduceOp op) {
  int64_t total = 0;
  for (int64_t c : recv_counts) total += c;
  KOLO_RETURN_IF_ERROR(CheckIntCount(total, "reducescatter"));
  std::vector<int> counts = ToInts(recv_counts);
  return MpiStatus(MPI_Reduce_scatter(send, recv, counts.data(), ops_->Datatype(dtype),
                                      ops_->Op(dtype, op), comm_),
                   "MPI_Reduce_scatter");
}

Status MpiMover::Adasum(void* buffer, const std::vector<int64_t>& counts, DataType dtype) {
  adasum::Comms comms;
  comms.pairs = comm_;
  return adasum::Allreduce(comms, buffer, counts, dtype, &adasum_scratch_);
}

Status MpiMover::AllreducePiece(char* p, int n, size_t /*elem*/, MPI_Datatype type, MPI_Op op) {
  return MpiStatus(MPI_Allreduce(MPI_IN_PLACE, p, n, type, op, comm_), "MPI_Allreduce");
}

std::unique_ptr<HostMover> MakeMpiMover(MPI_Comm comm, const MpiOps* ops, int64_t piece_bytes) {
  return std::make_unique<MpiMover>(comm, ops, piece_bytes);
}

std::unique_ptr<HostMover> MakeHierarchicalMover(MPI_Comm comm, const MpiOps* ops,
                                                 int64_t piece_bytes,
                                                 std::unique_ptr<Hierarchy> hierarchy) {
  return std::make_unique<HierarchicalMover>(comm, ops, piece_bytes, std::move(hierarchy));
}

Result<HostMoverChoice> MakeHostMover(MPI_Comm comm, const MpiOps* ops,
                                      const HostMoverOptions& options) {
  HostMoverChoice choice;
  choice.why = "allreduce through MPI";
  if (options.shared_memory && options.piece_bytes > 0) {
    ShmAllreduce::Options shm_options;
    shm_options.piece_bytes = options.piece_bytes;
    shm_options.timeout_seconds = options.shm_timeout_seconds;
    shm_options.single_copy = options.shm_single_copy;
    auto shm = ShmAllreduce::Create(comm, shm_options);
    if (shm.ok()) {
      const ShmAllreduce& s = *shm.value();
      choice.why = "allreduce through shared memory (every member on this host)";
      if (s.single_copy()) {
        choice.why += ", with one copy from " +
                      std::to_string(shm_options.single_copy_min_bytes >> 10) + " to " +
                      std::to_string(shm_options.single_copy_max_bytes >> 10) +
                      " KiB (process_vm_readv)";
      } else if (!s.single_copy_why_not().empty()) {
        // Asked for (the default) and refused by the kernel: said once, on rank 0.
        choice.why += ", copying through slots: " + s.single_copy_why_not();
        choice.fallback = true;
      }
      choice.mover = MakeShmMover(comm, ops, std::move(shm).value());
      return choice;
    }
    choice.why += ": " + shm.status().message();
  }
  if (options.hierarchical) {
    std::string why_not;
    KOLO_ASSIGN_OR_RETURN(std::unique_ptr<Hierarchy> hierarchy, Hierarchy::Create(comm, &why_not));
    if (hierarchy) {
      choice.why = "hierarchical allreduce";
      choice.mover = MakeHierarchicalMover(comm, ops, options.piece_bytes, std::move(hierarchy));
      return choice;
    }
    choice.why = "KOLO_HIERARCHICAL_ALLREDUCE=1, but " + why_not + "; allreduce is flat";
    choice.fallback = true;
  }
  choice.mover = MakeMpiMover(comm, ops, options.piece_bytes);
  return choice;
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
