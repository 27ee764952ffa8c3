// The flat host mover (mpi_mover.h).
#include "ops/mpi_mover.h"

#include <algorithm>
#include <climits>
#include <string>

#include "ops/adasum.h"

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

}  // namespace kolo
