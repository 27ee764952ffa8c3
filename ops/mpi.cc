#include "ops/mpi.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "ops/cpu_kernels.h"

namespace kolo {
namespace {

template <ReduceOp kOp, bool kBFloat>
void HalfOpFn(void* in, void* inout, int* len, MPI_Datatype* /*type*/) {
  ReduceHalf(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout), *len, kOp, kBFloat);
}

// The elementwise ops, in the order of MpiOps' 16-bit op tables.
constexpr ReduceOp kElementwise[MpiOps::kElementwiseOps] = {ReduceOp::kSum, ReduceOp::kMin,
                                                            ReduceOp::kMax, ReduceOp::kProduct};

template <bool kBFloat>
constexpr MPI_User_function* kHalfFns[MpiOps::kElementwiseOps] = {
    &HalfOpFn<ReduceOp::kSum, kBFloat>, &HalfOpFn<ReduceOp::kMin, kBFloat>,
    &HalfOpFn<ReduceOp::kMax, kBFloat>, &HalfOpFn<ReduceOp::kProduct, kBFloat>};

// `op`'s place in kElementwise (kAverage reduces as the sum); -1 for Adasum,
// which is not elementwise (ops/adasum.h).
int ElementwiseIndex(ReduceOp op) {
  for (int i = 0; i < MpiOps::kElementwiseOps; ++i) {
    if (kElementwise[i] == (op == ReduceOp::kAverage ? ReduceOp::kSum : op)) return i;
  }
  return -1;
}

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
  const std::string what = MPI_Error_string(rc, text, &len) == MPI_SUCCESS
                               ? std::string(text, len)
                               : "MPI error " + std::to_string(rc);
  return Status::Internal(std::string(call) + " failed: " + what);
}

bool MpiUsable() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

namespace {

// This machine as a fixed-size record: its host name and the kernel's boot id
// (two containers with one host name on different machines differ in it).
constexpr int kHostIdBytes = 256;
std::vector<char> HostId() {
  std::vector<char> id(kHostIdBytes, '\0');
  gethostname(id.data(), 128);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string boot_id;
  std::getline(boot, boot_id);
  std::strncpy(id.data() + 128, boot_id.c_str(), kHostIdBytes - 129);
  return id;
}

}  // namespace

Status SplitByHost(MPI_Comm comm, int key, MPI_Comm* local) {
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, local),
                "MPI_Comm_split_type"));
  int size = 1, local_size = 1;
  MPI_Comm_size(comm, &size);
  MPI_Comm_size(*local, &local_size);
  int largest = local_size;
  KOLO_RETURN_IF_ERROR(
      MpiStatus(MPI_Allreduce(MPI_IN_PLACE, &largest, 1, MPI_INT, MPI_MAX, comm), "MPI_Allreduce"));
  if (largest > 1 || size == 1) return Status::OK();
  // Every rank alone: MPI may not know. Group by host identity instead.
  const std::vector<char> mine = HostId();
  std::vector<char> all(static_cast<size_t>(size) * kHostIdBytes);
  KOLO_RETURN_IF_ERROR(MpiStatus(
      MPI_Allgather(mine.data(), kHostIdBytes, MPI_CHAR, all.data(), kHostIdBytes, MPI_CHAR, comm),
      "MPI_Allgather"));
  int color = 0;
  while (!std::equal(mine.begin(), mine.end(), all.begin() + color * kHostIdBytes)) ++color;
  MPI_Comm_free(local);
  return MpiStatus(MPI_Comm_split(comm, color, key, local), "MPI_Comm_split");
}

Result<std::unique_ptr<MpiOps>> MpiOps::Create() {
  std::unique_ptr<MpiOps> ops(new MpiOps());
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Type_contiguous(2, MPI_BYTE, &ops->half_), "MPI_Type"));
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Type_commit(&ops->half_), "MPI_Type_commit"));
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Type_contiguous(2, MPI_BYTE, &ops->bfloat_), "MPI_Type"));
  KOLO_RETURN_IF_ERROR(MpiStatus(MPI_Type_commit(&ops->bfloat_), "MPI_Type_commit"));
  for (int i = 0; i < kElementwiseOps; ++i) {
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
    for (int i = 0; i < kElementwiseOps; ++i) {
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
  const int index = ElementwiseIndex(op);
  if (index < 0) return MPI_OP_NULL;  // Adasum: an MPI call with it fails
  if (dtype == DataType::kFloat16) return half_ops_[index];
  if (dtype == DataType::kBFloat16) return bfloat_ops_[index];
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
    case ReduceOp::kAdasum:
      break;
  }
  return MPI_OP_NULL;
}

}  // namespace kolo
