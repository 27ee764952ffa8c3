#include <algorithm>
#include <climits>
#include <string>

#include "backend.h"
#include "cpu_kernels.h"
#include "shm_allreduce.h"

namespace kolo {
namespace {

// MPI counts are ints: large buffers go in pieces of at most this many elements.
constexpr int64_t kMaxPieceElements = 1 << 30;

template <ReduceOp kOp, bool kBFloat>
void HalfOpFn(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  ReduceHalf(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), *len, kOp, kBFloat);
}

template <bool kBFloat>
constexpr MPI_User_function* kHalfFns[5] = {
    &HalfOpFn<ReduceOp::kSum, kBFloat>, &HalfOpFn<ReduceOp::kSum, kBFloat>,
    &HalfOpFn<ReduceOp::kMin, kBFloat>, &HalfOpFn<ReduceOp::kMax, kBFloat>,
    &HalfOpFn<ReduceOp::kProduct, kBFloat>};

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

class MpiBackend : public Backend {
 public:
  MpiBackend(MPI_Comm comm, const MpiOps* ops, int64_t piece_bytes,
             std::unique_ptr<ShmAllreduce> shm, std::unique_ptr<Hierarchy> hierarchy)
      : comm_(comm),
        ops_(ops),
        piece_bytes_(piece_bytes),
        shm_(std::move(shm)),
        hierarchy_(std::move(hierarchy)) {}

  Status Allreduce(void* buffer, int64_t count, DataType dtype, ReduceOp op) override {
    if (shm_) return shm_->Allreduce(buffer, count, dtype, op);
    MPI_Datatype type = ops_->Datatype(dtype);
    MPI_Op mpi_op = ops_->Op(dtype, op);
    auto* p = static_cast<char*>(buffer);
    const size_t elem = DataTypeSize(dtype);
    int64_t piece = kMaxPieceElements;
    if (piece_bytes_ > 0) {
      piece = std::clamp<int64_t>(piece_bytes_ / static_cast<int64_t>(elem), 1, kMaxPieceElements);
    }
    for (int64_t done = 0; done < count;) {
      int n = static_cast<int>(std::min(count - done, piece));
      if (hierarchy_) {
        KOLO_RETURN_IF_ERROR(HierarchicalAllreduce(p + done * elem, n, elem, type, mpi_op));
      } else {
        KOLO_RETURN_IF_ERROR(MpiStatus(
            MPI_Allreduce(MPI_IN_PLACE, p + done * elem, n, type, mpi_op, comm_), "MPI_Allreduce"));
      }
      done += n;
    }
    return Status::OK();
  }

  Status Allgatherv(const void* send, int64_t send_bytes, void* recv,
                    const std::vector<int64_t>& recv_bytes) override {
    int64_t total = 0;
    for (int64_t b : recv_bytes) total += b;
    KOLO_RETURN_IF_ERROR(CheckIntCount(total, "allgather"));
    std::vector<int> counts = ToInts(recv_bytes);
    std::vector<int> displs = Displacements(recv_bytes);
    return MpiStatus(MPI_Allgatherv(send, static_cast<int>(send_bytes), MPI_BYTE, recv,
                                    counts.data(), displs.data(), MPI_BYTE, comm_),
                     "MPI_Allgatherv");
  }

  Status Broadcast(void* buffer, int64_t bytes, int root) override {
    auto* p = static_cast<char*>(buffer);
    for (int64_t done = 0; done < bytes;) {
      int n = static_cast<int>(std::min(bytes - done, kMaxPieceElements));
      KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Bcast(p + done, n, MPI_BYTE, root, comm_), "MPI_Bcast"));
      done += n;
    }
    return Status::OK();
  }

  Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                   const std::vector<int64_t>& recv_bytes) override {
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

  Status AlltoallCounts(const std::vector<int64_t>& send, std::vector<int64_t>* recv) override {
    recv->assign(send.size(), 0);
    return MpiStatus(MPI_Alltoall(send.data(), 1, MPI_INT64_T, recv->data(), 1, MPI_INT64_T, comm_),
                     "MPI_Alltoall");
  }

  Status ReduceScatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override {
    int64_t total = 0;
    for (int64_t c : recv_counts) total += c;
    KOLO_RETURN_IF_ERROR(CheckIntCount(total, "reducescatter"));
    std::vector<int> counts = ToInts(recv_counts);
    return MpiStatus(MPI_Reduce_scatter(send, recv, counts.data(), ops_->Datatype(dtype),
                                        ops_->Op(dtype, op), comm_),
                     "MPI_Reduce_scatter");
  }

 private:
  // Local rank i reduces block i of the host's ranks, the hosts allreduce
  // their block i among local ranks i, and each host gathers its blocks.
  // Every element is reduced in the same order everywhere, so every rank
  // ends with the same bits.
  Status HierarchicalAllreduce(char* p, int count, size_t elem, MPI_Datatype type, MPI_Op op) {
    MPI_Comm local = hierarchy_->local.get();
    const int local_size = hierarchy_->local_size, local_rank = hierarchy_->local_rank;
    std::vector<int> counts(local_size), displs(local_size);
    for (int i = 0, off = 0; i < local_size; ++i) {
      counts[i] = count / local_size + (i < count % local_size ? 1 : 0);
      displs[i] = off;
      off += counts[i];
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

  MPI_Comm comm_;
  const MpiOps* ops_;
  int64_t piece_bytes_;
  std::unique_ptr<ShmAllreduce> shm_;
  std::unique_ptr<Hierarchy> hierarchy_;
  std::vector<char> block_;  // this rank's block of a hierarchical allreduce
};

}  // namespace

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
}

MpiComm& MpiComm::operator=(MpiComm&& o) noexcept {
  if (this != &o) {
    MpiComm old(comm_);
    comm_ = o.comm_;
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

Status MpiStatus(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return Status::OK();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::Internal(std::string(call) + " failed: " + std::string(text, len));
}

Result<std::unique_ptr<MpiOps>> MpiOps::Create() {
  std::unique_ptr<MpiOps> ops(new MpiOps());
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Type_contiguous(2, MPI_BYTE, &ops->half_), "MPI_Type"));
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Type_commit(&ops->half_), "MPI_Type_commit"));
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Type_contiguous(2, MPI_BYTE, &ops->bfloat_), "MPI_Type"));
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Type_commit(&ops->bfloat_), "MPI_Type_commit"));
  for (int i = 0; i < 5; ++i) {
    KOLO_RETURN_IF_ERROR(
        MpiStatus(MPI_Op_create(kHalfFns<false>[i], 1, &ops -> half_ops_[i]), "MPI_Op_create"));
    KOLO_RETURN_IF_ERROR(
        MpiStatus(MPI_Op_create(kHalfFns<true>[i], 1, &ops -> bfloat_ops_[i]), "MPI_Op_create"));
  }
  return ops;
}

MpiOps::~MpiOps() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Op* op : {half_ops_, bfloat_ops_}) {
    for (int i = 0; i < 5; ++i) {
      if (op[i] != MPI_OP_NULL) MPI_Op_free(&op[i]);
    }
  }
  if (half_ != MPI_DATATYPE_NULL) MPI_Type_free(&half_);
  if (bfloat_ != MPI_DATATYPE_NULL) MPI_Type_free(&bfloat_);
}

MPI_Datatype MpiOps::Datatype(DataType dtype) const {
  switch (dtype) {
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kUInt16:
      return MPI_UINT16_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
      return half_;
    case DataType::kBFloat16:
      return bfloat_;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kBool:
      return MPI_C_BOOL;
  }
  return MPI_DATATYPE_NULL;
}

MPI_Op MpiOps::Op(DataType dtype, ReduceOp op) const {
  if (dtype == DataType::kFloat16) return half_ops_[static_cast<int>(op)];
  if (dtype == DataType::kBFloat16) return bfloat_ops_[static_cast<int>(op)];
  if (dtype == DataType::kBool) {
    // Logical: sum/max = or, min/product = and.
    return (op == ReduceOp::kMin || op == ReduceOp::kProduct) ? MPI_LAND : MPI_LOR;
  }
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
  }
  return MPI_OP_NULL;
}

std::unique_ptr<Backend> MakeMpiBackend(MPI_Comm comm, const MpiOps* ops, int64_t piece_bytes,
                                        std::unique_ptr<ShmAllreduce> shm,
                                        std::unique_ptr<Hierarchy> hierarchy) {
  return std::make_unique<MpiBackend>(comm, ops, piece_bytes, std::move(shm), std::move(hierarchy));
}

Result<std::unique_ptr<Hierarchy>> Hierarchy::Create(MPI_Comm comm, std::string* why_not) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Comm raw_local = MPI_COMM_NULL;
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &raw_local),
                "MPI_Comm_split_type"));
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
