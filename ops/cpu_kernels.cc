#include "cpu_kernels.h"

#include <algorithm>

namespace kolo {
namespace {

template <typename T>
void ScaleTyped(T* p, int64_t n, double factor) {
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(static_cast<double>(p[i]) * factor);
}

template <typename T>
void ScaleFloat(T* p, int64_t n, double factor) {
  const T f = static_cast<T>(factor);
  for (int64_t i = 0; i < n; ++i) p[i] *= f;
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void Scale16(uint16_t* p, int64_t n, double factor) {
  const float f = static_cast<float>(factor);
  for (int64_t i = 0; i < n; ++i) p[i] = FromF(ToF(p[i]) * f);
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void Reduce16(const uint16_t* in, uint16_t* inout, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      for (int64_t i = 0; i < n; ++i) inout[i] = FromF(ToF(in[i]) + ToF(inout[i]));
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < n; ++i) inout[i] = FromF(std::min(ToF(in[i]), ToF(inout[i])));
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < n; ++i) inout[i] = FromF(std::max(ToF(in[i]), ToF(inout[i])));
      break;
    case ReduceOp::kProduct:
      for (int64_t i = 0; i < n; ++i) inout[i] = FromF(ToF(in[i]) * ToF(inout[i]));
      break;
  }
}

}  // namespace

void ScaleBuffer(void* data, int64_t count, DataType dtype, double factor) {
  if (factor == 1.0 || count == 0) return;
  switch (dtype) {
    case DataType::kUInt8:
      ScaleTyped(static_cast<uint8_t*>(data), count, factor);
      break;
    case DataType::kInt8:
      ScaleTyped(static_cast<int8_t*>(data), count, factor);
      break;
    case DataType::kUInt16:
      ScaleTyped(static_cast<uint16_t*>(data), count, factor);
      break;
    case DataType::kInt16:
      ScaleTyped(static_cast<int16_t*>(data), count, factor);
      break;
    case DataType::kInt32:
      ScaleTyped(static_cast<int32_t*>(data), count, factor);
      break;
    case DataType::kInt64:
      ScaleTyped(static_cast<int64_t*>(data), count, factor);
      break;
    case DataType::kFloat32:
      ScaleFloat(static_cast<float*>(data), count, factor);
      break;
    case DataType::kFloat64:
      ScaleFloat(static_cast<double*>(data), count, factor);
      break;
    case DataType::kFloat16:
      Scale16<HalfToFloat, FloatToHalf>(static_cast<uint16_t*>(data), count, factor);
      break;
    case DataType::kBFloat16:
      Scale16<BFloat16ToFloat, FloatToBFloat16>(static_cast<uint16_t*>(data), count, factor);
      break;
    case DataType::kBool:
      break;  // rejected at enqueue
  }
}

void ReduceHalf(const uint16_t* in, uint16_t* inout, int64_t count, ReduceOp op, bool bfloat) {
  if (bfloat) {
    Reduce16<BFloat16ToFloat, FloatToBFloat16>(in, inout, count, op);
  } else {
    Reduce16<HalfToFloat, FloatToHalf>(in, inout, count, op);
  }
}

}  // namespace kolo
