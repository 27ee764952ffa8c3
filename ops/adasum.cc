#include "ops/adasum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "ops/cpu_kernels.h"
#include "ops/mpi.h"

namespace kolo::adasum {
namespace {

// Adasum's point-to-point messages on the set's communicator; nothing else
// sends point-to-point messages there.
constexpr int kTag = 0x4164;
// Messages go in pieces of at most this many bytes (Horovod's default
// HOROVOD_ADASUM_MPI_CHUNK_SIZE): MPI counts are ints.
constexpr int64_t kPieceBytes = int64_t{1} << 30;

int64_t Total(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

// Four partial sums, so that the loop vectorizes without reordering one sum.
template <typename T, typename ToDouble>
DotAndNorms DotTyped(const T* a, const T* b, int64_t n, ToDouble to_double) {
  double dot[4] = {0, 0, 0, 0}, aa[4] = {0, 0, 0, 0}, bb[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      const double x = to_double(a[i + k]), y = to_double(b[i + k]);
      dot[k] += x * y;
      aa[k] += x * x;
      bb[k] += y * y;
    }
  }
  for (; i < n; ++i) {
    const double x = to_double(a[i]), y = to_double(b[i]);
    dot[0] += x * y;
    aa[0] += x * x;
    bb[0] += y * y;
  }
  DotAndNorms r;
  r.dot = (dot[0] + dot[1]) + (dot[2] + dot[3]);
  r.a_squared = (aa[0] + aa[1]) + (aa[2] + aa[3]);
  r.b_squared = (bb[0] + bb[1]) + (bb[2] + bb[3]);
  return r;
}

template <typename T>
void ScaledAddTyped(T* a, double ca, const T* b, double cb, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = static_cast<T>(ca * a[i] + cb * b[i]);
}

void ScaledAddHalf(uint16_t* a, double ca, const uint16_t* b, double cb, int64_t n) {
  const float fa = static_cast<float>(ca), fb = static_cast<float>(cb);
  for (int64_t i = 0; i < n; ++i)
    a[i] = FloatToHalf(fa * HalfToFloat(a[i]) + fb * HalfToFloat(b[i]));
}

// Sends `send_bytes` to `peer` and receives `recv_bytes` from it, in pieces.
// Both partners take the same number of steps: one's send is the other's
// receive.
Status Exchange(MPI_Comm comm, int peer, const uint8_t* send, int64_t send_bytes, uint8_t* recv,
                int64_t recv_bytes) {
  const int64_t longest = std::max(send_bytes, recv_bytes);
  for (int64_t done = 0; done < longest; done += kPieceBytes) {
    const int64_t s = std::clamp<int64_t>(send_bytes - done, 0, kPieceBytes);
    const int64_t r = std::clamp<int64_t>(recv_bytes - done, 0, kPieceBytes);
    KOLO_RETURN_IF_ERROR(
        MpiStatus(MPI_Sendrecv(send + std::min(done, send_bytes), static_cast<int>(s), MPI_BYTE,
                               peer, kTag, recv + std::min(done, recv_bytes), static_cast<int>(r),
                               MPI_BYTE, peer, kTag, comm, MPI_STATUS_IGNORE),
                  "MPI_Sendrecv"));
  }
  return Status::OK();
}

// Sums `values` over the 2 * distance ranks of comms.pairs that share
// rank / (2 * distance), by recursive doubling (then over comms.slices).
// Addition is commutative, and every rank adds the same pairs of partial sums
// in the same tree, so every rank gets the same bits: the two ranks of a pair
// compute the same coefficients.
Status SumOverGroup(const Comms& comms, int rank, int distance, std::vector<double>* values,
                    std::vector<double>* theirs) {
  theirs->resize(values->size());
  const int64_t bytes = static_cast<int64_t>(values->size() * sizeof(double));
  for (int step = 1; step <= distance; step <<= 1) {
    KOLO_RETURN_IF_ERROR(Exchange(comms.pairs, rank ^ step,
                                  reinterpret_cast<const uint8_t*>(values->data()), bytes,
                                  reinterpret_cast<uint8_t*>(theirs->data()), bytes));
    for (size_t i = 0; i < values->size(); ++i) (*values)[i] += (*theirs)[i];
  }
  if (comms.slices == MPI_COMM_NULL) return Status::OK();
  return MpiStatus(MPI_Allreduce(MPI_IN_PLACE, values->data(), static_cast<int>(values->size()),
                                 MPI_DOUBLE, MPI_SUM, comms.slices),
                   "MPI_Allreduce");
}

// One level's combination: `mine` (this rank's kept half) becomes the Adasum
// of itself and `theirs` (the partner's copy of it), tensor by tensor, with
// the dot products and norms of the whole tensors over the group.
Status CombineLevel(const Comms& comms, int rank, int distance, const Halving& h, uint8_t* mine,
                    const uint8_t* theirs, DataType dtype, std::vector<double>* sums,
                    std::vector<double>* scratch) {
  const size_t elem = DataTypeSize(dtype);
  const size_t tensors = h.kept.size();
  // Per tensor: the dot product, the left rank's squared norm, the right's.
  sums->assign(3 * tensors, 0.0);
  size_t offset = 0;
  for (size_t t = 0; t < tensors; ++t) {
    const DotAndNorms d = ComputeDotAndNorms(mine + offset, theirs + offset, h.kept[t], dtype);
    (*sums)[3 * t] = d.dot;
    (*sums)[3 * t + 1] = h.left ? d.a_squared : d.b_squared;
    (*sums)[3 * t + 2] = h.left ? d.b_squared : d.a_squared;
    offset += static_cast<size_t>(h.kept[t]) * elem;
  }
  KOLO_RETURN_IF_ERROR(SumOverGroup(comms, rank, distance, sums, scratch));
  offset = 0;
  for (size_t t = 0; t < tensors; ++t) {
    const double left = (*sums)[3 * t + 1], right = (*sums)[3 * t + 2];
    const Coefficients c = Combine((*sums)[3 * t], h.left ? left : right, h.left ? right : left);
    ScaledAdd(mine + offset, c.a, theirs + offset, c.b, h.kept[t], dtype);
    offset += static_cast<size_t>(h.kept[t]) * elem;
  }
  return Status::OK();
}

}  // namespace

bool Supports(DataType dtype) {
  return dtype == DataType::kFloat16 || dtype == DataType::kFloat32 || dtype == DataType::kFloat64;
}

bool IsPowerOfTwo(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

Halving Halve(const std::vector<int64_t>& counts, bool left) {
  Halving h;
  h.left = left;
  const int64_t first_half = Total(counts) / 2;
  int64_t before = 0;  // elements of the tensors before this one
  for (int64_t c : counts) {
    const int64_t in_first = std::clamp<int64_t>(first_half - before, 0, c);
    h.kept.push_back(left ? in_first : c - in_first);
    h.given.push_back(left ? c - in_first : in_first);
    h.kept_total += h.kept.back();
    h.given_total += h.given.back();
    before += c;
  }
  return h;
}

std::vector<Halving> Plan(const std::vector<int64_t>& counts, int rank, int size) {
  std::vector<Halving> levels;
  std::vector<int64_t> part = counts;
  for (int distance = 1; distance < size; distance <<= 1) {
    levels.push_back(Halve(part, (rank & distance) == 0));
    part = levels.back().kept;
  }
  return levels;
}

DotAndNorms ComputeDotAndNorms(const void* a, const void* b, int64_t count, DataType dtype) {
  const auto same = [](auto x) { return static_cast<double>(x); };
  switch (dtype) {
    case DataType::kFloat32:
      return DotTyped(static_cast<const float*>(a), static_cast<const float*>(b), count, same);
    case DataType::kFloat64:
      return DotTyped(static_cast<const double*>(a), static_cast<const double*>(b), count, same);
    case DataType::kFloat16:
      return DotTyped(static_cast<const uint16_t*>(a), static_cast<const uint16_t*>(b), count,
                      [](uint16_t x) { return static_cast<double>(HalfToFloat(x)); });
    default:
      return DotAndNorms();
  }
}

Coefficients Combine(double dot, double a_squared, double b_squared) {
  static const double kSmallest = std::sqrt(DBL_MIN);
  Coefficients c;
  if (a_squared >= kSmallest) c.a = 1.0 - dot / a_squared * 0.5;
  if (b_squared >= kSmallest) c.b = 1.0 - dot / b_squared * 0.5;
  return c;
}

void ScaledAdd(void* a, double ca, const void* b, double cb, int64_t count, DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return ScaledAddTyped(static_cast<float*>(a), ca, static_cast<const float*>(b), cb, count);
    case DataType::kFloat64:
      return ScaledAddTyped(static_cast<double*>(a), ca, static_cast<const double*>(b), cb, count);
    case DataType::kFloat16:
      return ScaledAddHalf(static_cast<uint16_t*>(a), ca, static_cast<const uint16_t*>(b), cb,
                           count);
    default:
      return;
  }
}

Status Allreduce(const Comms& comms, void* buffer, const std::vector<int64_t>& counts,
                 DataType dtype, std::vector<uint8_t>* scratch) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comms.pairs, &rank);
  MPI_Comm_size(comms.pairs, &size);
  if (!Supports(dtype)) {
    return Status::InvalidArgument(std::string("Adasum reduces float16, float32 and float64 "
                                               "tensors, not ") +
                                   DataTypeName(dtype));
  }
  if (!IsPowerOfTwo(size)) {
    return Status::Unimplemented("Running Adasum with non-power of 2 ranks is not supported yet.");
  }
  const std::vector<Halving> plan = Plan(counts, rank, size);
  if (plan.empty()) return Status::OK();
  const size_t elem = DataTypeSize(dtype);
  const size_t bytes = static_cast<size_t>(Total(counts)) * elem;
  if (scratch->size() < bytes) scratch->resize(bytes);
  // `part`: this rank's part of the buffer; `copy`: the same place in scratch,
  // where the partner's copy of it arrives.
  auto* part = static_cast<uint8_t*>(buffer);
  uint8_t* copy = scratch->data();
  std::vector<double> sums, theirs;
  // Vector halving, distance doubling: a reduce-scatter that combines.
  int distance = 1;
  for (const Halving& h : plan) {
    KOLO_RETURN_IF_ERROR(Exchange(comms.pairs, rank ^ distance, part + h.given_offset() * elem,
                                  h.given_total * static_cast<int64_t>(elem),
                                  copy + h.kept_offset() * elem,
                                  h.kept_total * static_cast<int64_t>(elem)));
    part += h.kept_offset() * elem;
    copy += h.kept_offset() * elem;
    KOLO_RETURN_IF_ERROR(CombineLevel(comms, rank, distance, h, part, copy, dtype, &sums, &theirs));
    distance <<= 1;
  }
  // Distance halving: the allgather of the combined parts.
  for (auto h = plan.rbegin(); h != plan.rend(); ++h) {
    distance >>= 1;
    uint8_t* neighbour = h->left ? part + h->kept_total * elem : part - h->given_total * elem;
    KOLO_RETURN_IF_ERROR(Exchange(comms.pairs, rank ^ distance, part,
                                  h->kept_total * static_cast<int64_t>(elem), neighbour,
                                  h->given_total * static_cast<int64_t>(elem)));
    if (!h->left) part = neighbour;
  }
  return Status::OK();
}

}  // namespace kolo::adasum
