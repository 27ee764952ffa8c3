#include "cpu_kernels.h"

#include <algorithm>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace kolo {
namespace {

// Replaces every element x of a host buffer of `dtype` by f(x), with x of the
// element's own type (16-bit floats as float, rounded back once). Bool is
// left alone: scaling it is refused at enqueue.
template <typename F>
void MapElements(void* data, int64_t n, DataType dtype, F f) {
  auto map = [&](auto* p) {
    for (int64_t i = 0; i < n; ++i) p[i] = f(p[i]);
  };
  auto map16 = [&](uint16_t* p, float (*to_float)(uint16_t), uint16_t (*from_float)(float)) {
    for (int64_t i = 0; i < n; ++i) p[i] = from_float(f(to_float(p[i])));
  };
  switch (dtype) {
    case DataType::kUInt8:
      return map(static_cast<uint8_t*>(data));
    case DataType::kInt8:
      return map(static_cast<int8_t*>(data));
    case DataType::kUInt16:
      return map(static_cast<uint16_t*>(data));
    case DataType::kInt16:
      return map(static_cast<int16_t*>(data));
    case DataType::kInt32:
      return map(static_cast<int32_t*>(data));
    case DataType::kInt64:
      return map(static_cast<int64_t*>(data));
    case DataType::kFloat32:
      return map(static_cast<float*>(data));
    case DataType::kFloat64:
      return map(static_cast<double*>(data));
    case DataType::kFloat16:
      return map16(static_cast<uint16_t*>(data), HalfToFloat, FloatToHalf);
    case DataType::kBFloat16:
      return map16(static_cast<uint16_t*>(data), BFloat16ToFloat, FloatToBFloat16);
    case DataType::kBool:
      return;
  }
}

template <float (*ToF)(uint16_t), uint16_t (*FromF)(float)>
void Reduce16(const uint16_t* in, const uint16_t* acc, uint16_t* out, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
    case ReduceOp::kAdasum:  // never asked: not elementwise (ops/adasum.h)
      for (int64_t i = 0; i < n; ++i) out[i] = FromF(ToF(in[i]) + ToF(acc[i]));
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < n; ++i) out[i] = FromF(std::min(ToF(in[i]), ToF(acc[i])));
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < n; ++i) out[i] = FromF(std::max(ToF(in[i]), ToF(acc[i])));
      break;
    case ReduceOp::kProduct:
      for (int64_t i = 0; i < n; ++i) out[i] = FromF(ToF(in[i]) * ToF(acc[i]));
      break;
  }
}

}  // namespace

void ScaleBuffer(void* data, int64_t count, DataType dtype, double factor) {
  if (factor == 1.0 || count == 0) return;
  MapElements(data, count, dtype, [factor](auto x) {
    using T = decltype(x);
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<double>(x) * factor);
    } else {
      return x * static_cast<T>(factor);  // Horovod's: in the float type itself
    }
  });
}

void DivideBuffer(void* data, int64_t count, DataType dtype, int divisor) {
  if (divisor == 1 || count == 0) return;
  const double inverse = 1.0 / divisor;
  MapElements(data, count, dtype, [divisor, inverse](auto x) {
    using T = decltype(x);
    if constexpr (std::is_same_v<T, float>) {
      // float(x * (1.0 / n)) in double is float(x / n) rounded once (x / n is
      // never within double's error of a float midpoint), at a product's cost.
      return static_cast<float>(static_cast<double>(x) * inverse);
    } else {
      return static_cast<T>(x / static_cast<T>(divisor));
    }
  });
}

namespace {

// Sum and product of integers in the unsigned type of the same width, so that
// overflow wraps (as MPI's C implementation does) instead of being undefined.
template <typename T>
T WrapAdd(T a, T b) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
}
template <typename T>
T WrapMul(T a, T b) {
  using U = std::conditional_t<sizeof(T) < sizeof(unsigned), unsigned, std::make_unsigned_t<T>>;
  return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
}

// out[i] = op(in[i], acc[i]); `out` is `acc` (ReduceInto) or does not overlap it.
template <typename T>
void ReduceTyped(const T* in, const T* acc, T* out, int64_t count, ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
    case ReduceOp::kAdasum:  // never asked: not elementwise (ops/adasum.h)
      if constexpr (std::is_integral_v<T>) {
        for (int64_t i = 0; i < count; ++i) out[i] = WrapAdd(acc[i], in[i]);
      } else {
        for (int64_t i = 0; i < count; ++i) out[i] = acc[i] + in[i];
      }
      break;
    case ReduceOp::kProduct:
      if constexpr (std::is_integral_v<T>) {
        for (int64_t i = 0; i < count; ++i) out[i] = WrapMul(acc[i], in[i]);
      } else {
        for (int64_t i = 0; i < count; ++i) out[i] = acc[i] * in[i];
      }
      break;
    case ReduceOp::kMin:
      for (int64_t i = 0; i < count; ++i) out[i] = in[i] < acc[i] ? in[i] : acc[i];
      break;
    case ReduceOp::kMax:
      for (int64_t i = 0; i < count; ++i) out[i] = in[i] > acc[i] ? in[i] : acc[i];
      break;
  }
}

void ReduceBool(const uint8_t* in, const uint8_t* acc, uint8_t* out, int64_t count, ReduceOp op) {
  const bool all = op == ReduceOp::kMin || op == ReduceOp::kProduct;
  for (int64_t i = 0; i < count; ++i) {
    out[i] = all ? (acc[i] != 0 && in[i] != 0) : (acc[i] != 0 || in[i] != 0);
  }
}

}  // namespace

void ReduceInto(const void* in, void* inout, int64_t count, DataType dtype, ReduceOp op) {
  ReduceTo(in, inout, inout, count, dtype, op);
}

void ReduceTo(const void* in, const void* acc, void* out, int64_t count, DataType dtype,
              ReduceOp op) {
  auto typed = [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    ReduceTyped(static_cast<const T*>(in), static_cast<const T*>(acc), static_cast<T*>(out), count,
                op);
  };
  switch (dtype) {
    case DataType::kUInt8:
      return typed(static_cast<uint8_t*>(nullptr));
    case DataType::kInt8:
      return typed(static_cast<int8_t*>(nullptr));
    case DataType::kUInt16:
      return typed(static_cast<uint16_t*>(nullptr));
    case DataType::kInt16:
      return typed(static_cast<int16_t*>(nullptr));
    case DataType::kInt32:
      return typed(static_cast<int32_t*>(nullptr));
    case DataType::kInt64:
      return typed(static_cast<int64_t*>(nullptr));
    case DataType::kFloat32:
      return typed(static_cast<float*>(nullptr));
    case DataType::kFloat64:
      return typed(static_cast<double*>(nullptr));
    case DataType::kFloat16:
      return Reduce16<HalfToFloat, FloatToHalf>(static_cast<const uint16_t*>(in),
                                                static_cast<const uint16_t*>(acc),
                                                static_cast<uint16_t*>(out), count, op);
    case DataType::kBFloat16:
      return Reduce16<BFloat16ToFloat, FloatToBFloat16>(static_cast<const uint16_t*>(in),
                                                        static_cast<const uint16_t*>(acc),
                                                        static_cast<uint16_t*>(out), count, op);
    case DataType::kBool:
      return ReduceBool(static_cast<const uint8_t*>(in), static_cast<const uint8_t*>(acc),
                        static_cast<uint8_t*>(out), count, op);
  }
}

void ReduceHalf(const uint16_t* in, uint16_t* inout, int64_t count, ReduceOp op, bool bfloat) {
  if (bfloat) {
    Reduce16<BFloat16ToFloat, FloatToBFloat16>(in, inout, inout, count, op);
  } else {
    Reduce16<HalfToFloat, FloatToHalf>(in, inout, inout, count, op);
  }
}

void StreamingCopy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  auto* d = static_cast<uint8_t*>(dst);
  const auto* s = static_cast<const uint8_t*>(src);
  // Up to the first 16-byte boundary of the destination, then whole 64-byte
  // lines (SSE2, which every x86-64 has), then the tail.
  const size_t head = std::min(bytes, (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16);
  std::memcpy(d, s, head);
  d += head;
  s += head;
  bytes -= head;
  const size_t body = bytes / 64 * 64;
  for (size_t i = 0; i < body; i += 64) {
    const auto* in = reinterpret_cast<const __m128i*>(s + i);
    auto* out = reinterpret_cast<__m128i*>(d + i);
    __m128i a = _mm_loadu_si128(in), b = _mm_loadu_si128(in + 1);
    __m128i c = _mm_loadu_si128(in + 2), e = _mm_loadu_si128(in + 3);
    _mm_stream_si128(out, a);
    _mm_stream_si128(out + 1, b);
    _mm_stream_si128(out + 2, c);
    _mm_stream_si128(out + 3, e);
  }
  std::memcpy(d + body, s + body, bytes - body);
  _mm_sfence();
#else
  std::memcpy(dst, src, bytes);
#endif
}

}  // namespace kolo
